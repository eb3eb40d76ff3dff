#!/usr/bin/env bash
# Builds dra-judge (main.go: whether a node can allocate a pod's ResourceClaims, decided by
# Kubernetes' own structured-parameters allocator, k8s.io/dynamic-resource-allocation v0.35.4)
# into a cache outside git, keyed by this module's files, and prints the bin directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_bin drajudge "$(cd "$here" && cat go.mod go.sum build.sh main.go | sha256sum | cut -c1-16)"
if gocache_have dra-judge; then echo "$bin"; exit 0; fi
gocache_start
cd "$here"
echo "build.sh: building dra-judge into $bin" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/dra-judge" . >&2
gocache_publish
