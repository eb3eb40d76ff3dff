#!/usr/bin/env bash
# Builds HAMi v2.10.0 (src/) programs into a cache outside git: its scheduler (`scheduler`,
# HAMi's cmd/scheduler: the extender's filter and bind, and the webhook, as HAMi deploys it)
# and `hami-webhook` (tests/hami/cmd: the same webhook handler alone, no API server needed),
# keyed by a hash of this module's files, and prints the bin directory. A second call with
# unchanged inputs returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_bin hami "$(cd "$here" && cat go.mod go.sum build.sh \
  $(find cmd src -name '*.go' -o -name go.mod -o -name go.sum | sort) | sha256sum | cut -c1-16)"
gocache_need hami-webhook scheduler
cd "$here"
echo "build.sh: building HAMi's scheduler and webhook into $bin" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/hami-webhook" ./cmd/hami-webhook >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/scheduler" github.com/Project-HAMi/HAMi/cmd/scheduler >&2
gocache_publish
