#!/usr/bin/env bash
# Prints what rein's product binary is made of, for docs/architecture.md
# ("The binary's size"):
#   - the size of `go build ./cmd/rein` and of the release build the README
#     shows (-trimpath -ldflags "-s -w", no symbol table and no DWARF);
#   - the modules it holds (go version -m);
#   - its symbols' sizes (go tool nm -size) summed by module, and the
#     largest packages.
# usage: scripts/binsize.sh [TOP]   (TOP packages listed, default 25)
# Both builds go to a temporary directory; nothing in the checkout changes.
set -euo pipefail
cd "$(dirname "$0")/.."
top=${1:-25}

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/rein" ./cmd/rein
go build -trimpath -ldflags "-s -w" -o "$tmp/rein-release" ./cmd/rein
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b/1048576 }'; }
plain=$(stat -c %s "$tmp/rein")
release=$(stat -c %s "$tmp/rein-release")
echo "go build -o rein ./cmd/rein                                 $(mib "$plain") ($plain bytes)"
echo "go build -trimpath -ldflags \"-s -w\" -o rein ./cmd/rein      $(mib "$release") ($release bytes), $(awk -v a="$plain" -v b="$release" 'BEGIN { printf "%.0f%%", 100*(a-b)/a }') less"

# The modules, as the binary records them: "mod" is rein, "dep" the rest.
go version -m "$tmp/rein" | awk '$1 == "mod" || $1 == "dep" { print $2 }' >"$tmp/modules"
echo
echo "$(wc -l <"$tmp/modules") modules (go version -m); symbols by module (go tool nm -size):"

# A symbol's package is its name, cut before any "(" or "[" (a method's
# receiver or a generic's type arguments may name other packages), up to
# the first dot after the last slash, or after the first slash when that
# names no module (a promoted method); a package path's last element has
# its dots escaped as %2e. The module is
# the longest module path that is a prefix of the package's path, "std"
# for a path whose first element has no dot. The linker's own symbols
# (type:, go:) hold type descriptors, itabs and string data.
go tool nm -size "$tmp/rein" >"$tmp/nm"
rein=$(go version -m "$tmp/rein" | awk '$1 == "mod" { print $2 }')
awk -v modfile="$tmp/modules" -v rein="$rein" '
  BEGIN { while ((getline m < modfile) > 0) mods[m] = 1 }
  # Hex addresses of the same width compare as strings.
  function below(a, b) { return length(a) < length(b) || (length(a) == length(b) && a < b) }
  # pkg path: up to the first dot after the last slash.
  function lastslash(n,   dir, last) {
    dir = ""; last = n
    if (n ~ /\//) { dir = n; sub(/\/[^\/]*$/, "", dir); last = substr(n, length(dir) + 2) }
    sub(/\..*/, "", last)
    return unescape(dir == "" ? last : dir "/" last)
  }
  # pkg path: up to the first dot after the first slash (a method promoted
  # from an embedded type of another package is pkg.Type.otherpkg.Method).
  function firstslash(n,   i, head, rest) {
    head = ""; rest = n; i = index(n, "/")
    if (i > 0) { head = substr(n, 1, i); rest = substr(n, i + 1) }
    sub(/\..*/, "", rest)
    return unescape(head rest)
  }
  function unescape(p) { gsub(/%2e/, ".", p); return p }
  function module(pkg,   p, first) {
    if (pkg == "main") return rein
    first = pkg; sub(/\/.*/, "", first)
    if (first !~ /\./) return "std" # vendor/golang.org/x/... too
    for (p = pkg; p != ""; ) {
      if (p in mods) return p
      if (p !~ /\//) break
      sub(/\/[^\/]*$/, "", p)
    }
    return "?"
  }
  NR == FNR { if ($NF == "runtime.bss") bss = $1; next }
  # What lies from runtime.bss on (.bss, .noptrbss) is zeroed memory at
  # run time, not bytes in the file: it is left out.
  $2 == 0 || !below($1, bss) { next }
  {
    size = $2; name = $0
    sub(/^ *[0-9a-f]+ +[0-9]+ +[A-Za-z] +/, "", name)
    if (name ~ /^(type:|go:|\$)/) { pkg = "(linker: types, itabs, strings, constants)"; mod = pkg }
    else {
      n = name; sub(/[(\[].*/, "", n)
      pkg = lastslash(n); mod = module(pkg)
      if (mod == "?") { pkg = firstslash(n); mod = module(pkg) }
    }
    bymod[mod] += size; bypkg[pkg] += size; total += size
  }
  END {
    for (m in bymod) printf "mod\t%d\t%s\n", bymod[m], m
    for (p in bypkg) printf "pkg\t%d\t%s\n", bypkg[p], p
    printf "all\t%d\t\n", total
  }' "$tmp/nm" "$tmp/nm" >"$tmp/sums"

total=$(awk -F'\t' '$1 == "all" { print $2 }' "$tmp/sums")
printf '%-48s %9s %6s\n' "module" "KiB" "share"
awk -F'\t' '$1 == "mod"' "$tmp/sums" | sort -t$'\t' -k2,2nr | awk -F'\t' -v total="$total" -v size="$plain" '
  NR <= 20 { printf "%-48s %9.0f %5.1f%%\n", $3, $2 / 1024, 100 * $2 / total; next }
  { rest += $2; n++ }
  END {
    if (n) printf "%-48s %9.0f %5.1f%%\n", "(" n " more modules)", rest / 1024, 100 * rest / total
    printf "%-48s %9.0f\n", "all symbols", total / 1024
    printf "%-48s %9.0f\n", "the rest (pclntab, unnamed data, symtab, DWARF)", (size - total) / 1024
  }'
echo
printf '%-64s %9s %6s\n' "package (the largest $top)" "KiB" "share"
awk -F'\t' '$1 == "pkg"' "$tmp/sums" | sort -t$'\t' -k2,2nr | head -n "$top" | awk -F'\t' -v total="$total" '
  { printf "%-64s %9.0f %5.1f%%\n", $3, $2 / 1024, 100 * $2 / total }'
