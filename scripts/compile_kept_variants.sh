#!/usr/bin/env bash
# Every kept tensor-core variant of ResNet-50, MobileNetV2 and BERT-base compiled with NVRTC
# for sm_80 (a100), sm_86 (a10), sm_89 (l4) and sm_90 (h100), per precision path: the ctest
# tests `compile_kept_mma_<path>` (label compile_all; tests/compile_all/), run one after the
# other with their CSV and tables kept. Hours on 2 cores: docs/bench/compile-all.md.
#
#   scripts/compile_kept_variants.sh [OUT_DIR] [PATH...]     (default: build/compile_all, tf32 fp16 bf16)
#
# Resumable: the ptxas figures of every compiled (arch, source) unit are appended to
# OUT_DIR/figures.tsv (DC_FIGURES to name another file) as each batch ends; a rerun compiles
# only the units not in it (a stopped run, or sources a generator change made new).
#
# Environment passed through: DC_MODEL (one model), DC_GPUS, DC_FIRST_ONLY=1 (each workload's
# first choice only, minutes), DC_BATCH, DC_THREADS. Needs the exported models in models/
# (scripts/export_models.py, or a link to them) and a build (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/compile_all}
shift || true
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(tf32 fp16 bf16)
[ -f models/resnet50/model.onnx ] || { echo "error: no models/resnet50/model.onnx (scripts/export_models.py)" >&2; exit 2; }
cmake --build build -j2 --target dc_compile_all_tests >/dev/null
mkdir -p "$out"
status=0
for p in "${paths[@]}"; do
  echo "== $p ($(date -u +%H:%M:%S))"
  if DC_MODELS_DIR=models DC_MMA_PATH="$p" DC_CSV="$out/$p.csv" DC_FIGURES="${DC_FIGURES:-$out/figures.tsv}" \
       nice -n 10 build/bin/dc_compile_all_tests >"$out/$p.log" 2>&1; then
    echo "   passed"
  else
    echo "   FAILED (see $out/$p.log)"
    status=1
  fi
  grep -E '^\||^COMPILEKEPT' "$out/$p.log" || true
done
exit $status
