#!/usr/bin/env bash
# Fuzzes dc's parsers with libFuzzer (docs/bench/fuzz.md): builds the harnesses of tests/fuzz/
# with clang (-fsanitize=fuzzer,address,undefined) in build-fuzz/, then runs each for SECONDS
# (default 60). Grown corpora stay in build-fuzz/corpus/ (out of git) and seed later runs.
# Prints executions, coverage and findings per harness; exits 1 on any finding (a crash, a
# sanitizer report, a timeout, an out-of-memory, an InternalError or another non-UserError
# exception), with its input in build-fuzz/findings/HARNESS/.
#   scripts/fuzz.sh [SECONDS]          every harness
#   FUZZ_ONLY=fuzz_plan scripts/fuzz.sh 600   one harness
#   FUZZ_JOBS=2 scripts/fuzz.sh ...    parallel fuzzing processes per harness (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-60}"
ROOT="$PWD"
B="$ROOT/build-fuzz"
HARNESSES=(fuzz_onnx_import fuzz_tensor_pb fuzz_plan fuzz_farm_codec fuzz_db_import fuzz_tune_config)
[ -n "${FUZZ_ONLY:-}" ] && HARNESSES=($FUZZ_ONLY)

scripts/install-deps.sh >/dev/null
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$ROOT")}"
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# The ordinary Release build (build/, as scripts/build.sh makes it): its static libraries
# link the harnesses (tests/fuzz/CMakeLists.txt) and its dc-coordinator makes seeds.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${LAUNCHER[@]}" >/dev/null
nice -n 10 cmake --build build -j"${FUZZ_BUILD_JOBS:-2}" --target dc-coordinator dc-worker dc-db
# The fuzzed sources are instrumented (coverage counters for libFuzzer, ASan, UBSan); UBSan
# stops at the first report so that libFuzzer records it as a crash.
SAN="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer -gline-tables-only"
LNK="-fsanitize=address,undefined"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ "${LAUNCHER[@]}" \
  -DCMAKE_CXX_FLAGS="$SAN" -DCMAKE_EXE_LINKER_FLAGS="$LNK" -DCMAKE_SHARED_LINKER_FLAGS="$LNK" \
  -DCMAKE_MODULE_LINKER_FLAGS="$LNK" -DDC_FUZZ=ON -DDC_PYTHON=OFF -DDC_WERROR=OFF >/dev/null
