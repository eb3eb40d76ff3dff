#!/usr/bin/env bash
# Builds plugin-judge (main.go: the device-list strategy NVIDIA's device plugin settles on,
# decided by its own configuration code, github.com/NVIDIA/k8s-device-plugin v0.19.3
# api/config/v1) into a cache outside git, keyed by this module's files, and prints the bin
# directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_main pluginjudge plugin-judge "$here"
