#!/usr/bin/env bash
# Configures build-gpu for the device machine (CUDA on, sm_90a, RelWithDebInfo;
# cpp-httplib / pcre2 from .deps/ when present), the build the GPU scripts
# share. Re-running it on a configured tree is quick. Output goes to the log
# file given as the argument (default: stdout); the exit code is cmake's.
# Usage, from the repository root: tools/configure_gpu.sh [LOG]
set -uo pipefail
# The Boost headers of the HTTP server travel packed (tools/stage_gpu_extras.sh).
if [ -f .deps/boost_headers.tar.xz ] && [ ! -d .deps/include/boost ]; then
  tar -C .deps/include -xJf .deps/boost_headers.tar.xz
fi
extra=()
if [ -d .deps ]; then extra+=(-DCMAKE_PREFIX_PATH="$PWD/.deps" -DCMAKE_INCLUDE_PATH="$PWD/.deps/include" -DCMAKE_LIBRARY_PATH="$PWD/.deps/lib"); fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGASERVE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="${CUDACXX:-/usr/local/cuda/bin/nvcc}" "${extra[@]}" > "${1:-/dev/stdout}" 2>&1
