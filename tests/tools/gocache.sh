# Sourced by the build scripts of Go test programs. `gocache_bin NAME KEY` sets $bin to the
# cache directory for that key; `gocache_have FILES...` says whether they are all there;
# `gocache_publish` moves a finished build from $tmp into place. Builds go to $tmp, which
# is removed if the script fails half way.
gocache_bin() {
  local cache_root=${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}
  bin="$cache_root/$1/$2/bin"
  tmp="$bin.tmp.$$"
}
gocache_have() {
  local f
  for f in "$@"; do [[ -x "$bin/$f" ]] || return 1; done
}
gocache_start() {
  command -v go >/dev/null || { echo "build: Go toolchain not found" >&2; exit 3; }
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
}
gocache_publish() {
  rm -rf "$bin"
  mv "$tmp" "$bin"
  trap - EXIT
  echo "$bin"
}
# `gocache_main NAME BINARY DIR`: the whole build of a one-program module in DIR (its go.mod,
# go.sum, build.sh and main.go make the key) into the cache NAME; prints the bin directory.
gocache_main() {
  local name=$1 binary=$2 dir=$3
  gocache_bin "$name" "$(cd "$dir" && cat go.mod go.sum build.sh main.go | sha256sum | cut -c1-16)"
  if gocache_have "$binary"; then echo "$bin"; return 0; fi
  gocache_start
  echo "build.sh: building $binary into $bin" >&2
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$tmp/$binary" .) >&2
  gocache_publish
}
