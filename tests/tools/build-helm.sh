#!/usr/bin/env bash
# Builds helm from the Go module proxy into a cache outside git, keyed by this script's
# content (the version is pinned here), and prints the bin directory. A second call with
# the binary in place returns at once. No prebuilt helm can be downloaded on these machines,
# and no Debian or PyPI package ships it.
set -euo pipefail
HELM_VERSION=v4.3.2
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}
key=$(sha256sum "$here/build-helm.sh" | cut -c1-16)
bin="$cache_root/helm/$key/bin"
if [[ -x "$bin/helm" ]]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "build-helm.sh: Go toolchain not found" >&2; exit 3; }
tmp="$bin.tmp.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
echo "build-helm.sh: building helm $HELM_VERSION into $bin (first build takes minutes)" >&2
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags "$ldflags" \
  "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >&2
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "$bin"
