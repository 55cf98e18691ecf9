#!/usr/bin/env bash
# scripts/test.sh - the whole test suite, from a fresh Debian 12 machine:
# installs the system packages, builds, and runs every test with ctest.
#
#   ./scripts/test.sh                         # release build in build/, all tests
#   ./scripts/test.sh --sanitize address,undefined   # ASan+UBSan build in build-address-undefined/
#   ./scripts/test.sh --sanitize thread -L tsan      # TSan build, the threaded tests
#   ./scripts/test.sh -L unit                 # only tests with a label (ctest -L)
#
# The suite runs from committed reference data and needs no GPU or PyTorch;
# the service, CDN and browser tests use Debian's python3 (stdlib, python3-yaml,
# python3-selenium), nginx and chromium, all installed by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=build
CMAKE_ARGS=()
CTEST_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize)
      # host code only: no sanitizer sees into CUDA kernels, and libcudart
      # is not instrumented, so sanitizer builds leave the CUDA backend out
      CMAKE_ARGS+=("-DTESSERA_SANITIZE=$2" "-DCMAKE_BUILD_TYPE=RelWithDebInfo" "-DTESSERA_CUDA=OFF")
      BUILD_DIR="build-${2//,/-}"; shift 2 ;;
    -L|-R|-E|-LE) CTEST_ARGS+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

./scripts/setup.sh
./scripts/setup-test-venv.sh   # webuiapi, openai, locust: labels compat and load
./scripts/setup-comfy-ui.sh || echo "test: ComfyUI's frontend was not fetched; browser_comfy_ui will skip" >&2
./scripts/build.sh "$BUILD_DIR" "${CMAKE_ARGS[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" "${CTEST_ARGS[@]}"
