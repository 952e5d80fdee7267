#!/usr/bin/env bash
# One step of docs/bench/gpu-runbook.md per call, for a GPU machine that is lent for minutes:
# each step is self-contained (nothing carried over from an earlier call), stays within a
# time limit, and leaves what it found in OUT as a few files (STEP.log, STEP.md,
# STEP.tar.gz; `all` the files of its parts too), so that a tool returning only a few files
# from OUT brings all of it back.
#
#   scripts/gpu_runbook.sh STEP [ARGS]       OUT: $OUT, else gpu-out
#
# Steps:
#   all                        one command for a short GPU loan, in this order, each writing
#                              its table to OUT as it finishes (a command cut off at its limit
#                              still returns what it finished): check; tune resnet50 fp16
#                              (with dc-run --bench); the fp16 peer table of resnet50 (eager,
#                              torch.compile max-autotune). CPU smoke mode: tiny_cnn, emulated
#                              workers, dc-run --emulate, PyTorch eager on the CPU.
#   check                      nvidia-smi, dc-worker --list-devices, dc_gpu_tests with
#                              DC_REQUIRE_GPU=1 (what `ctest -L gpu` runs)
#   tune [MODEL [PRECISION]]   exports MODEL (default resnet50) with random weights, tunes it
#                              for the local GPU type (examples/tune-quick.yaml; PRECISION
#                              default fp32), runs the plan with dc-run --bench 200 on its test
#                              data, dc-db summary
#   profile [MODEL [PRECISION]]   tune (as above; default resnet50 fp16), then Nsight Compute
#                              (ncu --clock-control none) over one dc-run of the plan: each
#                              kernel's time, SM/DRAM throughput, occupancy, grid, registers
#                              as OUT/profile.csv
#   templates PRECISION [SHAPES]   scripts/bench_templates.py (fp32|tf32|fp16|bf16; SHAPES a
#                              comma list, default gemm_4096,bert_ffn1,r50_3x3_64)
#   peers [MODELS [PRECISION]] scripts/bench_peers.py (default resnet50, fp32), batch 1
#   train [MODEL [BATCHES [PRECISIONS]]]   scripts/bench_peers.py --train: a training step of
#                              dc's tuned plan against PyTorch eager and torch.compile
#                              max-autotune (default resnet50, batch 32, fp32,bf16)
#
# Binaries: $DC_BIN, else dist/bin from scripts/make_dist.sh --with-tests (carried beside
# this checkout), else build/bin. Python: $DC_PY, else the first of python3 and /usr/bin/python3 that imports
# torch (the GPU image's python3 has torch 2.11; Debian's /usr/bin/python3 here has 1.13).
# DC_RUNBOOK_DEVICE=cpu runs `templates`, `peers` and `train` as the scripts' CPU smoke tests (the
# plumbing, on machines without a GPU); DC_STEP_SECONDS bounds a step (default 540).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu-out}"
STEP_SECONDS="${DC_STEP_SECONDS:-540}"
DEVICE="${DC_RUNBOOK_DEVICE:-cuda}"

usage() { sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; }
[ $# -ge 1 ] || { usage >&2; exit 2; }
step="$1"; shift
case "$step" in
  all|check|tune|profile|templates|peers|train) ;;
  -h|--help) usage; exit 0 ;;
  *) echo "gpu_runbook: unknown step '$step' (all, check, tune, profile, templates, peers, train)" >&2; exit 2 ;;
esac

BIN="${DC_BIN:-$ROOT/dist/bin}"
[ -n "${DC_BIN:-}" ] || [ -x "$BIN/dc-coordinator" ] || BIN="$ROOT/build/bin"
[ -x "$BIN/dc-coordinator" ] || { echo "gpu_runbook: no dc binaries in ${DC_BIN:-dist/bin or build/bin} (scripts/make_dist.sh --with-tests)" >&2; exit 2; }

find_python() {
  for py in ${DC_PY:-} python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c "import torch" 2>/dev/null; then echo "$py"; return 0; fi
  done
  return 1
}

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/$step.log"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dc-runbook-$step.XXXXXX")"
: > "$LOG"
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
# Runs a command with the step's remaining time as its limit, its output into the log.
deadline=$(( $(date +%s) + STEP_SECONDS ))
run() {
  local left=$(( deadline - $(date +%s) ))
  if [ "$left" -le 5 ]; then say "out of time before: $*"; return 124; fi
  say "\$ $*"
  timeout --kill-after=10 "$left" "$@" >> "$LOG" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || say "exit $rc: $1"
  return "$rc"
}

