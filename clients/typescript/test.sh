#!/usr/bin/env bash
# The TypeScript client's tests: npm ci, a type-check before any build, the
# tsc build (dist/), which must leave the checkout as it was (git status),
# then the tests (node --test) against real `rein serve` processes started
# by them.
#   REIN_BIN  the rein binary (default ../../.bin/rein, which scripts/test.sh builds)
set -euo pipefail
cd "$(dirname "$0")"

export REIN_BIN="$(realpath "${REIN_BIN:-../../.bin/rein}")"
if [ ! -x "$REIN_BIN" ]; then
  echo "no rein binary at $REIN_BIN: build one (cd ../.. && go build -o .bin/rein ./cmd/rein) or set REIN_BIN"; exit 1
fi

# The documented install (README.md, "Install") leaves the checkout as it
# was but for node_modules/ and dist/, which .gitignore names: no file
# git would list. Before the build, on a tree with no dist/, the sources,
# the tests and the examples type-check (against src/, not dist/).
rm -rf dist
checkout() {
  git status --porcelain --ignored -- . | grep -v -x -e '!! clients/typescript/node_modules/' -e '!! clients/typescript/dist/' || true
}
before=$(checkout)
npm ci --no-audit --no-fund --loglevel=error
npx tsc --noEmit -p tsconfig.json
npx tsc -p tsconfig.json
if [ "$(checkout)" != "$before" ]; then
  echo "clients/typescript/test.sh: the install wrote into the checkout (git status before, after):"
  diff <(echo "$before") <(checkout) || true
  exit 1
fi
# One test file at a time: each starts its own servers, and the machine
# may be small.
node --test --test-concurrency=1 --test-timeout=240000 --test-reporter=spec dist/test/*.test.js
