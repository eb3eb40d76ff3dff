#!/usr/bin/env bash
# Builds the real-runtime oracle (nvidia-container-runtime and its legacy hook,
# nvidia-container-runtime-hook; cdi-inject and nri-inject) from
# this Go module into a cache outside git, keyed by a hash of the module's files, and prints
# the bin directory. A second call with unchanged inputs returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_bin oracle "$(cd "$here" && cat go.mod go.sum build.sh $(find cmd internal -name '*.go' | sort) \
  | sha256sum | cut -c1-16)"
gocache_need nvidia-container-runtime nvidia-container-runtime-hook cdi-inject nri-inject
cd "$here"
echo "build.sh: building the runtime oracle into $bin" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/nvidia-container-runtime" \
  github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/nvidia-container-runtime-hook" \
  github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime-hook >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/cdi-inject" ./cmd/cdi-inject >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/nri-inject" ./cmd/nri-inject >&2
gocache_publish