nice -n 10 cmake --build "$B" -j"${FUZZ_BUILD_JOBS:-2}" --target "${HARNESSES[@]}" make_frame_seeds

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Seed corpora: examples/, ../shared/onnx-node-tests, tuned plans and their DBs (tiny_cnn,
# tiny_transformer, and two one- or two-module models whose small plans and DBs mutate
# fast), the YAML examples, a recorded farm conversation. Made again whenever what they
# depend on changes (the DB schema, the plan format, the seed makers): a seed of an older
# schema or format would only reach the version checks.
S="$B/seeds"
SEED_KEY=$(cat schema/migrations/*.sql codegen/plan/plan_format.h codegen/plan/plan_json.cpp \
  common/farm/farm.proto tests/fuzz/*.py tests/fuzz/*.sql tests/fuzz/make_frame_seeds.cpp \
  tests/fuzz/farm_frames.h scripts/fuzz.sh | sha256sum | cut -c1-16)
if [ "$(cat "$S/.done" 2>/dev/null)" != "$SEED_KEY" ]; then
  # The plan and DB seeds come from quick emulated tunes by the ordinary build.
  COORD="$ROOT/build/bin/dc-coordinator"
  rm -rf "$S" && mkdir -p "$S"/{fuzz_onnx_import,fuzz_tensor_pb,fuzz_plan,fuzz_db_import,fuzz_tune_config,models}
  NODE="$ROOT/../shared/onnx-node-tests"
  for m in examples/*/model.onnx "$NODE"/*/model.onnx; do
    [ -f "$m" ] && cp "$m" "$S/fuzz_onnx_import/$(basename "$(dirname "$m")").onnx"
  done
  for t in examples/*/test_data_set_0/*.pb "$NODE"/*/test_data_set_0/*.pb; do
    [ -f "$t" ] && cp "$t" "$S/fuzz_tensor_pb/$(basename "$(dirname "$(dirname "$t")")")_$(basename "$t")"
  done
  cp examples/*.yaml "$S/fuzz_tune_config/"
  /usr/bin/python3 tests/fuzz/make_small_models.py "$S/models"
  for ex in tiny_cnn tiny_transformer small_gemm small_two; do
    model="examples/$ex/model.onnx"
    [ -f "$model" ] || model="$S/models/$ex.onnx"
    "$COORD" --log-level error tune "$model" --config examples/tune-quick.yaml \
      --gpus h100 --emulate --local-workers 2 --db "$S/$ex.db" --out "$S/plan_$ex" >/dev/null
    cp "$S/$ex.db" "$S/fuzz_db_import/$ex.db"
    # The small models' DBs cut to a few rows of each table with 512-byte pages.
    if [[ $ex == small_* ]]; then
      sqlite3 "$S/fuzz_db_import/$ex.db" <tests/fuzz/small_db_seed.sql >/dev/null
    fi
    # Plans with their 30 KB prelude cut short (still valid plans); '!' (raw: the harness
    # leaves the checksums alone) before each, and tiny_cnn's files exactly as dc wrote them.
    P="$S/plan_$ex/h100"
    /usr/bin/python3 tests/fuzz/pack_plan_seed.py "$P" "$S/fuzz_plan/$ex" --short-prelude
    { printf '!'; cat "$S/fuzz_plan/$ex"; } > "$S/fuzz_plan/${ex}_raw"
  done
  { printf '!'; /usr/bin/python3 tests/fuzz/pack_plan_seed.py "$S/plan_tiny_cnn/h100" /dev/stdout; } \
    > "$S/fuzz_plan/tiny_cnn_as_written"
  mkdir -p "$S/fuzz_farm_codec"
  "$B/bin/make_frame_seeds" "$S/fuzz_farm_codec" >/dev/null
  echo "$SEED_KEY" >"$S/.done"
fi

printf '%-18s %12s %8s %8s %8s  %s\n' harness executions exec/s cov features findings
failed=0
for h in "${HARNESSES[@]}"; do
  corpus="$B/corpus/$h" findings="$B/findings/$h" log="$B/logs/$h.log"
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  dict=()
  [ -f "tests/fuzz/$h.dict" ] && dict=(-dict="tests/fuzz/$h.dict")
  before=$(ls "$findings" | wc -l)
  rc=0
  # Inputs grow up to the largest seed (4 KiB at least): the plan and DB seeds are larger.
  jobs=()
  [ "${FUZZ_JOBS:-1}" -gt 1 ] && jobs=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
  "$B/bin/$h" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2560 \
    -print_final_stats=1 -close_fd_mask=1 "${jobs[@]}" \
    -artifact_prefix="$findings/" "${dict[@]}" "$corpus" "$S/$h" >"$log" 2>&1 || rc=$?
  # With -jobs each job logs to fuzz-N.log in the working folder: fold them in.
  if [ ${#jobs[@]} -gt 0 ]; then cat fuzz-*.log >>"$log" 2>/dev/null || true; rm -f fuzz-*.log; fi
  execs=$(grep -ho 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s+=$2} END {print s+0}')
  rate=$(grep -ho 'stat::average_exec_per_sec: *[0-9]*' "$log" | awk '{s+=$2} END {print s+0}')
  cov=$(grep -hoE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  # The life total per harness (docs/bench/fuzz.md): date, harness, seconds, executions.
  printf '%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$h" "$SECONDS_EACH" "$execs" >>"$B/executions.tsv"
  after=$(ls "$findings" | wc -l)
  new=$((after - before))
  [ "$rc" -ne 0 ] && [ "$new" -eq 0 ] && new=1
  printf '%-18s %12s %8s %8s %8s  %s\n' "$h" "$execs" "$rate" "$(echo "$cov" | awk '{print $2}')" \
    "$(echo "$cov" | awk '{print $4}')" "$new$([ "$new" -ne 0 ] && echo " (rc $rc; $log, $findings/)")"
  [ "$new" -ne 0 ] && failed=1
done
exit "$failed"
