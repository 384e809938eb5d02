#!/usr/bin/env bash
# A demo of several rein servers over one etcd cluster, on this machine:
# three etcd members and two rein replicas on 127.0.0.1. A refund run is
# started on replica A and watched from replica B; it is approved, and A is
# killed (SIGKILL) while the run's last model call is in flight; B takes the
# run over once A's lease ends, sends the call again, and the run completes.
# Everything it starts is stopped when it exits; its files go in a temporary
# directory that is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .bin/etcd ] || bash scripts/tools.sh
go build -o .bin/rein ./cmd/rein
rein=.bin/rein

dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }
wait_for() { # wait_for FILE TEXT: until FILE holds TEXT, 30s at most
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1:"; cat "$1"; exit 1
}

# The ports: etcd's clients, etcd's peers, and the two replicas. Set
# REIN_DEMO_PORTS to eight others ("c1 c2 c3 p1 p2 p3 a b") if these are taken.
read -r c1 c2 c3 p1 p2 p3 ra rb <<<"${REIN_DEMO_PORTS:-23791 23792 23793 23801 23802 23803 7301 7302}"
clients=("$c1" "$c2" "$c3")
peers=("$p1" "$p2" "$p3")

say "three etcd members: client ports $c1 $c2 $c3"
cluster=m1=http://127.0.0.1:$p1,m2=http://127.0.0.1:$p2,m3=http://127.0.0.1:$p3
for i in 0 1 2; do
  .bin/etcd --name "m$((i + 1))" --data-dir "$dir/m$i" \
    --listen-client-urls "http://127.0.0.1:${clients[$i]}" --advertise-client-urls "http://127.0.0.1:${clients[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${peers[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${peers[$i]}" \
    --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "rein-demo-$$" \
    --log-level error >"$dir/etcd$i.log" 2>&1 &
  pids+=($!)
done
etcd=127.0.0.1:$c1,127.0.0.1:$c2,127.0.0.1:$c3

say "two rein replicas: A on 127.0.0.1:$ra, B on 127.0.0.1:$rb (lease TTL 3s)"
serve() { # serve NAME PORT
  $rein serve --listen "127.0.0.1:$2" --name "$1" --etcd "$etcd" --etcd-timeout 15s --lease-ttl 3s \
    --tools fixture:examples/refund/tools.json --fixture-ledger "$dir/ledger" 2>"$dir/$1.log" &
  pids+=($!)
}
serve replica-a "$ra"
a=$!
serve replica-b "$rb"
wait_for "$dir/replica-a.log" "rein serving"
wait_for "$dir/replica-b.log" "rein serving"

say "start the refund run on A; it pauses for approval of the refund (exit code 10)"
code=0
$rein --server "127.0.0.1:$ra" run examples/refund/task.json --model script:examples/cluster/model.jsonl >"$dir/run.json" || code=$?
[ "$code" = 10 ] || { echo "rein run exited $code, want 10"; cat "$dir/run.json"; exit 1; }
run=$(sed -n 's/.*"run_id": *"\([^"]*\)".*/\1/p' "$dir/run.json" | head -1)
prop=$(sed -n 's/.*"proposal_id": *"\([^"]*\)".*/\1/p' "$dir/run.json" | head -1)
echo "run $run waits for approval of $prop"

say "watch it from B"
$rein --server "127.0.0.1:$rb" watch "$run" >"$dir/watch.txt" 2>&1 &
watcher=$!
pids+=($watcher)

say "approve on A: the refund is committed, and A calls the model for its final answer (6s)"
$rein --server "127.0.0.1:$ra" approve "$run" "$prop" --reason "duplicate charge confirmed" >/dev/null 2>&1 &
pids+=($!)
wait_for "$dir/watch.txt" "write_committed"
wait_for "$dir/watch.txt" "model_requested"
sleep 1

say "kill A (SIGKILL) while the model call is in flight"
kill -9 "$a"
killed=$(date +%s.%N)

say "B takes the run over once A's lease ends, sends the call again, and the run completes"
wait "$watcher" || true
done_at=$(date +%s.%N)
cat "$dir/watch.txt"
grep -q "completed" "$dir/watch.txt" || { echo "the run did not complete on B"; cat "$dir/replica-b.log"; exit 1; }
grep -q "run_taken" "$dir/watch.txt" || { echo "B did not record taking the run"; exit 1; }
printf '\nfrom the kill to the run completed on B: %.1fs (the lease TTL 3s, then the model call 6s)\n' "$(awk "BEGIN { print $done_at - $killed }")"
printf 'the refund was applied %s time(s) (the fixture ledger):\n' "$(grep -c applied "$dir/ledger")"
cat "$dir/ledger"
