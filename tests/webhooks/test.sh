#!/usr/bin/env bash
# rein's webhooks received and verified by the standardwebhooks package
# (npm, pinned in package.json and package-lock.json): npm ci, then the
# test (node --test), which starts its own `rein serve`, kills it with
# SIGKILL mid-delivery and restarts it.
#   REIN_BIN           the rein binary (default ../../.bin/rein, which scripts/test.sh builds)
#   REIN_WEBHOOK_RUNS  runs with approvals to drive (default 60; 500 is the long form)
set -euo pipefail
cd "$(dirname "$0")"

export REIN_BIN="$(realpath "${REIN_BIN:-../../.bin/rein}")"
if [ ! -x "$REIN_BIN" ]; then
  echo "no rein binary at $REIN_BIN: build one (cd ../.. && go build -o .bin/rein ./cmd/rein) or set REIN_BIN"; exit 1
fi

npm ci --no-audit --no-fund --loglevel=error
node --test --test-concurrency=1 --test-reporter=spec ./*.test.mjs
