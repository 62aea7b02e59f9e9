#!/usr/bin/env bash
# Round 11's third device call: round 11's winners as the defaults
# (d347fc0) under the megakernel tests; the attention's share of the SMs
# over the grid (the default picks it by shape); the default path's ~2%
# against main (9c2b8a8's kernel) bisected by file (tools/mk_ab_base.sh:
# main's src, and this tree with the 320-thread launch, attention.cuh or
# loader.cuh put back, all timed with round 10's settings); timelines at
# 128K.
#   OUT=/dir tools/mk_round11c.sh   (device machine, repo root, .deps and .ab carried)
# .ab (untracked scratch, never committed; made here, small enough to travel):
#   git archive --format=tar.gz -o .ab/main_src.tgz main src
#   git show main:src/gpu/mk/ops/attention.cuh > .ab/files/attention.cuh
#   git show main:src/gpu/mk/loader.cuh > .ab/files/loader.cuh
# ~430 s: build ~60, tests ~125, grid ~40, A/B ~150, timelines ~60.
set -uo pipefail
source tools/gpu_build.sh test_gpu megaserve || exit 1
T=build-gpu/test_gpu
M=build-gpu/megaserve
run_mk_tests "$OUT/mk_tests.log" 300
t0=$SECONDS
timeout 200 $M bench decode --random nmc-full --batch 1,2,4,8 --context 1K,8K,32K,64K,128K \
  --mk-variants "default;attn_pct=100;attn_pct=75;attn_pct=50" --json "$OUT/bench_grid.json" 2> "$OUT/bench_grid.log" |
  tee "$OUT/bench_grid_table.txt"
echo "== grid: $((SECONDS - t0)) s"
ab=/tmp/ab_trees
rm -rf $ab && mkdir -p $ab/main $ab/threads $ab/attn $ab/loader
tar xzf .ab/main_src.tgz -C $ab/main
for t in threads attn loader; do cp -r src $ab/$t/src; done
sed -i 's|constexpr int kThreads = kConsumerThreads + 64;.*|constexpr int kThreads = kConsumerThreads + 32;|' $ab/threads/src/gpu/mk/sync.cuh
cp .ab/files/attention.cuh $ab/attn/src/gpu/mk/ops/attention.cuh
cp .ab/files/loader.cuh $ab/loader/src/gpu/mk/loader.cuh
OLD="qkv_run=1,costs=1,attn_pct=100,down_slot_wait=0,local_route=0,async_signal=0,gemv_warps=0,static_pct=0,down_window=0"
BASES="main:$ab/main/src threads:$ab/threads/src:$OLD attn:$ab/attn/src:$OLD loader:$ab/loader/src:$OLD" \
  NEW_SPECS="$OLD;default" timeout 240 tools/mk_ab_base.sh
i=0
for spec in "1 128K default" "1 128K attn_pct=50" "4 128K default"; do
  read -r b c v <<< "$spec"
  i=$((i + 1))
  timeout 60 $M bench decode --random nmc-full --decode-backend megakernel --batch "$b" --context "$c" \
    --mk-variants "$v" --timeline "$OUT/timeline$i.json" > "$OUT/timeline_run$i.log" 2>&1 || tail -3 "$OUT/timeline_run$i.log"
  if [ -f "$OUT/timeline$i.json" ]; then
    echo "== timeline $i (bs $b / $c, $v), layers 2-3:"
    python3 tools/plot_timeline.py --summary "$OUT/timeline$i.json" 2-3 > "$OUT/timeline_summary$i.txt"
    head -12 "$OUT/timeline_summary$i.txt"
    gzip -f "$OUT/timeline$i.json"
  fi
done
(cd "$OUT" && tar czf round11c.tgz $(ls | grep -v '^round11c.tgz$') &&
  ls | grep -vE '^(round11c.tgz|bench_grid.json|bench_grid_table.txt|mk_tests.log)$' | xargs rm -rf)
