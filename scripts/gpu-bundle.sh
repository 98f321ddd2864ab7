#!/usr/bin/env bash
# Builds the GPU suite's binaries here (CUDA on; this machine needs the build dependencies,
# not a GPU) and puts stripped copies where a GPU machine without those dependencies can run
# them: the lent machines have the CUDA toolkit, cuDNN (in PyTorch) and PyTorch, but no
# GoogleTest, Boost or COIN-OR and no network to install them.
#
#   scripts/gpu-bundle.sh [DIR]        DIR default: .gpurun/build (about 11 MB)
#
# Then, on the GPU machine, from the repository root (DIR travels with the working tree when
# it is not ignored, or is carried):
#   scripts/gpu-suite.sh --skip-build --build-dir DIR [--quick]
# Exit status: 0, or the build's.
set -euo pipefail
SUBLINEAR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SUBLINEAR_ROOT
source "$SUBLINEAR_ROOT/scripts/lib/deps.sh"
case "${1:-}" in -h|--help) sed -n '2,14p' "$0"; exit 0 ;; esac
out="$(realpath -m "${1:-$SUBLINEAR_ROOT/.gpurun/build}")"
build="$SUBLINEAR_ROOT/build-gpu"
sublinear_ensure_deps
targets="test_device test_allocator test_tracer test_integrations gpu_vmm_bench test_gpu_tracer test_gpu_block_hash test_gpu_launch_kinds gpu_resnet_train test_gpu_resnet sublinear sublinear_preload sublinear_cli"
mkdir -p "$build"
echo "sublinear: building $build (CUDA on; log: $build/bundle.log)"
SUBLINEAR_BUILD_TARGETS="$targets" sublinear_build "$build" -DSUBLINEAR_CUDA=ON -DSUBLINEAR_BUILD_TESTS=ON \
  -DSUBLINEAR_BUILD_BENCHMARKS=OFF >"$build/bundle.log" 2>&1 || { tail -30 "$build/bundle.log"; exit 1; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for f in "$build"/bin/*; do strip -o "$out/bin/$(basename "$f")" "$f"; done
for f in "$build"/lib/*.so; do strip -o "$out/lib/$(basename "$f")" "$f"; done
echo "sublinear: $(du -sh "$out" | cut -f1) in $out; on the GPU machine: scripts/gpu-suite.sh --skip-build --build-dir $out"
