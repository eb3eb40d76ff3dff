#!/usr/bin/env bash
# Builds HAMi's real mutating webhook (tests/hami/cmd/hami-webhook on HAMi v2.10.0 in src/)
# into a cache outside git, keyed by a hash of this module's files, and prints the bin
# directory. A second call with unchanged inputs returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_bin hami "$(cd "$here" && cat go.mod go.sum build.sh \
  $(find cmd src -name '*.go' -o -name go.mod -o -name go.sum | sort) | sha256sum | cut -c1-16)"
if gocache_have hami-webhook; then echo "$bin"; exit 0; fi
gocache_start
cd "$here"
echo "build.sh: building HAMi's webhook into $bin" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/hami-webhook" ./cmd/hami-webhook >&2
gocache_publish
