# Sourced by the build scripts of Go test programs, which the suite's pytest workers may run
# at the same moment (two xdist workers each starting a control plane, say).
#
#   gocache_bin NAME KEY    sets $bin to the cache directory for that key
#   gocache_need FILES...   prints $bin and exits when FILES are all there; otherwise takes
#                           the key's lock (another builder of the same key is waited for,
#                           and its finished build used), and returns with $tmp made for
#                           the build; $tmp is removed if the script fails half way
#                           (the tools it needs: $gocache_tools, Go unless set)
#   gocache_publish         moves the finished build from $tmp into place, prints $bin
#
# One builder per key, the others wait: a second build of the same key never starts, and
# the directory a waiting worker is handed is never removed under it. The move into place
# is a rename (atomic); only an incomplete directory is ever replaced.
gocache_bin() {
  local cache_root=${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}
  bin="$cache_root/$1/$2/bin"
  tmp="$bin.tmp.$$"
}
# Whether FILES are all in $bin: a program must be executable, a data file (a path with a
# slash) only present.
gocache_have() {
  local f
  for f in "$@"; do
    if [[ $f == */* ]]; then [[ -f "$bin/$f" ]] || return 1
    else [[ -x "$bin/$f" ]] || return 1; fi
  done
}
gocache_need() {
  if gocache_have "$@"; then echo "$bin"; exit 0; fi
  local tool
  for tool in ${gocache_tools:-go}; do
    command -v "$tool" >/dev/null || { echo "build: $tool not found" >&2; exit 3; }
  done
  command -v flock >/dev/null || { echo "build: flock (util-linux) not found" >&2; exit 3; }
  mkdir -p "$(dirname "$bin")"
  exec 9>"$(dirname "$bin")/build.lock"
  flock 9
  # Built by the builder this one waited for.
  if gocache_have "$@"; then echo "$bin"; exit 0; fi
  rm -rf "$tmp"
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
}
gocache_publish() {
  if [[ -e "$bin" ]]; then
    # An incomplete directory (a build interrupted before this lock existed, a file removed
    # by hand): set aside by rename, so the new one still arrives in one step.
    mv -T "$bin" "$bin.old.$$"
    rm -rf "$bin.old.$$"
  fi
  mv -T "$tmp" "$bin"
  trap - EXIT
  echo "$bin"
}
# `gocache_main NAME BINARY DIR`: the whole build of a one-program module in DIR (its go.mod,
# go.sum, build.sh and main.go make the key) into the cache NAME; prints the bin directory.
gocache_main() {
  local name=$1 binary=$2 dir=$3
  gocache_bin "$name" "$(cd "$dir" && cat go.mod go.sum build.sh main.go | sha256sum | cut -c1-16)"
  gocache_need "$binary"
  echo "build.sh: building $binary into $bin" >&2
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$tmp/$binary" .) >&2
  gocache_publish
}
