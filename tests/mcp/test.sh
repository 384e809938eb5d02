#!/usr/bin/env bash
# rein's MCP face driven by the official TypeScript SDK client
# (@modelcontextprotocol/sdk, pinned in package.json and package-lock.json):
# npm ci, then the tests (node --test), which start their own `rein serve
# --http-mcp` and `rein mcp` processes.
#   REIN_BIN  the rein binary (default ../../.bin/rein, which scripts/test.sh builds)
set -euo pipefail
cd "$(dirname "$0")"

export REIN_BIN="$(realpath "${REIN_BIN:-../../.bin/rein}")"
if [ ! -x "$REIN_BIN" ]; then
  echo "no rein binary at $REIN_BIN: build one (cd ../.. && go build -o .bin/rein ./cmd/rein) or set REIN_BIN"; exit 1
fi

npm ci --no-audit --no-fund --loglevel=error
# One test at a time: each starts its own server, and the machine may be small.
node --test --test-concurrency=1 --test-timeout=60000 --test-reporter=spec ./*.test.mjs
