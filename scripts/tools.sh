#!/usr/bin/env bash
# Builds the pinned tools from tools/go.mod into .bin/: the code generators
# (buf, protoc-gen-go, protoc-gen-go-grpc), grpcurl, etcd's server and
# etcdctl (the etcd member processes the etcd tests and `rein-bench --store
# etcd` start), and versitygw (the S3-compatible server the archive tests
# start, internal/s3test). Go's build cache makes a second run take a second
# or two.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .bin
(
  cd tools
  # etcd's main packages end in /v3, so they are built under their own names.
  mapfile -t pkgs < <(go list tool | grep -v '^go\.etcd\.io/etcd/')
  go build -o ../.bin/ "${pkgs[@]}"
  go build -o ../.bin/etcd go.etcd.io/etcd/server/v3
  go build -o ../.bin/etcdctl go.etcd.io/etcd/etcdctl/v3
)

# protovalidate's buf/validate/validate.proto comes from its Go module, copied
# into third_party/ (git-ignored), which buf.yaml lists as a second module.
PROTOVALIDATE=github.com/bufbuild/protovalidate@v1.2.2
dir=$(go mod download -json "$PROTOVALIDATE" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ] || [ ! -f "$dir/proto/protovalidate/buf/validate/validate.proto" ]; then
  echo "tools.sh: could not download $PROTOVALIDATE" >&2; exit 1
fi
mkdir -p third_party/protovalidate/buf/validate
install -m 0644 "$dir/proto/protovalidate/buf/validate/validate.proto" third_party/protovalidate/buf/validate/validate.proto

# The web console's build (web/: npm ci, then esbuild) needs Node and npm;
# its browser tests (tests/browser) need Debian's chromium; the power-loss
# tests (tests/powerloss) mount FUSE with Debian's fuse3 (fusermount3).
# Installed here when missing, as root with apt-get (CI's machines); a
# no-op otherwise.
for pkg in node:nodejs npm:npm chromium:chromium fusermount3:fuse3; do
  cmd=${pkg%%:*} deb=${pkg#*:}
  if ! command -v "$cmd" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      [ -n "${apt_updated:-}" ] || { apt-get update -qq; apt_updated=1; }
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb"
    else
      echo "tools.sh: $cmd is missing: install Debian's $deb package" >&2
    fi
  fi
done

# The Python client (clients/python): Debian's grpcio and protobuf for
# /usr/bin/python3, protoc and its gRPC plugin (generate.sh), venv, and the
# setuptools and wheel wheels pip builds the package with, offline.
pydebs=(python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc python3-venv python3-setuptools-whl python3-wheel-whl)
pymissing=()
for deb in "${pydebs[@]}"; do
  dpkg-query -W -f='${Status}' "$deb" 2>/dev/null | grep -q 'install ok installed' || pymissing+=("$deb")
done
if [ ${#pymissing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    [ -n "${apt_updated:-}" ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pymissing[@]}"
  else
    echo "tools.sh: install Debian's ${pymissing[*]} for the Python client" >&2
  fi
fi
