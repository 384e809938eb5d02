#!/usr/bin/env bash
# The TypeScript client's tests: npm ci, the tsc build (dist/), then the
# tests (node --test) against real `rein serve` processes started by them.
#   REIN_BIN  the rein binary (default ../../.bin/rein, which scripts/test.sh builds)
set -euo pipefail
cd "$(dirname "$0")"

export REIN_BIN="$(realpath "${REIN_BIN:-../../.bin/rein}")"
if [ ! -x "$REIN_BIN" ]; then
  echo "no rein binary at $REIN_BIN: build one (cd ../.. && go build -o .bin/rein ./cmd/rein) or set REIN_BIN"; exit 1
fi

npm ci --no-audit --no-fund --loglevel=error
rm -rf dist
npx tsc -p tsconfig.json
# One test file at a time: each starts its own servers, and the machine
# may be small.
node --test --test-concurrency=1 --test-timeout=60000 --test-reporter=spec dist/test/*.test.js
