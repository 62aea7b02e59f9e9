#!/usr/bin/env bash
# Issue 11's serving check: `bench serve` TPOT against the bench's step time,
# per decode path. For each path of DECODE_BACKENDS (default "layered
# megakernel"; "auto" also prints what it chose) it serves MODEL (default the full North Mini Code shape with
# --load-format dummy: random weights generated on the GPU, no checkpoint),
# waits for /health ready, and runs `bench serve` at each concurrency of CONCS
# (default "1 8") with token prompts of IN tokens (default 1024) and OUT_LEN
# output tokens (default 256, ignore_eos), PROMPTS_PER_CONC requests per slot
# (default 4). Then `bench decode` times the same paths at those batches and
# the context the requests reach (IN + OUT_LEN, rounded up to a bucket the
# bench takes), so the two can be compared line by line: TPOT / step time.
# The rest (TPOT above the step) is what serving adds: scheduling, sampling,
# the HTTP stream, and prefill steps of arriving requests between decode
# steps (at concurrency > 1).
#   OUT=/dir tools/serve_tpot.sh            (device machine, repo root)
# Needs build-gpu/megaserve (tools/gpu_build.sh megaserve builds it);
# MEGASERVE=path picks another binary and BACKEND=ref a dry run without a GPU
# (then use a small MODEL, LOAD_FORMAT=auto and DECODE_BACKENDS=layered; the
# step-time comparison runs for the default MODEL only).
set -uo pipefail
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
M=${MEGASERVE:-build-gpu/megaserve}
[ -x "$M" ] || { echo "serve_tpot: no $M (build it first)"; exit 1; }
MODEL=${MODEL:-models/configs/north-mini-code}
LOAD_FORMAT=${LOAD_FORMAT:-dummy}
BACKEND=${BACKEND:-auto}
IN=${IN:-1024}
OUT_LEN=${OUT_LEN:-256}
vocab=$(python3 -c "import json; print(json.load(open('$MODEL/config.json'))['vocab_size'])")
summary="$OUT/serve_tpot.txt"
: > "$summary"
for b in ${DECODE_BACKENDS:-layered megakernel}; do
  port=$((20000 + RANDOM % 20000))
  "$M" serve --model "$MODEL" --load-format "$LOAD_FORMAT" --backend "$BACKEND" --decode-backend "$b" \
    --port "$port" --log-level info > "$OUT/serve_$b.log" 2>&1 &
  srv=$!
  state=""
  for _ in $(seq 1 600); do
    state=$(curl -s "http://127.0.0.1:$port/health" | python3 -c "import json,sys; print(json.load(sys.stdin).get('status',''))" 2>/dev/null)
    [ "$state" = ready ] && break
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.5
  done
  if [ "$state" != ready ]; then
    echo "serve_tpot: the $b server did not become ready" | tee -a "$summary"
    tail -5 "$OUT/serve_$b.log"
    kill "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null
    continue
  fi
  for c in ${CONCS:-1 8}; do
    "$M" bench serve --base-url "http://127.0.0.1:$port" --num-prompts $((c * ${PROMPTS_PER_CONC:-4})) \
      --max-concurrency "$c" --input-len "$IN" --output-len "$OUT_LEN" --prompt-kind tokens \
      --vocab-range "1000:$vocab" --result-json "$OUT/serve_${b}_c$c.json" > "$OUT/bench_serve_${b}_c$c.log" 2>&1
    line=$(grep -E "Failed|Output token|Median TPOT|P99 TPOT|Median ITL" "$OUT/bench_serve_${b}_c$c.log" |
           tr -s ' ' | tr '\n' ';')
    echo "serve $b concurrency $c: $line" | tee -a "$summary"
  done
  kill -TERM "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  # --decode-backend auto: what it timed and chose per batch size and context.
  grep -E "decode auto:" "$OUT/serve_$b.log" | sed "s/^/serve $b: /" | tee -a "$summary"
done
# The step time of the same paths at those batches and the context reached.
ctx=$(( (IN + OUT_LEN + 1023) / 1024 ))K
batches=$(echo ${CONCS:-1 8} | tr ' ' ',')
paths=$(echo ${DECODE_BACKENDS:-layered megakernel} | tr ' ' '\n' | grep -vx auto | paste -sd ,)  # auto: not a bench path
if [ "$BACKEND" != ref ] && [ "$MODEL" = models/configs/north-mini-code ] && [ -n "$paths" ]; then
  "$M" bench decode --random nmc-full --batch "$batches" --context "$ctx" \
    --decode-backend "$paths" --json "$OUT/bench_decode.json" \
    2> "$OUT/bench_decode.log" | tee -a "$summary"
fi
# The device tool returns at most 8 files: everything in $OUT goes into
# serve_tpot.tgz, with the summary and the step times also beside it.
(cd "$OUT" && tar czf serve_tpot.tgz $(ls | grep -v '^serve_tpot.tgz$') &&
  ls | grep -vE '^(serve_tpot.tgz|serve_tpot.txt|bench_decode.json)$' | xargs rm -rf)
