#!/usr/bin/env bash
# Builds OpenSSL's libssl.so.3 and libcrypto.so.3 of another 3.x series from the source the
# `openssl-src` crate ships (crates.io), into a cache outside git, and prints the directory
# that holds them. For `python -m bench.tls_library`, which runs gpupool's server on them
# with LD_LIBRARY_PATH: Python's ssl module links libssl.so.3, and every 3.x keeps its ABI.
#
#   bench/openssl.sh [CRATE_SERIES]    # default 300.5: OpenSSL 3.5, Debian trixie's series
#
# The crate leaves out the generators of OpenSSL's shared-library build, so the static
# libraries are built and linked into shared ones here, every symbol under OPENSSL_3.0.0,
# the only version Python 3.11's _ssl asks for. Needs cargo, perl, cc and make.
set -euo pipefail
series=${1:-300.5}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tests/tools/gocache.sh"
gocache_bin openssl "$series"
bin=${bin%/bin}/lib
tmp="$bin.tmp.$$"
gocache_tools="cargo perl cc make" gocache_need libssl.so.3 libcrypto.so.3
(cd "$tmp" && cargo init -q --vcs none --name fetch-openssl-src \
  && cargo add -q "openssl-src@~$series" && cargo fetch -q) >&2
src=$(cd "$tmp" && cargo metadata --format-version 1 2>/dev/null \
  | python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "openssl-src"))')
cp -r "$(dirname "$src")/openssl" "$tmp/openssl"
(cd "$tmp/openssl" && ./Configure linux-x86_64 --libdir=lib --openssldir=/usr/lib/ssl \
  no-shared no-module no-tests no-docs no-apps -fPIC && make -j"$(nproc)" build_libs) >&2
echo 'OPENSSL_3.0.0 { global: *; };' > "$tmp/versions.map"
link=(-shared "-Wl,--version-script=$tmp/versions.map")
cc "${link[@]}" -Wl,-soname,libcrypto.so.3 -o "$tmp/libcrypto.so.3" \
  -Wl,--whole-archive "$tmp/openssl/libcrypto.a" -Wl,--no-whole-archive -lpthread -ldl
cc "${link[@]}" -Wl,-soname,libssl.so.3 -o "$tmp/libssl.so.3" \
  -Wl,--whole-archive "$tmp/openssl/libssl.a" -Wl,--no-whole-archive -L"$tmp" -l:libcrypto.so.3
rm -rf "$tmp/openssl" "$tmp/src" "$tmp/Cargo.toml" "$tmp/Cargo.lock" "$tmp/versions.map"
gocache_publish
