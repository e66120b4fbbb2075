#!/usr/bin/env bash
# Generates the typed client of the NodeConfig API (its clientset with a fake,
# listers and informers) from the Go types of services/api/v1alpha1 and their
# +genclient markers, with client-gen, lister-gen and informer-gen of
# k8s.io/code-generator (pinned in tools/codegen/go.mod, built into ./bin),
# into the directory $1: services/api/client for 'make generate', a
# temporary one for hack/check-generated.sh. The Go import path of what it
# writes is always nodeconfig.io/services/api/client/...
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: hack/gen-client.sh OUTPUT_DIR}
api=nodeconfig.io/services/api
pkg=$api/client
header=hack/boilerplate.go.txt
# Each generator writes its files and leaves the others': start from none.
rm -rf "$out/clientset" "$out/listers" "$out/informers"
client-gen --go-header-file "$header" \
  --input-base nodeconfig.io/services --input api/v1alpha1 \
  --clientset-name clientset --output-dir "$out" --output-pkg "$pkg"
lister-gen --go-header-file "$header" \
  --output-dir "$out/listers" --output-pkg "$pkg/listers" \
  "$api/v1alpha1"
informer-gen --go-header-file "$header" --single-directory \
  --versioned-clientset-package "$pkg/clientset" --listers-package "$pkg/listers" \
  --output-dir "$out/informers" --output-pkg "$pkg/informers" \
  "$api/v1alpha1"
