#!/usr/bin/env bash
# Builds Prometheus's promtool from the Go module proxy into a cache outside git, keyed by
# this script's content (the version is pinned here), and prints the bin directory. The
# alert rules in the chart are unit-tested with `promtool test rules`, Prometheus's own
# evaluator. Prometheus 3.x modules are versioned v0.3xx.
set -euo pipefail
PROMETHEUS_MODULE_VERSION=v0.316.0
here=$(cd "$(dirname "$0")" && pwd)
source "$here/gocache.sh"
gocache_bin promtool "$(sha256sum "$here/build-promtool.sh" | cut -c1-16)"
gocache_need promtool
echo "build-promtool.sh: building promtool $PROMETHEUS_MODULE_VERSION into $bin (first build takes minutes)" >&2
GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags "-s -w" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION" >&2
gocache_publish
