#!/usr/bin/env bash
# Builds one Kubernetes release's kube-apiserver from the Go module proxy into a cache outside
# git and prints the directory holding it, for `python -m bench.e2e_load --kube-bin DIR`:
#
#   python -m bench.e2e_load --calls --kube-bin "$(tests/tools/build-kube-apiserver.sh v1.37.2)"
#
# The suite's own control plane (tests/e2e/controlplane) stays on its release; this is for
# measuring gpupool against another API server. k8s.io/kubernetes pins its staging modules at
# v0.0.0, so the module written here replaces each one the release's go.mod lists with the
# published v0.X.Y of the same release. A second call for the same release returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=${1:-}
if [[ ! $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "kube-apiserver.sh: give a Kubernetes release, such as v1.37.2" >&2
  exit 2
fi
staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
source "$here/gocache.sh"
gocache_bin kube-apiserver "$version"
gocache_need kube-apiserver
mod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[[ -n $mod ]] || { echo "kube-apiserver.sh: k8s.io/kubernetes@$version not found" >&2; exit 2; }
mkdir -p "$tmp/module"
{
  printf 'module gpupool.bench/kube-apiserver\n\ngo %s\n\n' "$(sed -n 's/^go //p' "$mod")"
  printf 'require k8s.io/kubernetes %s\n\ntool k8s.io/kubernetes/cmd/kube-apiserver\n\n' "$version"
  sed -n '/^replace (/,/^)/p' "$mod" | sed -E "s#=> ./staging/src/(k8s.io/[a-z-]+)#=> \1 $staging#"
} > "$tmp/module/go.mod"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1"
ldflags+=" -X $pkg.gitMinor=$(echo "$version" | cut -d. -f2) -X $pkg.gitTreeState=clean"
echo "kube-apiserver.sh: building kube-apiserver $version into $bin (minutes, once)" >&2
(cd "$tmp/module" && go mod tidy >&2 && go build -trimpath -ldflags "$ldflags" \
  -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2)
gocache_publish
