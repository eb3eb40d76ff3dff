#!/usr/bin/env bash
# Builds helm from the Go module proxy into a cache outside git, keyed by this script's
# content (the version is pinned here), and prints the bin directory. A second call with
# the binary in place returns at once. No prebuilt helm can be downloaded on these machines,
# and no Debian or PyPI package ships it.
set -euo pipefail
HELM_VERSION=v4.3.2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/gocache.sh"
gocache_bin helm "$(sha256sum "$here/build-helm.sh" | cut -c1-16)"
gocache_need helm
echo "build-helm.sh: building helm $HELM_VERSION into $bin (first build takes minutes)" >&2
GOBIN="$tmp" GOFLAGS=-trimpath go install \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >&2
gocache_publish
