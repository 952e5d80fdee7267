#!/usr/bin/env python3
"""One tune for a V100 and an A100 from the same build (issue 29), end to end:

  1. `dc-coordinator tune MODEL --gpus v100,a100 --emulate --local-workers N --out OUT
     [--precision P]` exits 0 and writes OUT/v100 and OUT/a100;
  2. each plan.json names its GPU and the NVRTC that compiles for it: 12.x for v100 (sm_70,
     which CUDA 13 dropped), 13.x for a100; the run's summary shows measured results for both;
  3. with --precision fp16, no v100 kernel calls sm_80's m16n8k16 and no a100 kernel Volta's
     m8n8k4 (the count of tensor-core kernels of each is printed);
  4. `dc-run OUT/GPU --emulate --data DATA` exits 0 and says PASS for every output, for both.

usage: check_multi_gpu_run.py DC_COORDINATOR DC_RUN MODEL.onnx DATA_DIR CONFIG.yaml PRECISION [tune flags]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

NVRTC_MAJOR = {"v100": "12", "a100": "13"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(cmd, timeout=3600):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    print(f"$ {' '.join(cmd)}  -> {p.returncode} in {time.time() - t0:.1f} s")
    return p.returncode, p.stdout, p.stderr


def main():
    if len(sys.argv) < 7:
        fail(__doc__)
    coord, dc_run, model, data, config, precision = sys.argv[1:7]
    extra = sys.argv[7:]
    tmp = tempfile.mkdtemp(prefix="dc_multi_gpu_")
    out = os.path.join(tmp, "out")
    cmd = [coord, "tune", model, "--gpus", "v100,a100", "--emulate", "--out", out, "--config", config,
           "--db", os.path.join(tmp, "tune.db"), "--precision", precision] + extra
    rc, stdout, stderr = run(cmd)
    print(stdout[-3000:])
    if rc != 0:
        fail(f"tune exited {rc}:\n{stderr[-4000:]}")
    for gpu, major in NVRTC_MAJOR.items():
        plan_dir = os.path.join(out, gpu)
        plan_file = os.path.join(plan_dir, "plan.json")
        if not os.path.isfile(plan_file):
            fail(f"tune --out wrote no {plan_file}")
        plan = json.load(open(plan_file))
        if plan["gpu_type"] != gpu or plan["emulated"] is not True:
            fail(f"{gpu}: plan.json says {plan['gpu_type']}, emulated={plan['emulated']}")
        if plan["nvrtc_version"].split(".")[0] != major:
            fail(f"{gpu}: plan compiled for NVRTC {plan['nvrtc_version']}, expected {major}.x")
        kernels = open(os.path.join(plan_dir, "kernels.cu")).read()
        if precision == "fp16":
            own, other = ("dc_mma_m8n8k4_f16(", "dc_mma_m16n8k16_f16(") if gpu == "v100" else \
                         ("dc_mma_m16n8k16_f16(", "dc_mma_m8n8k4_f16(")
            # The prelude declares both; a kernel that calls one does so with "(dc_accum". The
            # selection may pick no tensor-core kernel on a small model (CUDA-core ones win).
            calls = kernels.count(own + "dc_accum")
            print(f"{gpu}: {calls} kernel(s) call {own[:-1]}")
            if other + "dc_accum" in kernels:
                fail(f"{gpu}: a kernel of the fp16 plan calls {other[:-1]}")
        print(f"{gpu}: {len(plan['steps'])} steps, NVRTC {plan['nvrtc_version']}, precision {plan.get('precision')}")
        rc, stdout, stderr = run([dc_run, plan_dir, "--emulate", "--data", data])
        print(stdout)
        if rc != 0 or "PASS" not in stdout or "FAIL" in stdout:
            fail(f"{gpu}: dc-run --emulate --data exited {rc}:\n{stdout}\n{stderr[-3000:]}")
    shutil.rmtree(tmp)
    print("OK")


if __name__ == "__main__":
    main()
