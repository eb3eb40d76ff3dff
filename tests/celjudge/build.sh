#!/usr/bin/env bash
# Builds cel-judge (main.go: DRA device selectors evaluated by Kubernetes' own CEL compiler
# for them, k8s.io/dynamic-resource-allocation/cel v0.35.4) into a cache outside git, keyed
# by this module's files, and prints the bin directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_bin celjudge "$(cd "$here" && cat go.mod go.sum build.sh main.go | sha256sum | cut -c1-16)"
if gocache_have cel-judge; then echo "$bin"; exit 0; fi
gocache_start
cd "$here"
echo "build.sh: building cel-judge into $bin" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/cel-judge" . >&2
gocache_publish
