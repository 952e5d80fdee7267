#!/usr/bin/env bash
# From a fresh clone to a checked model: installs what is missing, builds in Release,
# exports the example ResNet-50 (random weights, no download) and runs the main job on it.
# Until the tuner exists the main job is `inspect` and `verify` of the model.
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
