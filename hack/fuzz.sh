#!/usr/bin/env bash
# Fuzzes every Go fuzz target for the given time each (default 30s).
# 'make test' runs their seed corpora as ordinary tests; this looks further.
# A crasher is written under the package's testdata/fuzz and then fails
# 'make test' until fixed: commit it as a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-30s}
found=0
for pkg in $(go list nodeconfig.io/...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    found=1
    echo "== $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
  done
done
[ "$found" = 1 ] || { echo "no fuzz targets found"; exit 1; }
