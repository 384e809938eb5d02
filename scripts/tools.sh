#!/usr/bin/env bash
# Builds the pinned code-generation tools (buf, protoc-gen-go,
# protoc-gen-go-grpc) from tools/go.mod into .bin/. Go's build cache makes a
# second run take a second.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .bin
(cd tools && go build -o ../.bin/ tool)

# protovalidate's buf/validate/validate.proto comes from its Go module, copied
# into third_party/ (git-ignored), which buf.yaml lists as a second module.
PROTOVALIDATE=github.com/bufbuild/protovalidate@v1.2.2
dir=$(go mod download -json "$PROTOVALIDATE" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ] || [ ! -f "$dir/proto/protovalidate/buf/validate/validate.proto" ]; then
  echo "tools.sh: could not download $PROTOVALIDATE" >&2; exit 1
fi
mkdir -p third_party/protovalidate/buf/validate
install -m 0644 "$dir/proto/protovalidate/buf/validate/validate.proto" third_party/protovalidate/buf/validate/validate.proto
