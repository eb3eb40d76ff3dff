#!/usr/bin/env bash
# Builds kubelet-checkpoint (main.go: the kubelet's device-manager checkpoint, written by the
# kubelet's own checkpoint package) from the control plane's Go module, which already pins
# k8s.io/kubernetes and its staging modules, into a cache outside git; prints the bin
# directory. Kept out of ../cmd so that the control plane's own build key does not move.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../../tools/gocache.sh"
gocache_bin kubeletcheckpoint "$(cd "$here" && cat ../go.mod ../go.sum build.sh main.go \
  | sha256sum | cut -c1-16)"
gocache_need kubelet-checkpoint
echo "build.sh: building kubelet-checkpoint into $bin" >&2
(cd "$here/.." && go build -trimpath -ldflags "-s -w" -o "$tmp/kubelet-checkpoint" \
  ./kubeletcheckpoint) >&2
gocache_publish
