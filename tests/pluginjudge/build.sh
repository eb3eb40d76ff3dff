#!/usr/bin/env bash
# Builds plugin-judge (main.go: the device-list strategy NVIDIA's device plugin settles on,
# decided by its own configuration code, github.com/NVIDIA/k8s-device-plugin v0.19.3
# api/config/v1) and that plugin's own config-manager (cmd/config-manager, which picks a
# node's config from the standalone chart's ConfigMap) into a cache outside git, keyed by
# this module's files, and prints the bin directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_bin pluginjudge "$(cd "$here" && cat go.mod go.sum build.sh main.go tools.go \
  | sha256sum | cut -c1-16)"
gocache_need plugin-judge config-manager
cd "$here"
echo "build.sh: building plugin-judge and config-manager into $bin" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/plugin-judge" . >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/config-manager" \
  github.com/NVIDIA/k8s-device-plugin/cmd/config-manager >&2
gocache_publish
