#!/usr/bin/env bash
# Writes the Kubernetes replace block into every module that requires
# k8s.io/kubernetes. k8s.io/kubernetes requires its staging modules
# (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and replaces them with its
# own tree, which a module importing it cannot see; each such module must
# replace them with the published v0.X.Y of the same release. The rule
# lives here once, and the list comes from k8s.io/kubernetes's own go.mod,
# so a version bump is one `go get` and one run of this script.
#
#   hack/kube-replaces.sh          rewrite the go.mod files
#   hack/kube-replaces.sh --check  fail if one differs (make lint)
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
if [[ "${1:-}" == "--check" ]]; then
	check=true
fi

# Every module whose graph holds k8s.io/kubernetes: those that link the
# kubelet's code, those that test against them, the test control plane's
# pinned builder.
mapfile -t modules < <(grep -l '^k8s\.io/kubernetes v' proto/go.sum services/*/go.sum test/go.sum hack/testbin/go.sum | xargs -n1 dirname)

status=0
for m in "${modules[@]}"; do
	kube=$(awk '$1 == "k8s.io/kubernetes" {sub(/\/go\.mod$/, "", $2); print $2}' "$m/go.sum" | sort -u)
	if [[ $(echo "$kube" | wc -l) -ne 1 ]]; then
		echo "kube-replaces: $m/go.sum holds k8s.io/kubernetes at more than one version: $kube" >&2
		exit 1
	fi
	staging="v0.${kube#v1.}"
	gomod=$(GOWORK=off go -C "$m" mod download -json "k8s.io/kubernetes@$kube" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	want=$(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*|\1|p' "$gomod" | sort)
	if [[ -z "$want" ]]; then
		echo "kube-replaces: no staging modules in $gomod" >&2
		exit 1
	fi
	have=$(awk '{sub(/^replace[ \t]+/, "")} $2 == "=>" && $1 ~ /^k8s\.io\// {print $1, $3, $4}' "$m/go.mod" | sort)
	expected=$(for p in $want; do echo "$p $p $staging"; done)
	if [[ "$have" == "$expected" ]]; then
		continue
	fi
	if $check; then
		echo "kube-replaces: $m/go.mod does not replace k8s.io/kubernetes $kube's staging modules with $staging; run hack/kube-replaces.sh" >&2
		diff <(echo "$expected") <(echo "$have") >&2 || true
		status=1
		continue
	fi
	args=()
	for old in $(echo "$have" | cut -d' ' -f1); do
		args+=("-dropreplace=$old")
	done
	for p in $want; do
		args+=("-replace=$p=$p@$staging")
	done
	GOWORK=off go -C "$m" mod edit "${args[@]}"
	echo "kube-replaces: $m/go.mod replaces $(echo "$want" | wc -l) staging modules with $staging"
done
exit $status
