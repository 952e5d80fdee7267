#!/usr/bin/env bash
# From a fresh clone to a checked model: installs what is missing, builds in Release,
# exports the example ResNet-50 (random weights, no download) and runs the main job on it:
# `inspect` and `verify` of the model, then a quick `tune` on emulated workers (times are
# modelled; the tuning DB is models/dc-tuning.db, so a second run measures nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
/usr/bin/python3 scripts/export_models.py models --models resnet50
echo
echo "== dc-coordinator inspect models/resnet50/model.onnx"
build/bin/dc-coordinator inspect models/resnet50/model.onnx
echo
echo "== dc-coordinator verify models/resnet50/model.onnx --data models/resnet50/test_data_set_0"
build/bin/dc-coordinator verify models/resnet50/model.onnx --data models/resnet50/test_data_set_0
echo
echo "== dc-coordinator tune models/resnet50/model.onnx --gpus h100 --local-workers 2 --emulate"
build/bin/dc-coordinator tune models/resnet50/model.onnx --gpus h100 --local-workers 2 --emulate \
  --config examples/tune-quick.yaml --db models/dc-tuning.db --out models/resnet50/tuned
