#!/usr/bin/env bash
# scripts/soak.sh MINUTES: a bounded soak of the farm on this machine (docs/farm.md, "Soak").
#
# For MINUTES it tunes several models back to back (emulated h100, --retune, one tuning DB)
# with a coordinator bound to loopback with CURVE, served by three dc-worker daemons that
# outlive each tune. Meanwhile a chaos loop kills a random worker (SIGKILL, sometimes
# SIGTERM) and restarts it, and a garbage loop throws connections at the coordinator
# (scripts/soak_garbage.py: random bytes, truncated greetings, wrong keys, malformed and
# truncated frames). At the end it checks the invariants and exits 1 if one is broken:
#   - every tune exits 0 and every job it sent has exactly one result ("this run N jobs
#     sent, N results"), and the DB gained exactly the results that are recorded (all but
#     worker_lost / internal_error), so nothing was lost or doubled on the way;
#   - `PRAGMA integrity_check` of the DB is ok;
#   - the coordinator's resident memory stays flat: for each model, the highest peak RSS over
#     the second half of its tunes is within DC_SOAK_RSS_BOUND (default 1.25) x the highest
#     over the first half + 16 MiB (highest, because some tunes report a peak far below the
#     others, most likely ones that end between two 0.2 s samples: 50 MiB among 78-86), and
#     the RSS inside a tune, from the dispatch of its jobs to its end, grows by less than the
#     same bound.
# Environment: DC_BIN (default build/bin), DC_SOAK_DIR (work folder, default a new one under
# /tmp, deleted when every invariant holds, kept and printed otherwise), DC_SOAK_MODELS (space-separated .onnx paths; default the
# three examples plus models/mobilenetv2 when present), DC_SOAK_CONFIG (default
# examples/tune-quick.yaml), DC_SOAK_SEED.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
MINUTES="${1:-}"
[[ "$MINUTES" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "usage: scripts/soak.sh MINUTES" >&2; exit 2; }
BIN="${DC_BIN:-$ROOT/build/bin}"
for b in dc-coordinator dc-worker; do
  [ -x "$BIN/$b" ] || { echo "error: $BIN/$b is missing (build it first)" >&2; exit 2; }
done
SEED="${DC_SOAK_SEED:-$RANDOM}"
RANDOM="$SEED"
D="${DC_SOAK_DIR:-$(mktemp -d /tmp/dc-soak.XXXXXX)}"
mkdir -p "$D"
CONFIG="${DC_SOAK_CONFIG:-$ROOT/examples/tune-quick.yaml}"
if [ -n "${DC_SOAK_MODELS:-}" ]; then
  read -r -a MODELS <<<"$DC_SOAK_MODELS"
else
  MODELS=("$ROOT"/examples/tiny_cnn/model.onnx "$ROOT"/examples/tiny_ops/model.onnx
          "$ROOT"/examples/tiny_transformer/model.onnx)
  [ -f "$ROOT/models/mobilenetv2/model.onnx" ] && MODELS+=("$ROOT/models/mobilenetv2/model.onnx")
fi
RSS_BOUND="${DC_SOAK_RSS_BOUND:-1.25}"
NWORKERS=3
echo "soak: $MINUTES minute(s), seed $SEED, folder $D"
echo "soak: models: ${MODELS[*]#$ROOT/}"

# Keys: the coordinator's, one per worker, one allowed key the garbage thrower uses, and an
# intruder's that is not in the allow-list.
for k in coordinator garbage intruder $(seq -f 'w%g' 1 $NWORKERS); do
  "$BIN/dc-coordinator" keygen "$D/$k.key" --force >/dev/null
done
cat "$D"/w*.key.pub "$D/garbage.key.pub" >"$D/allow"
PORT="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
ENDPOINT="tcp://127.0.0.1:$PORT"

PIDS=()  # background loops
cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for f in "$D"/w*.pid "$D"/coordinator.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_worker() {  # start_worker I: a dc-worker daemon serving one emulated h100
  "$BIN/dc-worker" --connect "$ENDPOINT" --emulate h100 --server-key "$D/coordinator.key.pub" \
    --key "$D/w$1.key" --worker-id "soak-w$1" --builders 1 >>"$D/w$1.log" 2>&1 &
  echo $! >"$D/w$1.pid"
}
for i in $(seq 1 $NWORKERS); do start_worker "$i"; done

chaos_loop() {  # at half the tunes' starts, 0.2-2 s in (mid-tune), kill a random worker
  local seen="" pid sig i
  while true; do
    sleep 0.1
    pid="$(cat "$D/coordinator.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && [ "$pid" != "$seen" ] || continue
    seen="$pid"
    ((RANDOM % 2 == 0)) || continue
    sleep "$((RANDOM % 2)).$((RANDOM % 10))"
    i=$((RANDOM % NWORKERS + 1)) sig=KILL
    ((RANDOM % 4 == 0)) && sig=TERM  # a drain: finishes its jobs, says Bye
    kill -s "$sig" "$(cat "$D/w$i.pid")" 2>/dev/null || true
    sleep "0.$((RANDOM % 10))"
    [ "$sig" = TERM ] && sleep 1
    kill -9 "$(cat "$D/w$i.pid")" 2>/dev/null || true
    wait "$(cat "$D/w$i.pid")" 2>/dev/null || true
    start_worker "$i"
    echo "$(date +%s) $sig w$i" >>"$D/chaos.log"
  done
}
garbage_loop() {  # a garbage connection every 0-2 s
  local n=0
  while true; do
    sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
    /usr/bin/python3 "$ROOT/scripts/soak_garbage.py" 127.0.0.1 "$PORT" "$D/coordinator.key.pub" \
      "$D/garbage.key" "$D/intruder.key" "$((SEED * 100003 + n))" >>"$D/garbage.log" 2>&1 || true
    n=$((n + 1))
  done
}
chaos_loop & PIDS+=($!)
garbage_loop & PIDS+=($!)

rows() { sqlite3 "$D/soak.db" 'SELECT count(*) FROM measurements' 2>/dev/null || echo 0; }
kib() { awk -v k="$1" '$1 == k ":" {print $2}' "/proc/$2/status" 2>/dev/null || true; }

FAILURES=0
fail() { echo "soak: FAILED: $*"; FAILURES=$((FAILURES + 1)); }
declare -A PEAKS TUNES
TOTAL_TUNES=0 TOTAL_JOBS=0 TOTAL_LOST=0 TOTAL_REQUEUED=0 TOTAL_DROPPED=0 TOTAL_REFUSED=0 MAX_INNER=0
END=$(( $(date +%s) + $(awk -v m="$MINUTES" 'BEGIN {printf "%d", m * 60}') ))
while [ "$(date +%s)" -lt "$END" ]; do
  for model in "${MODELS[@]}"; do
    [ "$(date +%s)" -lt "$END" ] || break
    TOTAL_TUNES=$((TOTAL_TUNES + 1))
    name="$(basename "$(dirname "$model")")"
    out="$D/tune-$TOTAL_TUNES-$name.log"
    before="$(rows)"
    "$BIN/dc-coordinator" --log-level info tune "$model" --gpus h100 --emulate --retune --bind "$ENDPOINT" \
      --curve-key "$D/coordinator.key" --allow-workers "$D/allow" --db "$D/soak.db" \
      --out "$D/plan" --config "$CONFIG" --wait-workers 60 -q >"$out" 2>&1 &
    pid=$!
    echo "$pid" >"$D/coordinator.pid"
    # RSS samples (KiB) every 0.2 s: the peak, and the growth while results are collected.
    peak=0 base=0 last=0
    while kill -0 "$pid" 2>/dev/null; do
      r="$(kib VmRSS "$pid")"; h="$(kib VmHWM "$pid")"
      if [ -n "$r" ]; then
        [ -n "$h" ] && [ "$h" -gt "$peak" ] && peak="$h"
        # From the moment every job is sent on (the model and plan are built by then), the
        # coordinator only collects results: its memory should not grow.
        if [ "$base" -eq 0 ] && grep -q 'jobs sent' "$out"; then base="$r"; fi
        if [ "$base" -gt 0 ]; then last="$r"; fi
      fi
      sleep 0.2
    done
    rc=0; wait "$pid" || rc=$?
    after="$(rows)"
    line="$(grep -m1 '^this run' "$out" || true)"
    jobs="$(sed -n 's/^this run *\([0-9]*\) jobs sent.*/\1/p' <<<"$line")"
    results="$(sed -n 's/.*, \([0-9]*\) results:.*/\1/p' <<<"$line")"
    unrecorded="$(awk -v RS=', ' '$2 == "worker_lost" || $2 == "internal_error" {s += $1} END {print s + 0}' <<<"${line#*results: }")"
    counters="$(sed -n 's/.*farm: counters: //p' "$out" | tail -1)"
    requeued="$(awk -v RS=', ' '$3 == "requeued" {print $1}' <<<"$counters")"
    dropped="$(awk -v RS=', ' '$3 == "dropped" {print $1}' <<<"$counters")"
    refused=$(( $(awk -v RS=', ' '$2 == "hellos" {print $1}' <<<"$counters") + $(grep -c 'refused a connection' "$out" || true) ))
    echo "soak: tune $TOTAL_TUNES $name: exit $rc, ${jobs:-?} jobs, ${results:-?} results ($unrecorded not recorded), DB +$((after - before)) rows, $requeued requeued, $dropped frames dropped, $refused refused, peak RSS $((peak / 1024)) MiB"
    if [ "$rc" -ne 0 ]; then fail "tune $TOTAL_TUNES ($name) exited $rc: $(grep -m1 'error' "$out" || tail -1 "$out")"; continue; fi
    [ -n "$counters" ] || fail "tune $TOTAL_TUNES ($name): no 'farm: counters' line"
    [ -n "$jobs" ] && [ "$jobs" = "$results" ] || fail "tune $TOTAL_TUNES ($name): ${jobs:-?} jobs but ${results:-?} results"
    [ $((after - before)) -eq $((results - unrecorded)) ] ||
      fail "tune $TOTAL_TUNES ($name): the DB gained $((after - before)) rows for $((results - unrecorded)) recorded results"
    TOTAL_JOBS=$((TOTAL_JOBS + jobs)); TOTAL_LOST=$((TOTAL_LOST + unrecorded)); TOTAL_REQUEUED=$((TOTAL_REQUEUED + requeued))
    TOTAL_DROPPED=$((TOTAL_DROPPED + dropped)); TOTAL_REFUSED=$((TOTAL_REFUSED + refused))
    TUNES[$name]=$(( ${TUNES[$name]:-0} + 1 ))
    PEAKS[$name]="${PEAKS[$name]:-} $peak"
    if [ "$base" -gt 0 ]; then
      inner=$((last - base))
      [ "$inner" -gt "$MAX_INNER" ] && MAX_INNER=$inner
      awk -v b="$base" -v l="$last" -v f="$RSS_BOUND" 'BEGIN {exit !(l <= b * f + 16384)}' ||
        fail "tune $TOTAL_TUNES ($name): RSS grew from $((base / 1024)) to $((last / 1024)) MiB while collecting results"
    fi
  done
done
cleanup
trap - EXIT

echo
echo "soak: $TOTAL_TUNES tunes, $TOTAL_JOBS jobs, $TOTAL_REQUEUED leases requeued from killed workers, $TOTAL_LOST worker_lost/internal_error; the coordinators dropped $TOTAL_DROPPED frames and refused $TOTAL_REFUSED connections or hellos"
echo "soak: $(wc -l <"$D/chaos.log" 2>/dev/null || echo 0) workers killed and restarted, $(wc -l <"$D/garbage.log" 2>/dev/null || echo 0) garbage connections ($(sed 's/ .*//' "$D/garbage.log" 2>/dev/null | sort | uniq -c | awk '{printf "%s%s %s", s, $2, $1; s=", "}'))"
integrity="$(sqlite3 "$D/soak.db" 'PRAGMA integrity_check' 2>&1)"
echo "soak: PRAGMA integrity_check: $integrity; $(rows) measurements in the DB"
[ "$integrity" = ok ] || fail "integrity_check: $integrity"
for name in "${!TUNES[@]}"; do
  # Highest peak of the first and of the second half of the model's tunes (KiB).
  read -r n first second < <(echo ${PEAKS[$name]} | awk '{h = int(NF / 2); f = 0; s = 0;
    for (i = 1; i <= NF; ++i) { if (i <= h) { if ($i > f) f = $i } else if ($i > s) s = $i }
    print NF, f, s}')
  if [ "$n" -lt 2 ]; then
    echo "soak: coordinator peak RSS, $name: one tune ($((second / 1024)) MiB), no growth to measure"
    continue
  fi
  echo "soak: coordinator peak RSS, $name: highest of the first $((n / 2)) tunes $((first / 1024)) MiB, of the last $((n - n / 2)) $((second / 1024)) MiB (growth $(((second - first) / 1024)) MiB)"
  awk -v b="$first" -v l="$second" -v r="$RSS_BOUND" 'BEGIN {exit !(l <= b * r + 16384)}' ||
    fail "$name: peak RSS grew from $((first / 1024)) MiB (first half of its tunes) to $((second / 1024)) MiB (second half)"
done
echo "soak: largest RSS growth inside one tune, from its jobs' dispatch to its end: $((MAX_INNER / 1024)) MiB"
[ "$TOTAL_TUNES" -gt 0 ] && [ "$TOTAL_JOBS" -gt 0 ] || fail "no tune completed"
if [ "$FAILURES" -ne 0 ]; then echo "soak: $FAILURES invariant(s) broken (logs in $D)"; exit 1; fi
if [ -z "${DC_SOAK_DIR:-}" ]; then rm -rf "$D"; echo "soak: all invariants hold"
else echo "soak: all invariants hold (logs in $D)"; fi
