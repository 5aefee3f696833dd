#!/usr/bin/env bash
# Packs the headers, shared libraries, pkg-config files and CMake package files of our Debian build
# dependencies (installed here by scripts/setup.sh), plus pkgconf, into .gpu_deps.tar.xz, so that
# tools/gpu_check.sh can build radixlm on a GPU machine that has CUDA, CMake, ninja and a C++
# compiler but not these libraries (and no network to install them). Static libraries are left out
# except GoogleTest's. Usage: bash tools/gpu_deps_pack.sh  (then carry .gpu_deps.tar.xz)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pkgs=(libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread nlohmann-json3-dev
      libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libcli11-dev
      libsentencepiece-dev libsentencepiece0 libprotobuf32 libgtest-dev libgmock-dev pkgconf pkgconf-bin
      libpkgconf3 libbrotli-dev libbrotli1 libgfortran5 libssl-dev libssl3 zlib1g-dev zlib1g)
LIST=$(mktemp)
for p in "${pkgs[@]}"; do
  if ! dpkg -L "$p" > /dev/null 2>&1; then
    echo "gpu_deps_pack: package $p is not installed (run scripts/setup.sh)" >&2
    exit 1
  fi
  dpkg -L "$p"
done | while read -r f; do
  [ -f "$f" ] || [ -L "$f" ] || continue
  case "$f" in
    /usr/share/doc/*|/usr/share/man/*|/usr/share/lintian/*|/usr/src/*) continue ;;
    *libgtest*.a|*libgmock*.a) ;;
    *.a) continue ;;
  esac
  echo "${f#/}"
done | sort -u > "$LIST"
# Boost is header-only and large (160 MB): only the headers our sources include (the compiler's
# dependency closure of the files that use Beast/Asio) and Boost's CMake package files.
for f in src/server/http_transport.cpp src/bench/http_client.cpp; do
  g++ -std=c++20 -M -MT x -I "$ROOT/src" "$ROOT/$f"
done | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sed 's|^/||' | sort -u >> "$LIST"
dpkg -L libboost1.74-dev | grep '/cmake/' | while read -r f; do [ -f "$f" ] && echo "${f#/}"; done >> "$LIST"
tar -C / -cJf "$ROOT/.gpu_deps.tar.xz" -T "$LIST"
rm -f "$LIST"
ls -l "$ROOT/.gpu_deps.tar.xz"
