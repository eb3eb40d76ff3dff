#!/usr/bin/env bash
# Builds hami-allocate (main.go: which pod HAMi's device plugin allocates for on a node,
# decided by HAMi v2.10.0's own util.GetPendingPod, from ../hami/src) into a cache outside
# git, keyed by this module's files and HAMi's util package, and prints the bin directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_bin hamiallocate "$(cd "$here" && cat go.mod go.sum build.sh main.go \
  $(find ../hami/src/pkg/util -name '*.go' | sort) | sha256sum | cut -c1-16)"
gocache_need hami-allocate
cd "$here"
echo "build.sh: building hami-allocate into $bin" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/hami-allocate" . >&2
gocache_publish
