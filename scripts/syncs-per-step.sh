#!/usr/bin/env bash
# syncs-per-step.sh counts the fdatasync and fsync calls a step costs, with
# strace, in rein-bench's steps scenarios: steps (one run), steps-runs (16
# runs at once, or --runs) and steps-stream (one run, watched). For each, it
# counts the calls on the figure's store (its file and its log, FILE-wal)
# and on the baseline's bbolt file, which makes two durable commits a step.
#
#   bash scripts/syncs-per-step.sh [SCALE [RUNS]]   # defaults: 0.2 and 16
#
# It needs strace (apt-get install -y strace) and builds rein-bench into a
# temporary directory.
set -euo pipefail
scale=${1:-0.2}
runs=${2:-16}
cd "$(dirname "$0")/.."
command -v strace >/dev/null || { echo "strace is not installed: apt-get install -y strace" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -tags reinbench -o "$tmp/rein-bench" ./cmd/rein-bench
strace -f -y -qq -e trace=fdatasync,fsync -o "$tmp/trace" \
	"$tmp/rein-bench" steps --scale "$scale" --runs "$runs" --rounds 1 --json --dir "$tmp" >"$tmp/out.json"
for scenario in steps steps-runs steps-stream; do
	steps=$(grep "\"scenario\":\"$scenario\"" "$tmp/out.json" | sed -n 's/.*"steps":\([0-9.]*\).*/\1/p')
	dir="rein-bench-$scenario-[0-9]*"
	figure=$(grep -c "/$dir/\(figure\|stream\)-[0-9]*\.db" "$tmp/trace" || true)
	baseline=$(grep -c "/$dir/\(baseline\|plain\)-[0-9]*\.db" "$tmp/trace" || true)
	awk -v s="$scenario" -v n="$steps" -v f="$figure" -v b="$baseline" 'BEGIN {
		printf "%-12s %5d steps: rein %.3f syncs a step (%d), baseline %.3f (%d)\n", s, n, f / n, f, b / n, b
	}'
done
