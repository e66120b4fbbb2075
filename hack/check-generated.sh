#!/usr/bin/env bash
# Fails when the committed Go code of proto/ differs from what buf generates.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
buf generate --output "$tmp"
if ! diff -r -x '*.proto' -x 'go.mod' -x 'go.sum' -x '*_test.go' -x 'helpers*.go' "$tmp/proto/nodeconfig" proto/nodeconfig >/dev/null; then
  echo "generated code in proto/ is stale: run 'make generate' and commit the result"
  diff -r -q -x '*.proto' "$tmp/proto/nodeconfig" proto/nodeconfig || true
  exit 1
fi
