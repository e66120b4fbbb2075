#!/usr/bin/env bash
# Every module of go.work builds and vets on its own (GOWORK=off), from
# its go.mod alone: a module that builds only inside the workspace would
# break for anyone who imports it, and hides a missing requirement or
# replace. The Kubernetes replace blocks must be current too.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/kube-replaces.sh --check
for m in $(go list -m -f '{{.Dir}}'); do
	if ! out=$(cd "$m" && GOWORK=off go build ./... 2>&1 && GOWORK=off go vet ./... 2>&1); then
		echo "module $m does not build or vet on its own (GOWORK=off):" >&2
		echo "$out" >&2
		exit 1
	fi
done
