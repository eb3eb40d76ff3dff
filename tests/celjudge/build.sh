#!/usr/bin/env bash
# Builds cel-judge (main.go: DRA device selectors evaluated by Kubernetes' own CEL compiler
# for them, k8s.io/dynamic-resource-allocation/cel v0.35.4) into a cache outside git, keyed
# by this module's files, and prints the bin directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_main celjudge cel-judge "$here"
