#!/usr/bin/env bash
# From a fresh clone to a checked model: installs what is missing, builds in Release,
# exports the example ResNet-50 (random weights, no download) and runs the main job on it:
# `inspect` and `verify` of the model, a quick `tune` (on the local GPU, or on emulated
# workers whose times are modelled; the tuning DB is models/dc-tuning.db, so a second run
# measures nothing), and finally the tuned plan run by `dc-run` with its outputs checked
# against PyTorch's (on the GPU, or on the host emulator where there is none). Then the
# same in fp16 (`--precision fp16`: f16 weights and activations, tensor cores with fp32
# accumulation), and the two plans side by side: weights.bin size, estimated and measured
# time, error against PyTorch's fp32 outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The product only: the test suites (about 160 files) are scripts/test.sh's to build.
scripts/build.sh dc-coordinator dc-worker dc-db dc-run dcrt
/usr/bin/python3 scripts/export_models.py models --models resnet50
echo
echo "== dc-coordinator inspect models/resnet50/model.onnx"
build/bin/dc-coordinator inspect models/resnet50/model.onnx
echo
echo "== dc-coordinator verify models/resnet50/model.onnx --data models/resnet50/test_data_set_0"
build/bin/dc-coordinator verify models/resnet50/model.onnx --data models/resnet50/test_data_set_0
echo
# The GPU type to tune for: the local GPU's type where there is one (set DC_GPU to it:
# `dc-coordinator tune --help` points to the table), h100 emulated otherwise.
GPU="${DC_GPU:-h100}"
if nvidia-smi -L >/dev/null 2>&1; then HAVE_GPU=1; else HAVE_GPU=0; fi
echo "== dc-coordinator tune models/resnet50/model.onnx --gpus $GPU --local-workers 2 --out models/resnet50/tuned"
# Without a usable CUDA device, tune runs emulated workers by itself (times are modelled).
build/bin/dc-coordinator tune models/resnet50/model.onnx --gpus "$GPU" --local-workers 2 \
  --config examples/tune-quick.yaml --db models/dc-tuning.db --out models/resnet50/tuned
echo
if [ "$HAVE_GPU" = 1 ]; then
  echo "== dc-run models/resnet50/tuned/$GPU --data models/resnet50/test_data_set_0 --bench 100"
  build/bin/dc-run "models/resnet50/tuned/$GPU" --data models/resnet50/test_data_set_0 --bench 100
else
  # No GPU: the plan runs on the host emulator (correctness only, no timing).
  echo "== dc-run models/resnet50/tuned/$GPU --data models/resnet50/test_data_set_0 --emulate"
  build/bin/dc-run "models/resnet50/tuned/$GPU" --data models/resnet50/test_data_set_0 --emulate
fi | tee models/resnet50/tuned/run-fp32.txt
echo
echo "== dc-coordinator tune models/resnet50/model.onnx --gpus $GPU --precision fp16 --out models/resnet50/tuned-fp16"
build/bin/dc-coordinator tune models/resnet50/model.onnx --gpus "$GPU" --local-workers 2 \
  --precision fp16 --config examples/tune-quick.yaml --db models/dc-tuning.db \
  --out models/resnet50/tuned-fp16
echo
RUN_FLAGS="--emulate"
if [ "$HAVE_GPU" = 1 ]; then RUN_FLAGS="--bench 100"; fi
echo "== dc-run models/resnet50/tuned-fp16/$GPU --data models/resnet50/test_data_set_0 $RUN_FLAGS"
# shellcheck disable=SC2086
build/bin/dc-run "models/resnet50/tuned-fp16/$GPU" --data models/resnet50/test_data_set_0 $RUN_FLAGS \
  | tee models/resnet50/tuned-fp16/run-fp16.txt
echo
echo "== ResNet-50 on $GPU: the fp32 plan beside the fp16 plan"
/usr/bin/python3 scripts/compare_plans.py \
  "fp32=models/resnet50/tuned/$GPU:models/resnet50/tuned/run-fp32.txt" \
  "fp16=models/resnet50/tuned-fp16/$GPU:models/resnet50/tuned-fp16/run-fp16.txt"
