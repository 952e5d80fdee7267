#!/usr/bin/env bash
# Builds the Python venv that exports Hugging Face transformers models with a current torch 2.x
# (PyPI's wheel, PyTorch's default exporter) for tests/data/hf_torch2 (issue 26):
#   scripts/make_torch2_venv.sh [DIR]      default DIR: ~/.cache/dc/torch2-venv
# then   DIR/bin/python scripts/export_hf_models.py tests/data/hf_torch2
# The versions are pinned so that a rebuilt venv writes the same graphs; the cached exports'
# README names the versions they came from. PyPI's torch wheel pulls the CUDA runtime wheels
# (nvidia-*, several GB) even though the export runs on the CPU. Nothing here is needed to run
# the tests: the exports are committed.
set -euo pipefail
dir="${1:-${HOME}/.cache/dc/torch2-venv}"
python="${PYTHON:-/usr/bin/python3}"
TORCH_VERSION=2.15.0
TRANSFORMERS_VERSION=5.24.0
ONNX_VERSION=1.23.2
ONNXSCRIPT_VERSION=0.7.2
if [[ ! -x "$dir/bin/python" ]]; then
  "$python" -m venv "$dir"
fi
"$dir/bin/python" -m pip install --quiet --upgrade pip
"$dir/bin/python" -m pip install --quiet \
  "torch==${TORCH_VERSION}" "transformers==${TRANSFORMERS_VERSION}" \
  "onnx==${ONNX_VERSION}" "onnxscript==${ONNXSCRIPT_VERSION}" numpy
"$dir/bin/python" - <<'PY'
import onnx, onnxscript, torch, transformers
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"onnx {onnx.__version__}, onnxscript {onnxscript.__version__}")
PY
echo "venv ready: $dir"
