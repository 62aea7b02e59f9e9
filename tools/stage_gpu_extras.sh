#!/usr/bin/env bash
# Adds to .deps/ (after ../shared/tools/stage-device-deps) what the GPU
# machine's build needs beyond it, small enough to travel with the tree:
#   - the Boost headers the HTTP server includes (Beast / Asio; the device
#     image has no Boost): exactly the closure `g++ -M` reports for
#     src/server/*.cpp, packed as .deps/boost_headers.tar.xz (~0.6 MB; ~6 MB
#     unpacked, which tools/configure_gpu.sh does on the device);
#   - zlib's shared library with its link name (the server links zlib for
#     gzip / deflate request bodies; the headers came with stage-device-deps).
# Run from the repository root on the build machine (Debian, libboost1.81-dev installed).
set -euo pipefail
dest=${1:-.deps}
[ -d "$dest/include" ] || { echo "run ../shared/tools/stage-device-deps first" >&2; exit 1; }
list=$(mktemp)
trap 'rm -f "$list"' EXIT
for f in src/server/*.cpp; do
  g++ -std=c++20 -Isrc -DBOOST_ASIO_NO_DEPRECATED -M "$f" 2>/dev/null || true
done | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u > "$list"
[ -s "$list" ] || { echo "no Boost headers found (is libboost1.81-dev installed?)" >&2; exit 1; }
# Paths inside the archive start at boost/.
sed 's|^/usr/include/||' "$list" | tar -C /usr/include -cJf "$dest/boost_headers.tar.xz" -T -
lib=/usr/lib/x86_64-linux-gnu
cp -L "$lib/libz.so.1" "$dest/lib/libz.so.1"
ln -sf libz.so.1 "$dest/lib/libz.so"
echo "staged $(wc -l < "$list") Boost headers ($(du -h "$dest/boost_headers.tar.xz" | cut -f1) packed) and zlib into $dest"
