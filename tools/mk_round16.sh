#!/usr/bin/env bash
# Round 16 (docs/megakernel.md, "Round 15 measured"): (1) main's kernel
# before the Smem fix (the base, tools/mk_ab_prepare.sh) against this tree
# (+ Smem as shared memory, + Params::poll_ns) as builds alternating on one
# machine, and this tree's NEW_SPECS (default: the shipped tuning, the
# counter polls spinning or capped at 64 ns, head_sms=1) at bs 1 / 8 x 8K;
# (2) the megakernel tests of this tree under TEST_SPEC (default: the
# shipped tuning); (3) the bs 1 / 8K timeline. One archive (the device
# tool returns at most 8 files).
#   here:   tools/mk_ab_prepare.sh base=<rev>
#   device: OUT=/dir tools/mk_round16.sh 2>&1 | tee $OUT/round.txt   (carry .deps; delete .ab_base after)
set -uo pipefail
FINAL=${OUT:-$PWD/device_out}
export OUT="$FINAL/r"
mkdir -p "$OUT"
source tools/gpu_build.sh megaserve test_gpu || exit 1
nvidia-smi --query-gpu=name,memory.total,serial,clocks.max.sm --format=csv,noheader
bases=""
if [ -d .ab_base ]; then
  tools/mk_ab_prepare.sh --expand
  for b in .ab_full/*/; do b=$(basename "$b"); bases="$bases $b:.ab_full/$b/src"; done
fi
if [ -n "$bases" ]; then
  t=$(( $(left 600) - ${AB_LEAVE:-215} ))   # the rest: the tests and the timeline
  [ "$t" -gt 20 ] && AB_ROUNDS=${AB_ROUNDS:-3} MK_BATCHES=${MK_BATCHES:-1,8} MK_CONTEXTS=${MK_CONTEXTS:-8K} BASES="${bases# }" \
    NEW_SPECS="${NEW_SPECS:-default;poll_ns=0;poll_ns=64;head_sms=1}" timeout "$t" tools/mk_ab_base.sh
else
  echo "== no .ab_base: the A/B is skipped"
fi
t=$(left ${TEST_S:-170})
[ "$t" != 0 ] && MEGASERVE_MK_EXPERIMENTS=${TEST_SPEC:-default} run_mk_tests "$OUT/mk_tests.log" "$t"
t=$(left 25)
if [ "$t" != 0 ]; then
  timeout "$t" build-gpu/megaserve bench decode --random nmc-full --batch 1 --context 8K --decode-backend megakernel \
    --timeline "$OUT/tl.json" 2> "$OUT/tl.log" | grep megakernel
  python3 tools/plot_timeline.py --summary "$OUT/tl.json" 1-3 > "$OUT/tl_summary.txt" 2>&1
  python3 tools/plot_timeline.py --extract "$OUT/tl.json" "$OUT/tl.json.gz" 1-3
  rm -f "$OUT/tl.json"
fi
(cd "$FINAL" && tar czf r16.tgz r && rm -rf r)
