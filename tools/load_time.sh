#!/usr/bin/env bash
# Issue 13's load-time figure: writes a random checkpoint of the full North
# Mini Code shape (init-random, ~61 GB) to DIR (default /dev/shm/nmc-full,
# tmpfs), starts `megaserve serve` on it, waits for /health to say ready, and
# reports the wall time to ready with the server's own load lines (bytes read
# and uploaded, GB/s, CPU convert vs copy-engine wait). Then SIGTERM.
#   OUT=/dir tools/load_time.sh [DIR]        (SIZE=tiny for a dry run anywhere)
# LAYERS=N writes the shape's first N layers only (init-random --layers): the
# disk figure on a box whose disk cannot hold all 61 GB, e.g.
#   OUT=/dir LAYERS=20 tools/load_time.sh /root/nmc20
# (the page cache is dropped first when the directory is not tmpfs; the last
# lines scale the measured upload rate to the full 60.97 GB, said as such).
# Needs build-gpu/megaserve (tools/gpu_build.sh builds it); on a machine
# without a GPU the server loads into the CPU backend instead (still a dry run
# of this script, not the figure).
set -uo pipefail
OUT="${OUT:-$PWD/device_out}"
mkdir -p "$OUT"
DIR=${1:-/dev/shm/nmc-full}
SIZE=${SIZE:-full}
M=${MEGASERVE:-build-gpu/megaserve}
[ -x "$M" ] || { echo "no $M (build it first)"; exit 1; }
LAYERS=${LAYERS:-}
need_gb=$([ "$SIZE" = full ] && echo 62 || echo 1)
[ -n "$LAYERS" ] && [ "$SIZE" = full ] && need_gb=$(( (62 * LAYERS + 48) / 49 + 1 ))
parent=$(dirname "$DIR")
free_gb=$(df -BG --output=avail "$parent" | tail -1 | tr -dc 0-9)
if [ "$free_gb" -lt "$need_gb" ]; then
  echo "load_time: $parent has ${free_gb} GB free, the $SIZE checkpoint needs ~${need_gb} GB"
  exit 1
fi
if [ ! -f "$DIR/config.json" ]; then
  t0=$(date +%s.%N)
  vocab=(); [ "$SIZE" = tiny ] && vocab=(--vocab 4096)  # the demo tokenizer's ids must fit
  layers=(); [ -n "$LAYERS" ] && layers=(--layers "$LAYERS")
  "$M" init-random --arch nmc --size "$SIZE" --seed 1 "${vocab[@]}" "${layers[@]}" --out "$DIR" > "$OUT/init_random.log" 2>&1 ||
    { tail -5 "$OUT/init_random.log"; exit 1; }
  echo "load_time: wrote $(du -sh "$DIR" | cut -f1) to $DIR in $(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}') s"
fi
# A random checkpoint has no tokenizer: the demo model's (its ids fit any vocabulary this large).
for f in tokenizer.json tokenizer_config.json chat_template.jinja; do
  [ -f "$DIR/$f" ] || cp "models/north-mini-demo/$f" "$DIR/$f"
done
# Evict nothing: tmpfs pages are memory. For a disk directory, drop its pages
# first (needs root) so the read is cold.
if [ "$(stat -f -c %T "$DIR")" != tmpfs ] && [ -w /proc/sys/vm/drop_caches ]; then
  sync
  echo 3 > /proc/sys/vm/drop_caches
  # The disk's own rate, to compare the load with, read with O_DIRECT (it
  # bypasses the page cache, so the load after it stays cold): one shard by
  # one stream, then every shard at once (one stream each), which is what
  # the load's 16 threads ask of the disk.
  shard=$(ls "$DIR"/*.safetensors | head -1)
  dd if="$shard" of=/dev/null bs=16M iflag=direct 2> "$OUT/dd.log" &&
    echo "load_time: disk, one stream: $(tail -1 "$OUT/dd.log") (dd O_DIRECT of $(basename "$shard"))"
  d0=$(date +%s.%N)
  for f in "$DIR"/*.safetensors; do dd if="$f" of=/dev/null bs=16M iflag=direct 2>> "$OUT/dd_all.log" & done
  wait
  d1=$(date +%s.%N)
  bytes=$(du -cb --apparent-size "$DIR"/*.safetensors | tail -1 | cut -f1)
  echo "load_time: disk, one stream per shard: $(awk -v n="$bytes" -v a="$d1" -v b="$d0" \
    'BEGIN{printf "%.2f GB in %.1f s, %.2f GB/s", n / 1e9, a - b, n / 1e9 / (a - b)}') (dd O_DIRECT of every shard at once)"
fi
port=$((20000 + RANDOM % 20000))
t0=$(date +%s.%N)
"$M" serve --model "$DIR" --port "$port" --log-level info > "$OUT/serve.log" 2>&1 &
pid=$!
state=""
for _ in $(seq 1 1800); do
  state=$(python3 -c "
import json, urllib.request
try:
    print(json.load(urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)).get('status', ''))
except urllib.error.HTTPError as e:
    print(json.load(e).get('status', ''))
except Exception:
    print('')" 2>/dev/null)
  [ "$state" = ready ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
t1=$(date +%s.%N)
kill -TERM "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ "$state" != ready ]; then
  echo "load_time: the server did not become ready"
  tail -20 "$OUT/serve.log"
  exit 1
fi
echo "load_time: $DIR ($(stat -f -c %T "$DIR")): ready $(awk -v a="$t1" -v b="$t0" 'BEGIN{printf "%.1f", a-b}') s after start"
grep -E "backend auto|load:|reading and uploading the weights: .* in |upload:|KV cache|kv cache" "$OUT/serve.log" | head -12
# A layer cut: the full shape at the same rates. From a cold disk the pass
# that reads the shards is the finite check (mmap, every float byte); the
# upload after it reads them from the page cache (this needs RAM for the
# checkpoint: 128 GB on the device machine). Both rates do not depend on the
# layer count, so the time to ready scales with the bytes.
if [ -n "$LAYERS" ]; then
  ready=$(awk -v a="$t1" -v b="$t0" 'BEGIN{printf "%.2f", a-b}')
  gb=$(grep -oE "mapped [0-9.]+ GB of weights" "$OUT/serve.log" | tail -1 | grep -oE "[0-9.]+")
  check=$(grep -oE "weights are finite: [0-9.]+ GB checked in [0-9.]+ s \([0-9.]+ GB/s" "$OUT/serve.log" | tail -1)
  up=$(grep -oE "reading and uploading the weights: [0-9.]+ GB in [0-9.]+ s \([0-9.]+ GB/s\)" "$OUT/serve.log" | tail -1)
  [ -n "$gb" ] && awk -v g="$gb" 'BEGIN{exit !(g > 0)}' && echo "load_time: $LAYERS of 49 layers, $gb GB: ready in $ready s ($check; $up);" \
    "the full 60.97 GB at the same rates: ~$(awk -v r="$ready" -v g="$gb" 'BEGIN{printf "%.0f", r * 60.97 / g}') s to ready (extrapolated)"
fi
