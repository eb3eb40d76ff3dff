#!/usr/bin/env bash
# Builds cdi-list (main.go) once per CDI library release in releases.txt, each in a module of
# its own requiring that release (and the specs-go module containerd requires beside it),
# into a cache outside git keyed by these files, and prints the bin directory: one program
# per release, named cdi-list-<version>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/gocache.sh"
gocache_bin cdilibs "$(cd "$here" && cat build.sh main.go releases.txt | sha256sum | cut -c1-16)"
mapfile -t lines < <(grep -v '^#' "$here/releases.txt" | grep .)
names=()
for line in "${lines[@]}"; do read -r _ version _ <<<"$line"; names+=("cdi-list-$version"); done
gocache_need "${names[@]}"
echo "build.sh: building cdi-list for ${#lines[@]} CDI library releases into $bin" >&2
for line in "${lines[@]}"; do
  read -r module version specs <<<"$line"
  work="$tmp/src-$version"
  mkdir -p "$work"
  sed "s#\"tags.cncf.io/container-device-interface/pkg/cdi\"#\"$module/pkg/cdi\"#" \
    "$here/main.go" >"$work/main.go"
  (cd "$work"
   printf 'module cdilist\n\ngo 1.22\n' >go.mod
   go get "$module@$version" >&2
   if [[ $specs != - ]]; then
     go get "tags.cncf.io/container-device-interface/specs-go@$specs" >&2
   fi
   # the library release exactly as listed: go get must not have moved it
   go list -m "$module" | grep -qx "$module $version" \
     || { echo "build.sh: $module resolved to $(go list -m "$module"), not $version" >&2; exit 1; }
   go mod tidy >&2
   go build -trimpath -ldflags "-s -w" -o "$tmp/cdi-list-$version" . >&2)
  rm -rf "$work"
done
gocache_publish