say "gpu_runbook $step on $(hostname), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), binaries $BIN"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >> "$LOG" 2>&1

gpu_type() {
  "$BIN/dc-worker" --list-devices 2>/dev/null | sed -n 's/^ *[0-9][0-9]*: \([^ ]*\).*/\1/p' | head -1
}

# Runs scripts/bench_NAME.py with ARGS, its work folder in WORK/NAME and its table as
# OUT/NAME.md (OUT/LABEL.md and WORK/LABEL with DC_BENCH_LABEL=LABEL); in the CPU smoke
# mode with the scripts' short smoke settings.
bench() {
  local name="$1"; shift
  local label="${DC_BENCH_LABEL:-$name}"
  local py
  py="$(find_python)" || { say "no python with torch for bench_$name.py (set DC_PY)"; exit 2; }
  local extra=()
  [ "$DEVICE" = cpu ] && extra=(--device cpu --runs 5 --min-seconds 0.1 --warmup-seconds 0.1)
  run "$py" "$ROOT/scripts/bench_$name.py" --dc-bin "$BIN" "$@" --fresh --work "$WORK/$label" \
    --out-md "$OUT/$label.md" "${extra[@]}" || status=$?
}

# dc_gpu_tests on the GPU. A test that crashes the process (a signal) must not cost the
# tests after it their run on a lent GPU: the binary runs again without the tests that
# already finished and the one that crashed, up to 5 times; the crashed ones are listed.
gpu_tests() {
  local done_filter="" crashed=() rc mark
  for attempt in 1 2 3 4 5; do
    mark=$(wc -l < "$LOG")
    rc=0
    DC_REQUIRE_GPU=1 DC_SOURCE_DIR="$ROOT" run "$BIN/dc_gpu_tests" ${done_filter:+--gtest_filter="-$done_filter"} || rc=$?
    [ "$rc" -eq 0 ] || status=$rc
    [ "$rc" -gt 128 ] && [ "$rc" -ne 137 ] || break
    local finished last
    finished=$(tail -n +"$mark" "$LOG" | sed -n 's/^\[ *\(OK\|FAILED\|SKIPPED\) *\] \([A-Za-z0-9_/.]*\) (.*/\2/p')
    last=$(tail -n +"$mark" "$LOG" | sed -n 's/^\[ RUN      \] //p' | tail -1)
    [ -n "$last" ] || break
    crashed+=("$last")
    say "crashed in $last (exit $rc); running the tests after it"
    for t in $finished $last; do done_filter="${done_filter:+$done_filter:}$t"; done
  done
  [ ${#crashed[@]} -eq 0 ] || say "crashed tests: ${crashed[*]}"
}

step_check() {
  if [ "$DEVICE" = cpu ]; then
    run "$BIN/dc-worker" --list-devices --emulate h100 || status=$?
    DC_SOURCE_DIR="$ROOT" run "$BIN/dc_gpu_tests" --gtest_brief=1 || status=$?
  else
    run "$BIN/dc-worker" --list-devices || status=$?
    gpu_tests
  fi
  grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]|^\[..:..:..\] crashed' "$LOG" > "$OUT/check.md"
}

# tune MODEL PRECISION: on the GPU, MODEL exported with random weights; in the CPU smoke
# mode examples/tiny_cnn on emulated workers, its plan checked on the host emulator.
step_tune() {
  local model="$1" precision="$2" type data flags=() runflags=(--bench 200)
  if [ "$DEVICE" = cpu ]; then
    model=tiny_cnn type=h100 flags=(--emulate --local-workers 2) runflags=(--emulate)
    mkdir -p "$WORK/models" && cp -r "$ROOT/examples/tiny_cnn" "$WORK/models/"
  else
    local py
    py="$(find_python)" || { say "no python with torch to export $model (set DC_PY)"; status=2; return; }
    type="$(gpu_type)"
    [ -n "$type" ] || { say "dc-worker --list-devices found no GPU to tune for"; status=2; return; }
    run "$py" "$ROOT/scripts/export_models.py" "$WORK/models" --models "$model" || { status=$?; return; }
  fi
  data="$(ls -d "$WORK/models/$model"/test_data_set_0 2>/dev/null | head -1)"
  local tune_rc=0
  # info: the coordinator logs each worker's device health (SM clock, throttle reasons) once.
  run "$BIN/dc-coordinator" --log-level info tune "$WORK/models/$model/model.onnx" --gpus "$type" --db "$WORK/gpu.db" \
    --out "$WORK/plans" --config "$ROOT/examples/tune-quick.yaml" --precision "$precision" "${flags[@]}" || tune_rc=$?
  [ "$tune_rc" -eq 0 ] || status=$tune_rc
  if [ "$tune_rc" -eq 0 ]; then
    run "$BIN/dc-run" "$WORK/plans/$type" ${data:+--data "$data"} "${runflags[@]}" || status=$?
  fi
  run "$BIN/dc-db" --db "$WORK/gpu.db" summary || status=$?
  run "$BIN/dc-db" --db "$WORK/gpu.db" runs || status=$?
  { echo "# tune $model ($precision) on $type, $(date -u +%F)"; grep -E 'ms|speed|mismatch|error|PASS|FAIL|INTERNAL|IMPLAUSIBLE' "$LOG" | tail -40; } > "$OUT/tune.md"
  # The weights stay behind: the files back from a lent machine are limited to 16 MB each.
  tar -czf "$OUT/tune.tar.gz" -C "$WORK" --exclude=weights.bin gpu.db plans 2>/dev/null
}

# profile MODEL PRECISION: step_tune, then Nsight Compute over one dc-run of the plan: each
# kernel's duration, SM and DRAM throughput, achieved occupancy, grid, block and registers
# (profile.csv), at the clocks the card runs at (--clock-control none: never set clocks).
step_profile() {
  step_tune "$1" "$2"
  [ "$DEVICE" = cpu ] && { say "profile: no Nsight Compute in the CPU smoke mode"; return; }
  local ncu type
  ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
  [ -n "$ncu" ] || { say "profile: ncu not found"; status=2; return; }
  type="$(gpu_type)"
  [ -d "$WORK/plans/$type" ] || { say "profile: no plan to profile"; return; }
  local data
  data="$(ls -d "$WORK/models/$1"/test_data_set_0 2>/dev/null | head -1)"
  run "$ncu" --clock-control none --csv --page raw \
    --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread,smsp__inst_executed.sum \
    --log-file "$OUT/profile.csv" "$BIN/dc-run" "$WORK/plans/$type" ${data:+--data "$data"} || status=$?
}

status=0
case "$step" in
  all)
    step_check
    step_tune resnet50 fp16
    if [ "$DEVICE" = cpu ]; then
      bench peers --models tiny_cnn --batches 1 --precision fp16 --runners eager
    else
      bench peers --models resnet50 --batches 1 --precision fp16 --runners eager,compile-max
    fi
    tar -czf "$OUT/peers.tar.gz" -C "$WORK" --exclude='*.onnx' --exclude='*.pb' --exclude=weights.bin peers 2>/dev/null
    { for f in check tune peers; do [ -s "$OUT/$f.md" ] && { cat "$OUT/$f.md"; echo; }; done; } > "$OUT/all.md"
    ;;
  check)
    step_check
    ;;
  tune)
    step_tune "${1:-resnet50}" "${2:-fp32}"
    ;;
  profile)
    step_profile "${1:-resnet50}" "${2:-fp16}"
    ;;
  templates)
    precision="${1:?templates needs a precision: fp32, tf32, fp16 or bf16}"
    bench templates --precision "$precision" --shapes "${2:-gemm_4096,bert_ffn1,r50_3x3_64}"
    tar -czf "$OUT/templates.tar.gz" -C "$WORK" --exclude='*.onnx' --exclude='*.pb' --exclude=weights.bin templates 2>/dev/null
    ;;
  peers)
    bench peers --models "${1:-resnet50}" --batches 1 --precision "${2:-fp32}"
    tar -czf "$OUT/peers.tar.gz" -C "$WORK" --exclude='*.onnx' --exclude='*.pb' --exclude=weights.bin peers 2>/dev/null
    ;;
  train)
    if [ "$DEVICE" = cpu ]; then set -- "${1:-tiny_cnn}" "${2:-2}" "${3:-fp32}"; fi
    DC_BENCH_LABEL=train bench peers --train --models "${1:-resnet50}" --batches "${2:-32}" --precisions "${3:-fp32,bf16}" \
      --config "$ROOT/examples/tune-quick.yaml"
    tar -czf "$OUT/train.tar.gz" -C "$WORK" --exclude='*.onnx' --exclude='*.pb' --exclude=weights.bin train 2>/dev/null
    ;;
esac
rm -rf "$WORK"
[ -s "$OUT/$step.md" ] && cat "$OUT/$step.md"
say "gpu_runbook $step: exit $status; in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit "$status"
