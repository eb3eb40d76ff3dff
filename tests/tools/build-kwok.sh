#!/usr/bin/env bash
# Builds kwok (fake kubelets: nodes kept Ready, bound pods moved through their lifecycle)
# from the Go module proxy into a cache outside git, keyed by this script's content (the
# version is pinned here), with the node and pod stage files kwok ships in its module (kwok
# reads stages from files; without them it finds "no stages"). Prints the bin directory.
set -euo pipefail
KWOK_VERSION=v0.8.0
here=$(cd "$(dirname "$0")" && pwd)
source "$here/gocache.sh"
gocache_bin kwok "$(sha256sum "$here/build-kwok.sh" | cut -c1-16)"
gocache_need kwok stages/pod-ready.yaml
echo "build-kwok.sh: building kwok $KWOK_VERSION into $bin" >&2
GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags "-s -w" \
  "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
mkdir -p "$tmp/stages"
cp "$src"/node/fast/node-initialize.yaml \
  "$src"/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml "$src"/pod/fast/pod-*.yaml \
  "$tmp/stages/"
chmod u+w "$tmp"/stages/*
gocache_publish
