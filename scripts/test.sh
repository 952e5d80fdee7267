#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, and runs every ctest test,
# the long ones (exported ResNet-50, MobileNetV2, BERT-base; ONNX conformance cases) included.
#   scripts/test.sh            everything
#   scripts/test.sh -L unit    only the fast unit tests (any ctest arguments pass through)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 1500 "$@"
