#!/usr/bin/env bash
# Builds one Kubernetes release's kube-apiserver, kube-scheduler, kube-controller-manager and
# kubectl, with the embedded etcd, into a cache outside git keyed by a hash of that release's
# module, and prints the bin directory. A second call with unchanged inputs returns at once.
#
#   build.sh          the current release the suite runs on (1.37, module in v1.37/)
#   build.sh 1.36     the release between (module in v1.36/)
#   build.sh 1.35     the oldest release the suite keeps (module in this directory)
#
# The embedded etcd (cmd/etcd) is the same program for each: it is built from this
# directory's module and copied beside each release's programs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
release=${1:-1.37}
case $release in
  1.35) mod="$here" ;;
  1.36|1.37) mod="$here/v$release" ;;
  *) echo "build.sh: no control plane for Kubernetes $release (1.35, 1.36 or 1.37)" >&2; exit 2 ;;
esac
source "$here/../../tools/gocache.sh"
gocache_bin controlplane "$( { cat "$mod/go.mod" "$mod/go.sum" "$here/go.mod" "$here/go.sum"
  cat $(find "$here/cmd" -name '*.go' | sort); } | sha256sum | cut -c1-16)"
gocache_need kube-apiserver kube-scheduler kube-controller-manager kubectl etcd
version=$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$(echo "${version#v}" | cut -d. -f1)"
ldflags+=" -X $pkg.gitMinor=$(echo "$version" | cut -d. -f2) -X $pkg.gitTreeState=clean"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$version"
echo "build.sh: building Kubernetes $version control plane into $bin (first build takes minutes)" >&2
for program in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  (cd "$mod" && go build -trimpath -ldflags "$ldflags" -o "$tmp/$program" \
    "k8s.io/kubernetes/cmd/$program") >&2
done
(cd "$here" && go build -trimpath -o "$tmp/etcd" ./cmd/etcd) >&2
gocache_publish
