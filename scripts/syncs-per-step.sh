#!/usr/bin/env bash
# syncs-per-step.sh counts the fdatasync and fsync calls a step costs, with
# strace, for rein-bench's steps scenario (one run) and steps-runs (16 runs
# at once): the figure's store (figure-*.db and its log, figure-*.db-wal)
# against the baseline's bbolt file (baseline-*.db), which makes two
# durable commits a step.
#
#   bash scripts/syncs-per-step.sh [SCALE]     # SCALE defaults to 0.2
#
# It needs strace (apt-get install -y strace) and builds rein-bench into a
# temporary directory.
set -euo pipefail
scale=${1:-0.2}
cd "$(dirname "$0")/.."
command -v strace >/dev/null || { echo "strace is not installed: apt-get install -y strace" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -tags reinbench -o "$tmp/rein-bench" ./cmd/rein-bench
for scenario in steps steps-runs; do
	strace -f -y -qq -e trace=fdatasync,fsync -o "$tmp/trace" \
		"$tmp/rein-bench" "$scenario" --scale "$scale" --rounds 1 --json --dir "$tmp" >"$tmp/out.json"
	steps=$(sed -n 's/.*"steps":\([0-9.]*\).*/\1/p' "$tmp/out.json" | head -1)
	figure=$(grep -c '/figure-[0-9]*\.db' "$tmp/trace" || true)
	baseline=$(grep -c '/baseline-[0-9]*\.db>' "$tmp/trace" || true)
	awk -v s="$scenario" -v n="$steps" -v f="$figure" -v b="$baseline" 'BEGIN {
		printf "%-11s %d steps: rein %.3f syncs a step (%d), baseline %.3f (%d)\n", s, n, f / n, f, b / n, b
	}'
done
