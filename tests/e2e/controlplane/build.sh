#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and the embedded
# etcd from this Go module into a cache
# outside git, keyed by a hash of the module's files, and prints the bin directory.
# A second call with unchanged inputs returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache_root=${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}
key=$(cd "$here" && cat go.mod go.sum build.sh $(find cmd -name '*.go' | sort) | sha256sum | cut -c1-16)
bin="$cache_root/controlplane/$key/bin"
if [[ -x "$bin/kube-apiserver" && -x "$bin/kube-scheduler" && -x "$bin/kube-controller-manager"
      && -x "$bin/kubectl" && -x "$bin/etcd" ]]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "build.sh: Go toolchain not found" >&2; exit 3; }
tmp="$bin.tmp.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
version=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$(echo "${version#v}" | cut -d. -f1)"
ldflags+=" -X $pkg.gitMinor=$(echo "$version" | cut -d. -f2) -X $pkg.gitTreeState=clean"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$version"
cd "$here"
echo "build.sh: building Kubernetes $version control plane into $bin (first build takes minutes)" >&2
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler >&2
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-controller-manager" \
  k8s.io/kubernetes/cmd/kube-controller-manager >&2
go build -trimpath -ldflags "$ldflags" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl >&2
go build -trimpath -o "$tmp/etcd" ./cmd/etcd >&2
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "$bin"
