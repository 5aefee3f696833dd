#!/usr/bin/env bash
# Packs CUDA test binaries built on the development machine, plus the Debian shared libraries they
# need, into .gpu_carry.tar.xz for tools/gpu_run_prebuilt.sh on a GPU machine that has CUDA but not
# our build dependencies (no network there to install them). BINS="radixlm" packs only the named
# binaries of $BUILD (a benchmark call then skips the device build: carry .gpu_carry.tar.xz instead
# of .gpu_deps.tar.xz and run TESTS=none bash tools/gpu_run_prebuilt.sh, or unpack it yourself).
# The development build (make, build/) works as BUILD=build. The 8B shape's config
# (configs/llama-3.1-8b) reads the generated Llama-3 tokenizer, which git ignores: a serving call
# also carries tests/data/tokenizer/generated/llama3 (9 MB). Build first:
#   cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DRADIXLM_CUDA=ON -DRADIXLM_CUDA_ARCHS=90a
#   cmake --build build-cuda --target radixlm ops_cuda_test ops_cuda_linear_sampling_test attention_cuda_test model_cuda_test
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-cuda}
STAGE=$(mktemp -d)
mkdir -p "$STAGE/bin" "$STAGE/deps"
if [ -n "${BINS:-}" ]; then  # e.g. BINS=radixlm: a benchmark-only carry (~28 MB with its libraries, sm_90a + sm_80)
  for b in $BINS; do cp "$BUILD/$b" "$STAGE/bin/"; done
else
  for b in radixlm "$BUILD"/*_test; do
    b=$(basename "$b")
    case "$b" in radixlm|*cuda*_test) cp "$BUILD/$b" "$STAGE/bin/";; esac
  done
fi
strip --strip-debug "$STAGE"/bin/* || true
# Every non-glibc, non-CUDA shared library the binaries load.
for b in "$STAGE"/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libcudart*|libcublas*|libnvidia*|libnccl*) ;;  # the device has CUDA and NCCL
    *) cp -L "$lib" "$STAGE/deps/";;
  esac
done
strip --strip-debug "$STAGE"/deps/* || true  # the tests' libradixlm_shared.so: ~310 MB with debug info
tar -C "$STAGE" -cJf "$ROOT/.gpu_carry.tar.xz" bin deps
rm -rf "$STAGE"
ls -l "$ROOT/.gpu_carry.tar.xz"
