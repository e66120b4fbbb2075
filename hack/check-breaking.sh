#!/usr/bin/env bash
# Runs 'buf breaking' against the default branch, when there is one that
# already has the contracts. Set BREAKING_AGAINST to compare with another ref.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${BREAKING_AGAINST:-}
if [ -z "$ref" ]; then
  for candidate in origin/main main; do
    if git rev-parse -q --verify "$candidate^{commit}" >/dev/null 2>&1 \
      && git cat-file -e "$candidate:proto/nodeconfig/v1" 2>/dev/null; then
      ref=$candidate
      break
    fi
  done
fi
if [ -z "$ref" ]; then
  echo "buf breaking: no default branch with proto/ yet; skipped"
  exit 0
fi
buf breaking --against ".git#ref=$ref"
echo "buf breaking: no breaking change against $ref"
