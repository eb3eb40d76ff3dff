#!/usr/bin/env bash
# Builds dra-judge (main.go: whether a node can allocate a pod's ResourceClaims, decided by
# Kubernetes' own structured-parameters allocator, k8s.io/dynamic-resource-allocation) for one
# Kubernetes release into a cache outside git, keyed by that release's module and main.go,
# and prints the bin directory.
#
#   build.sh 1.35    v0.35.4, the module in this directory (also the default)
#   build.sh 1.36    v0.36.6, the module in v1.36/
#   build.sh 1.37    v0.37.2, the module in v1.37/
#
# One main.go serves every release: it is copied beside the release's go.mod to build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
release=${1:-1.35}
case $release in
  1.35) mod="$here" ;;
  1.36|1.37) mod="$here/v$release" ;;
  *) echo "build.sh: no DRA judge for Kubernetes $release (1.35, 1.36 or 1.37)" >&2; exit 2 ;;
esac
source "$here/../tools/gocache.sh"
gocache_bin drajudge "$(cat "$mod/go.mod" "$mod/go.sum" "$here/main.go" "$here/build.sh" \
  | sha256sum | cut -c1-16)"
gocache_need dra-judge
echo "build.sh: building dra-judge for Kubernetes $release into $bin" >&2
mkdir -p "$tmp/src"
cp "$mod/go.mod" "$mod/go.sum" "$here/main.go" "$tmp/src/"
(cd "$tmp/src" && go build -trimpath -ldflags "-s -w" -o "$tmp/dra-judge" .) >&2
rm -rf "$tmp/src"
gocache_publish
