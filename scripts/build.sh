#!/usr/bin/env bash
# Configures and builds dc into build/ (Release unless BUILD_TYPE is set). Binaries land in
# build/bin/, the Python package dc in build/python (PYTHONPATH=build/python, docs/python.md).
# Uses every core (this project's machines have 2).
#   scripts/build.sh              everything, the test suites included
#   scripts/build.sh TARGET...    only those targets and what they need (scripts/quickstart.sh
#                                 builds the product: dc-coordinator dc-worker dc-db dc-run dcrt)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_TYPE="${BUILD_TYPE:-Release}"
# ccache where installed: rebuilds after a branch switch or in a second worktree reuse objects.
# Paths relative to the checkout's root in ccache's hashes: a clone elsewhere (CI's fresh clone)
# reuses the objects of this one.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${launcher[@]}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j"$(nproc)" "${targets[@]}"
