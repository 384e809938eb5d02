#!/usr/bin/env bash
# The Python client's tests: the Debian packages it needs, the generated code
# checked against proto/ (generate.sh --check), the package installed offline
# into a new venv (pip install --no-index), then the tests (unittest) with that
# venv's Python against real `rein serve` processes started by them. The
# install must leave the checkout as it was (git status).
#   REIN_BIN  the rein binary (default ../../.bin/rein, which scripts/test.sh builds)
# Everything comes from Debian bookworm's packages, for Debian's own
# /usr/bin/python3 (not a python3 that happens to be first on PATH).
set -euo pipefail
# REIN_BIN as given, relative to the caller's directory; else the default.
if [ -n "${REIN_BIN:-}" ]; then
  REIN_BIN=$(realpath -m "$REIN_BIN")
fi
cd "$(dirname "$0")"
pkg=$PWD
export REIN_BIN="${REIN_BIN:-$(realpath -m ../../.bin/rein)}"
if [ ! -x "$REIN_BIN" ]; then
  echo "no rein binary at $REIN_BIN: build one (cd ../.. && go build -o .bin/rein ./cmd/rein) or set REIN_BIN"; exit 1
fi

# 1. Debian's packages: grpcio and protobuf for /usr/bin/python3, the
# compilers generate.sh runs, venv and pip, and the setuptools and wheel
# wheels pip builds the package with, offline.
debs=(python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc python3-venv python3-setuptools-whl python3-wheel-whl)
missing=()
for d in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q 'install ok installed' || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "clients/python/test.sh: missing Debian packages ${missing[*]}; install them with:"
  echo "  apt-get install -y ${debs[*]}"
  exit 1
fi

# 2. The generated code is what proto/ generates.
bash generate.sh --check

# 3. The documented install (README.md, "Install"): offline into a new venv
# that sees Debian's grpcio and protobuf; the build's setuptools and wheel
# come from Debian's wheels. It writes nothing into the checkout, not even
# what .gitignore hides (build/, *.egg-info): the build backend builds a
# copy of the package in a temporary directory.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
checkout() { git status --porcelain --ignored --untracked-files=all -- .; }
before=$(checkout)
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
(
  cd ../..
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$tmp/venv/bin/pip" install --quiet --no-index --find-links /usr/share/python-wheels ./clients/python
)
if [ "$(checkout)" != "$before" ]; then
  echo "clients/python/test.sh: installing the package wrote into the checkout (git status before, after):"
  diff <(echo "$before") <(checkout) || true
  exit 1
fi
# The tests use the installed package, not src/.
"$tmp/venv/bin/python" -c '
import sys, rein_client
assert rein_client.__file__.startswith(sys.prefix), rein_client.__file__
print("rein_client", rein_client.__version__, "installed in", sys.prefix)'

# 4. The tests, one at a time (each starts its own servers), from a
# directory of their own so that nothing but the venv provides rein_client.
cd "$tmp"
timeout 600 "$tmp/venv/bin/python" -m unittest discover -v -s "$pkg/tests" -t "$pkg/tests"
