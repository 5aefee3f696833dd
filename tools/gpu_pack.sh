#!/usr/bin/env bash
# Packs CUDA test binaries built on the development machine, plus the Debian shared libraries they
# need, into .gpu_carry.tar.xz for tools/gpu_run_prebuilt.sh on a GPU machine that has CUDA but not
# our build dependencies (no network there to install them). Build first:
#   cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DRADIXLM_CUDA=ON -DRADIXLM_CUDA_ARCHS=90a
#   cmake --build build-cuda --target radixlm ops_cuda_test ops_cuda_linear_sampling_test attention_cuda_test model_cuda_test
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-cuda}
STAGE=$(mktemp -d)
mkdir -p "$STAGE/bin" "$STAGE/deps"
for b in radixlm "$BUILD"/*_test; do
  b=$(basename "$b")
  case "$b" in radixlm|*cuda*_test) cp "$BUILD/$b" "$STAGE/bin/";; esac
done
strip --strip-debug "$STAGE"/bin/* || true
# Every non-glibc, non-CUDA shared library the binaries load.
for b in "$STAGE"/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libcudart*|libcublas*|libnvidia*) ;;
    *) cp -L "$lib" "$STAGE/deps/";;
  esac
done
tar -C "$STAGE" -cJf "$ROOT/.gpu_carry.tar.xz" bin deps
rm -rf "$STAGE"
ls -l "$ROOT/.gpu_carry.tar.xz"
