#!/usr/bin/env bash
# rein's test command: the same checks run locally and in CI.
#   gofmt, go vet, the binaries, buf format/lint/breaking, gen/ up to date,
#   go test -race
#   (and the failpoint package again with -tags failpoints), the web console's
#   generated client and built assets up to date, its unit tests (npm test)
#   and browser tests, and the TypeScript and Python clients' generated code
#   and their tests against rein serve.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "tools"
bash scripts/tools.sh

step "gofmt"
unformatted=$(find . -name '*.go' -not -path './gen/*' -not -path './.bin/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
  echo "these files are not gofmt-formatted (run gofmt -w):"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...
go vet -tags reinbench ./...
go vet -tags failpoints ./internal/failpoint/

step "binaries: rein, and rein-bench beside it"
# The product binary holds no benchmark and no test node: rein-bench is
# built apart, with the tag that compiles the storage backends' raw
# ceilings in. (tests/layering checks that nothing under internal/ imports
# the server.)
go build -o .bin/rein ./cmd/rein
go build -tags reinbench -o .bin/rein-bench ./cmd/rein-bench
if go tool nm .bin/rein | grep -Eq 'reinhq/rein/cmd/rein-bench/bench\.'; then
  echo ".bin/rein contains cmd/rein-bench/bench: the benchmark belongs in rein-bench only"; exit 1
fi
if go tool nm .bin/rein | grep -Eq 'reinhq/rein/server/facetest\.'; then
  echo ".bin/rein contains server/facetest: it is for tests only"; exit 1
fi
ls -l .bin/rein .bin/rein-bench | awk '{printf "%s %.1f MiB\n", $NF, $5/1048576}'

step "buf format"
.bin/buf format -d --exit-code

step "buf lint"
.bin/buf lint

step "gen/ is generated from proto/"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
.bin/buf generate -o "$tmp"
if ! diff -r gen "$tmp/gen"; then
  echo "gen/ is stale: run '.bin/buf generate' and commit the result"; exit 1
fi

step "web console: web/src/gen and internal/console/dist are built from proto/ and web/"
(cd web && npm ci --no-audit --no-fund --loglevel=error)
.bin/buf generate --template buf.gen.web.yaml
(cd web && npm run --silent build)
stale=$(git status --porcelain -- web/src/gen internal/console/dist)
if [ -n "$stale" ]; then
  echo "the console's generated client or built assets differ from what is committed:"; echo "$stale"
  echo "run '(cd web && npm ci) && .bin/buf generate --template buf.gen.web.yaml && (cd web && npm run build)' and commit the result"; exit 1
fi

step "web console: its event lines are in step with the kinds rein declares"
# internal/eventkind's test writes and checks the fixture this reads.
(cd web && npm test --silent)

step "TypeScript client: clients/typescript/src/gen is generated from proto/"
(cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error)
.bin/buf generate --template buf.gen.typescript.yaml
stale=$(git status --porcelain -- clients/typescript/src/gen)
if [ -n "$stale" ]; then
  echo "the TypeScript client's generated code differs from what is committed:"; echo "$stale"
  echo "run '(cd clients/typescript && npm ci) && .bin/buf generate --template buf.gen.typescript.yaml' and commit the result"; exit 1
fi

step "TypeScript client: its tests against rein serve"
REIN_BIN="$PWD/.bin/rein" bash clients/typescript/test.sh

step "MCP face: driven by the official TypeScript SDK client against rein serve and rein mcp"
REIN_BIN="$PWD/.bin/rein" bash tests/mcp/test.sh

step "Webhooks: received and verified by the standardwebhooks npm package, through failures and a SIGKILL (REIN_WEBHOOK_RUNS=500 for the long form)"
REIN_BIN="$PWD/.bin/rein" bash tests/webhooks/test.sh

step "AG-UI face: AG-UI's own client package against rein serve --http-agui"
REIN_BIN="$PWD/.bin/rein" bash tests/agui/test.sh

step "A2A face: the official A2A JavaScript SDK client against rein serve --http-a2a"
REIN_BIN="$PWD/.bin/rein" bash tests/a2a/test.sh

step "Python client: generated code up to date, offline install into a venv, its tests against rein serve"
REIN_BIN="$PWD/.bin/rein" bash clients/python/test.sh

step "buf breaking (against the previous commit)"
if git rev-parse -q --verify HEAD~1 >/dev/null 2>&1 && [ "$(git rev-parse --is-shallow-repository)" = false ] \
   && git cat-file -e HEAD~1:buf.yaml 2>/dev/null; then
  # The previous commit's tree, with this checkout's third_party/ (which git
  # does not hold) so its imports resolve.
  mkdir -p "$tmp/prev"
  git archive HEAD~1 | tar -x -C "$tmp/prev"
  cp -r third_party "$tmp/prev/"
  .bin/buf breaking --against "$tmp/prev"
else
  echo "skipped: no previous commit with buf.yaml"
fi

step "go test -race"
# tools.sh built .bin/etcd and .bin/versitygw: the etcd member tests and the
# S3 tests fail rather than skip here.
for bin in etcd versitygw; do
  if [ ! -x ".bin/$bin" ]; then
    echo ".bin/$bin is missing after tools.sh: run 'bash scripts/tools.sh' and read its errors"; exit 1
  fi
done
export REIN_REQUIRE_ETCD=1
export REIN_REQUIRE_S3=1
# The browser tests (tests/browser) run, never skip: tools.sh installed chromium.
export REIN_REQUIRE_BROWSER=1
# tests/upgrade builds the old build from git history: a full clone has it
# and the test must then run; a shallow clone lacks it and the test says so.
if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = false ]; then
  export REIN_REQUIRE_OLD_BUILD=1
fi
# The power-loss tests (tests/powerloss, tests/internal/lossyfs) run, never
# skip: tools.sh installed fuse3, and CI runs as root with /dev/fuse. Their
# long sweep (every sync) runs with REIN_POWERLOSS_LONG=1, not here.
export REIN_REQUIRE_FUSE=1
# With the tag reinbench, the bench's own tests and those of what only
# rein-bench compiles in run too (cmd/rein-bench, cmd/rein-bench/bench).
go test -race -count=1 -tags reinbench ./...
# The failpoints themselves, which only a build tagged failpoints has
# (tests/crash builds its own tagged rein binary under ./... above).
go test -race -count=1 -tags failpoints ./internal/failpoint/
