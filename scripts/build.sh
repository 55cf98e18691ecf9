#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR] [extra cmake args...] - configure and build.
# The CUDA backend is built when nvcc is found (TESSERA_CUDA=AUTO).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
shift || true
JOBS=${TESSERA_JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS"
