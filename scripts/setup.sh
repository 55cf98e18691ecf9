#!/usr/bin/env bash
# scripts/setup.sh - install every system package Tessera needs to build and
# test, from Debian's repositories.  Idempotent: packages already present are
# not reinstalled, and nothing is done when all are there.  Called by
# scripts/test.sh and scripts/demo.sh; safe to run by hand.
#
# The CUDA toolkit, cuDNN and NCCL come from the CUDA install (not apt); the
# build uses them when nvcc is found and falls back to CPU-only otherwise.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-dev   # the yardstick of the CPU GEMM benchmark (tests/cpu); the engine has its own GEMM
  libcjson-dev      # JSON (configs, HTTP API)
  libevent-dev      # HTTP server
  libpng-dev        # PNG output
  libjpeg62-turbo-dev # JPEG decoding of init images
  libturbojpeg0-dev # TurboJPEG: preview tiles (service/tiles/encoder.c)
  nginx             # tests/cdn: caching reverse proxy in front of tessera serve
  chromium chromium-driver python3-selenium # tests/browser: the page, headless
  clang libclang-rt-14-dev # libFuzzer and sanitizer runtimes (scripts/fuzz.sh)
  python3 python3-yaml # tests/service (standard library + PyYAML for docs/openapi.yaml)
  curl              # scripts/demo.sh talks to tessera serve as a client would
  libhiredis-dev    # Redis client: tessera serve --queue redis:// (service/queue/redis/)
  libssl-dev        # rediss://: TLS to Redis (service/queue/redis/redis_tls.c)
  openssl           # tests/cluster makes its CA and Redis certificate with the CLI
  redis-server redis-tools # tests/cluster: the shared Redis Streams queue, redis-benchmark
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
