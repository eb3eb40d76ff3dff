#!/usr/bin/env bash
# Builds dra-judge (main.go: whether a node can allocate a pod's ResourceClaims, decided by
# Kubernetes' own structured-parameters allocator, k8s.io/dynamic-resource-allocation v0.35.4)
# into a cache outside git, keyed by this module's files, and prints the bin directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_main drajudge dra-judge "$here"
