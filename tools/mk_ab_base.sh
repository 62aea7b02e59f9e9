#!/usr/bin/env bash
# The megakernel against older or altered sources in the same device call:
# the same machine for all (the same binary differs by up to ~2% between
# machines of the device kind, more than many changes are worth). Builds
# megaserve once per base, from this tree with src/ replaced by the base's
# src/ (all bases at once), then runs `bench decode --decode-backend
# megakernel` alternately, every base then this tree, AB_ROUNDS times
# (default 2) at MK_BATCHES x MK_CONTEXTS (default 1,8 x 8K).
#   BASES="name:dir[:spec] ..."   each base: a src/ directory and the
#                                 --mk-variants spec it is timed with
#                                 (default: its own default);
#   BASE_SRC=dir                  one base, named "base" (the older form);
#   NEW_SPECS="spec;spec"         this tree's specs (default "default").
#   here:   rm -rf .ab_base && mkdir .ab_base && git archive REV src | tar -x -C .ab_base
#           (several bases: tools/mk_ab_prepare.sh, which carries only their differences)
#   device: OUT=/dir BASE_SRC=.ab_base/src tools/mk_ab_base.sh
#           (after tools/mk_speed.sh or tools/gpu_build.sh built build-gpu/megaserve)
# .ab_base (or whatever holds the bases) is untracked scratch: delete it
# after the call, never commit it. A base that does not build is reported
# and left out.
set -uo pipefail
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
bases=${BASES:-}
[ -n "$bases" ] || bases="base:${BASE_SRC:-}"
[ -x build-gpu/megaserve ] || { echo "mk_ab_base: no build-gpu/megaserve (build it first)"; exit 1; }
jobs_each=$(( 16 / $(echo $bases | wc -w) ))
[ $jobs_each -ge 2 ] || jobs_each=2
t0=$SECONDS
names=()
for b in $bases; do
  IFS=: read -r name dir spec <<< "$b"
  [ -d "$dir" ] || { echo "mk_ab_base: base $name: $dir is not a directory"; continue; }
  root=/tmp/mk_ab_$name
  rm -rf "$root" && mkdir -p "$root"
  tar --exclude=./build-gpu --exclude=./build --exclude=./.git --exclude=./.ab_base --exclude=./.ab_full --exclude=./.ab -cf - . | tar -xf - -C "$root"
  rm -rf "$root/src" && cp -r "$dir" "$root/src"
  (cd "$root" && tools/configure_gpu.sh "$OUT/${name}_configure.log" > /dev/null &&
     ninja -C build-gpu -j$jobs_each megaserve > "$OUT/${name}_build.log" 2>&1) &
  names+=("$name")
done
wait
ok=()
for b in $bases; do
  IFS=: read -r name dir spec <<< "$b"
  if [ -x "/tmp/mk_ab_$name/build-gpu/megaserve" ]; then
    ok+=("$b")
  else
    echo "mk_ab_base: base $name did not build"
    grep -E "error" -A3 "$OUT/${name}_build.log" 2>/dev/null | head -10
  fi
done
echo "== ${#ok[@]} bases built ($((SECONDS - t0)) s)"
B=${MK_BATCHES:-1,8}
C=${MK_CONTEXTS:-8K}
IFS=';' read -ra new_specs <<< "${NEW_SPECS:-default}"
for r in $(seq 1 "${AB_ROUNDS:-2}"); do
  for b in "${ok[@]}"; do
    IFS=: read -r name dir spec <<< "$b"
    /tmp/mk_ab_$name/build-gpu/megaserve bench decode --random nmc-full --batch "$B" --context "$C" \
      --decode-backend megakernel --mk-variants "${spec:-default}" --json "$OUT/ab_${name}_$r.json" 2>> "$OUT/ab.log" |
      grep -E "^megakernel" | sed "s/^/$name round $r: /"
  done
  k=0
  for s in "${new_specs[@]}"; do
    k=$((k + 1))
    build-gpu/megaserve bench decode --random nmc-full --batch "$B" --context "$C" --decode-backend megakernel \
      --mk-variants "$s" --json "$OUT/ab_new${k}_$r.json" 2>> "$OUT/ab.log" | grep -E "^megakernel" | sed "s/^/new round $r: /"
  done
done
