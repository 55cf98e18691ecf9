#!/usr/bin/env bash
# tests/gpu/prepare.sh - run on a machine WITHOUT a GPU (with network and
# apt), before a GPU session: collect into tests/gpu/prepared/ (git-ignored,
# carried to the GPU machine with the tree, at most ~50 MiB) what the GPU
# test machine lacks.
#
# That machine has nvcc 13, a host compiler, Python with PyTorch, and cuDNN
# and NCCL only inside the nvidia-cudnn-cu13 / nvidia-nccl-cu13 wheels; it
# has no network and cannot install packages.  So:
#   debs/lib/    Debian -dev packages Tessera builds against (OpenBLAS,
#                cJSON, libevent, libpng, libjpeg-turbo, hiredis) and their runtime
#                libraries, fetched with `apt-get download`: the dependency
#                closure minus what every CUDA base image has (libc, libstdc++,
#                zlib1g, ...).  run.sh unpacks them (dpkg -x) into a prefix.
#   debs/pkgconf/ pkg-config (pkgconf), used by run.sh where the machine has
#                none of its own.
#   debs/tools/  cmake and ninja with their closure, used by run.sh only when
#                the machine lacks one of them.  Carry it only then: the tree
#                (~29 MiB) with lib and pkgconf (~16 MiB) fits the device
#                tool's 64 MiB; with tools (~27 MiB) as well it does not.
#   MANIFEST     what was fetched (name, version, size), this tree's commit.
# The test models are not carried: full-size SD1.5/SDXL-shaped random
# models are ~2 and ~7 GB, so run.sh makes them there
# (tests/gpu/make_random_model.py, Python stdlib only); prepare.sh checks
# that script here on small configs of the same architectures.
#
# Usage: tests/gpu/prepare.sh [--skip-model-check]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=tests/gpu/prepared
LIBS="libopenblas-dev libopenblas0 libopenblas-pthread-dev libopenblas0-pthread libgfortran5
      libquadmath0 libcjson-dev libcjson1 libevent-dev libevent-2.1-7 libevent-core-2.1-7
      libevent-extra-2.1-7 libevent-openssl-2.1-7 libevent-pthreads-2.1-7 libpng-dev libpng16-16
      zlib1g-dev libjpeg62-turbo-dev libjpeg62-turbo libturbojpeg0-dev libturbojpeg0
      libhiredis-dev libhiredis0.14 libssl-dev"
# cmake's own closure, minus the base image (libc6, libstdc++6, libssl3, ...)
PKGCONF="pkgconf pkgconf-bin libpkgconf3"
TOOLS="ninja-build cmake cmake-data libjsoncpp25 librhash0 libuv1
       libarchive13 libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0 libbrotli1
       libsasl2-2 libsasl2-modules-db libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0
       libkeyutils1 libidn2-0 libunistring2 libgnutls30 libhogweed6 libnettle8 libgmp10
       libp11-kit0 libtasn1-6 libxml2 libicu72 libexpat1 liblz4-1 libacl1"
LIMIT_MB=50

say() { printf 'prepare: %s\n' "$*"; }
die() { printf 'prepare: FAILED: %s\n' "$*" >&2; exit 1; }

command -v apt-get >/dev/null || die "apt-get is needed (a Debian/Ubuntu machine with network)"
rm -rf "$OUT"
mkdir -p "$OUT/debs/lib" "$OUT/debs/pkgconf" "$OUT/debs/tools"

fetch() { # dir, packages...
    local dir=$1
    shift
    (cd "$dir" && apt-get download "$@" 2>&1 | grep -v -e '^Get:' -e 'unsandboxed' || true)
    local n
    n=$(ls "$dir"/*.deb 2>/dev/null | wc -l)
    [ "$n" -eq "$#" ] || die "asked for $# packages in $dir, got $n (apt-get update first?)"
}
say "fetching $(echo $LIBS | wc -w) library packages"
fetch "$OUT/debs/lib" $LIBS
say "fetching $(echo $TOOLS | wc -w) build-tool packages (used only where the GPU machine lacks them)"
fetch "$OUT/debs/tools" $TOOLS
fetch "$OUT/debs/pkgconf" $PKGCONF

{
    echo "# tests/gpu/prepared: made by tests/gpu/prepare.sh on $(hostname) at $(date -u +%FT%TZ)"
    echo "# tree: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "# host: $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
    for f in "$OUT"/debs/*/*.deb; do
        printf '%s %s %s\n' "$(dirname "${f#$OUT/}")" "$(dpkg-deb -f "$f" Package Version | tr '\n' ' ')" "$(stat -c %s "$f")"
    done
} > "$OUT/MANIFEST"

MB=$(du -sm "$OUT" | awk '{print $1}')
say "$OUT holds ${MB} MiB ($(ls "$OUT"/debs/*/*.deb | wc -l) packages)"
[ "$MB" -le "$LIMIT_MB" ] || die "over the ${LIMIT_MB} MiB budget (the device tool carries 64 MiB)"

if [ "${1:-}" != "--skip-model-check" ]; then
    # the random-model generator on small configs of the real architectures,
    # loaded by this tree's tessera (if built) on the CPU
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    python3 tests/gpu/make_random_model.py --arch sd15 --small --out "$TMP/sd15" >/dev/null
    python3 tests/gpu/make_random_model.py --arch sdxl --small --out "$TMP/sdxl" >/dev/null
    BIN=$(ls build*/bin/tessera 2>/dev/null | head -1 || true)
    if [ -n "$BIN" ]; then
        for m in sd15 sdxl; do
            "$BIN" --log-level warn bench unet --model "$TMP/$m" --size 64 --iters 1 --warmup 0 \
                >"$TMP/$m.log" 2>&1 || { cat "$TMP/$m.log"; die "tessera cannot run the small $m model"; }
            "$BIN" --log-level warn bench vae --model "$TMP/$m" --size 64 --iters 1 --warmup 0 \
                >"$TMP/$m.vae.log" 2>&1 || { cat "$TMP/$m.vae.log"; die "tessera cannot run the small $m VAE"; }
        done
        say "make_random_model.py: small sd15/sdxl models load and run in $BIN (CPU)"
    else
        say "make_random_model.py: made small models (no tessera build here to load them)"
    fi
fi
say "ok: commit nothing; tests/gpu/run.sh on the GPU machine uses $OUT"
