#!/usr/bin/env bash
# Builds the floor stand-in webhook (bench/floor/main.go, the standard library only) into a
# cache outside git, keyed by its source, and prints the bin directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../tests/tools/gocache.sh"
gocache_bin floor "$(cat "$here/main.go" "$here/go.mod" | sha256sum | cut -c1-16)"
gocache_need floor
(cd "$here" && GOFLAGS=-trimpath go build -ldflags "-s -w" -o "$tmp/floor" . >&2)
gocache_publish
