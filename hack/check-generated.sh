#!/usr/bin/env bash
# Fails when the committed Go code of proto/ differs from what buf generates
# (the hand-written package proto/nodeconfig/records and tests aside),
# the CRD in deploy/crd or the deep copies in services/api/v1alpha1 from
# what controller-gen generates from the Go types there (hack/gen-crd.sh), or
# the typed client in services/api/client from what client-gen, lister-gen
# and informer-gen generate from them (hack/gen-client.sh), or the Helm chart
# in deploy/helm/nodeconfig from what chartgen generates from deploy/.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
buf generate --output "$tmp"
if ! diff -r -x '*.proto' -x 'go.mod' -x 'go.sum' -x '*_test.go' -x records "$tmp/proto/nodeconfig" proto/nodeconfig >/dev/null; then
  echo "generated code in proto/ is stale: run 'make generate' and commit the result"
  diff -r -q -x '*.proto' "$tmp/proto/nodeconfig" proto/nodeconfig || true
  exit 1
fi
hack/gen-crd.sh "$tmp/crd"
if ! diff -r "$tmp/crd" deploy/crd >/dev/null; then
  echo "deploy/crd is stale: run 'make generate' and commit the result"
  diff -r -u deploy/crd "$tmp/crd" || true
  exit 1
fi
deepcopy=services/api/v1alpha1/zz_generated.deepcopy.go
controller-gen object paths=./services/api/v1alpha1 output:object:stdout >"$tmp/deepcopy.go"
if ! diff -q "$tmp/deepcopy.go" "$deepcopy" >/dev/null; then
  echo "$deepcopy is stale: run 'make generate' and commit the result"
  diff -u "$deepcopy" "$tmp/deepcopy.go" || true
  exit 1
fi
hack/gen-client.sh "$tmp/client"
if ! diff -r "$tmp/client" services/api/client >/dev/null; then
  echo "services/api/client is stale: run 'make generate' and commit the result"
  diff -r -u services/api/client "$tmp/client" || true
  exit 1
fi
GOWORK=off go -C tools/release run ./cmd/chartgen -deploy "$PWD/deploy" -out "$tmp/chart"
if ! diff -r "$tmp/chart" deploy/helm/nodeconfig >/dev/null; then
  echo "deploy/helm/nodeconfig is stale: run 'make chart' and commit the result"
  diff -r -u deploy/helm/nodeconfig "$tmp/chart" || true
  exit 1
fi
