#!/usr/bin/env bash
# The megakernel against an older revision in the same device call: the same
# machine for both (the same binary differs by up to ~2% between machines of
# the device kind, more than many changes are worth). Builds megaserve from
# this tree with src/ replaced by BASE_SRC (the base revision's src/), then
# runs `bench decode --decode-backend megakernel` alternately, base then new,
# AB_ROUNDS times (default 2) at MK_BATCHES x MK_CONTEXTS (default 1,8 x 8K).
#   here:   rm -rf .ab_base && mkdir .ab_base && git archive REV src | tar -x -C .ab_base
#   device: OUT=/dir BASE_SRC=.ab_base/src tools/mk_ab_base.sh
#           (after tools/mk_speed.sh or tools/gpu_build.sh built build-gpu/megaserve)
# .ab_base is untracked scratch: delete it after the call, never commit it.
set -uo pipefail
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
[ -d "${BASE_SRC:-}" ] || { echo "mk_ab_base: BASE_SRC (the base revision's src/) is not a directory"; exit 1; }
[ -x build-gpu/megaserve ] || { echo "mk_ab_base: no build-gpu/megaserve (build it first)"; exit 1; }
base=/tmp/mk_ab_base
rm -rf "$base"
mkdir -p "$base"
tar --exclude=./build-gpu --exclude=./build --exclude=./.git --exclude=./.ab_base -cf - . | tar -xf - -C "$base"
rm -rf "$base/src"
cp -r "$BASE_SRC" "$base/src"
t0=$SECONDS
if ! (cd "$base" && tools/configure_gpu.sh "$OUT/base_configure.log" > /dev/null &&
      ninja -C build-gpu -j16 megaserve > "$OUT/base_build.log" 2>&1); then
  echo "mk_ab_base: the base did not build"
  grep -E "error" -A3 "$OUT/base_build.log" | head -20
  exit 1
fi
echo "== base built ($((SECONDS - t0)) s)"
B=${MK_BATCHES:-1,8}
C=${MK_CONTEXTS:-8K}
for r in $(seq 1 "${AB_ROUNDS:-2}"); do
  for side in base new; do
    bin=build-gpu/megaserve
    [ "$side" = base ] && bin="$base/build-gpu/megaserve"
    "$bin" bench decode --random nmc-full --batch "$B" --context "$C" --decode-backend megakernel \
      --json "$OUT/ab_${side}_$r.json" 2>> "$OUT/ab.log" | grep -E "^megakernel" | sed "s/^/$side round $r: /"
  done
done
