#!/usr/bin/env bash
# rein's A2A face tested with the official A2A JavaScript SDK's client
# (@a2a-js/sdk, pinned in package-lock.json): npm ci, then the tests
# (node --test) against a real `rein serve --http … --http-a2a` they start.
#   REIN_BIN  the rein binary (default ../../.bin/rein, which scripts/test.sh builds)
set -euo pipefail
cd "$(dirname "$0")"

export REIN_BIN="$(realpath "${REIN_BIN:-../../.bin/rein}")"
if [ ! -x "$REIN_BIN" ]; then
  echo "no rein binary at $REIN_BIN: build one (cd ../.. && go build -o .bin/rein ./cmd/rein) or set REIN_BIN"; exit 1
fi
npm ci --no-audit --no-fund --loglevel=error
node --test --test-concurrency=1 --test-timeout=60000 --test-reporter=spec ./*.test.mjs
