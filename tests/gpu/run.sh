#!/usr/bin/env bash
# tests/gpu/run.sh - the one prepared script for a GPU machine (the device
# tool runs it in the repository root): build with the CUDA backend, show the
# GPU, run the gpu-labelled checks, then the unit suite.  Prints one summary
# line per stage; exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON >/dev/null
ninja -C build-gpu -j"$(nproc)" >/dev/null
echo "build: ok"
ctest --test-dir build-gpu -L gpu --output-on-failure
# every op case on the GPU against the CPU and the goldens (skipped, with the
# backend's reason, for ops it has no kernel for yet)
TSR_TEST_DEVICE=cuda ctest --test-dir build-gpu -R '^ops_' -E '^ops_(f16|bf16)_' --output-on-failure | tail -3
ctest --test-dir build-gpu -L unit -j"$(nproc)" --output-on-failure | tail -3
