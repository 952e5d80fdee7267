#!/usr/bin/env bash
# Installs dc's build and test dependencies from Debian's packages. Idempotent: when every
# package is present it changes nothing and exits 0 without touching the network.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libzmq3-dev cppzmq-dev
  libsqlite3-dev sqlite3
  libonnx-dev libprotobuf-dev protobuf-compiler
  libonnx-testdata        # the full ONNX backend node-test corpus (tests/cli/run_node_tests.py)
  libboost-program-options-dev
  libyaml-cpp-dev
  libgtest-dev libgmock-dev
  libspdlog-dev libfmt-dev
  libmicrohttpd-dev       # dc-coordinator serve --metrics: /metrics and the status page over HTTP
  libjemalloc-dev         # dc-coordinator's malloc: less CPU per job in serve (docs/bench/farm-service.md)
  python3-onnx python3-torch python3-torchvision python3-numpy
  chromium python3-pil    # tests: the HTML report rendered headless (dc_db_report_screenshot)
  patchelf                # scripts/make_dist.sh: RPATHs of the relocatable bundle
  pybind11-dev python3-dev python3-pytest python3-venv   # the Python package dc (docs/python.md)
  clang libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer and clang's sanitizer runtimes (docs/bench/fuzz.md)
  iproute2                # ctest -L hosts: network namespaces and veth pairs (tests/hosts/farm_hosts.sh)
  ccache                  # scripts/build.sh: rebuilds after a branch switch reuse objects
  pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers clinfo
  libclblast-dev          # the OpenCL back end on PoCL and its peer, CLBlast (docs/bench/opencl.md)
  clang-15                # OpenCL kernels to SPIR for PoCL: the clang of PoCL's LLVM (docs/opencl.md)
  systemd                 # tests/deploy/check_deploy.py: systemd-analyze verify of examples/deploy's units
  slurmctld slurmd slurm-client munge   # ctest -L slurm: examples/deploy's batch script on a real single-node Slurm
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit is not a Debian package here: it is expected at /usr/local/cuda
# (NVRTC and headers, for code generation in later stages). Warn, do not fail: the
# foundation builds and tests without it.
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: warning: no CUDA toolkit at /usr/local/cuda (needed for NVRTC later)" >&2
fi

# NVRTC 12 from PyPI for sm_70 (V100), which CUDA 13's NVRTC dropped: dc loads every NVRTC
# it finds at run time and compiles each arch with the newest that targets it
# (docs/compilation.md, "Which NVRTC"). /opt/dc/nvrtc-cu12 is one of the folders it searches.
DC_NVRTC12=/opt/dc/nvrtc-cu12
if ! ls "$DC_NVRTC12"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 >/dev/null 2>&1; then
  echo "install-deps: installing nvidia-cuda-nvrtc-cu12 into $DC_NVRTC12"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$DC_NVRTC12" \
    "nvidia-cuda-nvrtc-cu12==12.9.86"
fi

# ONNX Runtime (CPU) from PyPI, the whole-model peer of dc's OpenCL plans on PoCL
# (scripts/bench_opencl_models.py, docs/bench/opencl.md), in a folder of its own and without
# its dependencies, so that Debian's numpy and protobuf stay as they are (PYTHONPATH=/opt/dc/ort).
DC_ORT=/opt/dc/ort
if [ ! -d "$DC_ORT/onnxruntime" ]; then
  echo "install-deps: installing onnxruntime into $DC_ORT"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$DC_ORT" \
    "onnxruntime==1.20.1"
fi

# kubernetes-validate from PyPI (with its jsonschema), in a folder of its own so that Debian's
# Python packages stay as they are: tests/deploy/check_deploy.py validates examples/deploy's
# Kubernetes manifests with it (PYTHONPATH=/opt/dc/pydeps).
DC_PYDEPS=/opt/dc/pydeps
if [ ! -d "$DC_PYDEPS/kubernetes_validate" ]; then
  echo "install-deps: installing kubernetes-validate into $DC_PYDEPS"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO python3 -m pip install --quiet --disable-pip-version-check --target "$DC_PYDEPS" \
    "kubernetes-validate==1.37.0"
fi

# prometheus_client from PyPI, in the same folder: tests/service/check_metrics.py parses the
# service's /metrics with its text parser (the reference one) and checks it against the DB.
if [ ! -d "$DC_PYDEPS/prometheus_client" ]; then
  echo "install-deps: installing prometheus-client into $DC_PYDEPS"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO python3 -m pip install --quiet --disable-pip-version-check --target "$DC_PYDEPS" \
    "prometheus-client==0.26.0"
fi
