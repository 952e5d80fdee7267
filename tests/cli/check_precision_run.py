#!/usr/bin/env python3
"""A reduced-precision plan end to end (issue 12's acceptance):

  1. `dc-coordinator tune MODEL --gpus GPU --precision P --emulate --out OUT` exits 0;
  2. OUT/GPU/plan.json records precision P; weights and most intermediates are stored in
     P's type (f16/bf16) while the model's inputs and outputs keep their dtypes; weights.bin
     is about half of the same weights in f32;
  3. `dc-run OUT/GPU --emulate --data DATA` exits 0: every output within P's whole-model
     tolerance of the fp32 test data (docs/precision.md), rel-L2 and max-abs printed, and
     for a classifier the top-1/top-5 agreement.

usage: check_precision_run.py DC_COORDINATOR DC_RUN MODEL.onnx DATA_DIR CONFIG.yaml GPU PRECISION [tune flags]
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

DTYPE = {"fp16": "f16", "bf16": "bf16"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(cmd, timeout=3000):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    print(f"$ {' '.join(cmd)}  -> {p.returncode} in {time.time() - t0:.1f} s")
    return p.returncode, p.stdout, p.stderr


def main():
    coord, dc_run, model, data, config, gpu, precision = sys.argv[1:8]
    extra = sys.argv[8:]
    tmp = tempfile.mkdtemp(prefix="dc_check_precision_run_")
    out_dir = os.path.join(tmp, "out")
    rc, out, err = run([coord, "tune", model, "--gpus", gpu, "--config", config, "--emulate",
                        "--precision", precision, "--db", os.path.join(tmp, "tune.db"),
                        "--out", out_dir] + extra)
    if rc != 0:
        fail(f"tune exited {rc}\n{out}\n{err}")
    if f"precision  {precision}" not in out:
        fail(f"the tune summary does not show precision {precision}:\n{out}")
    plan_dir = os.path.join(out_dir, gpu)
    plan = json.load(open(os.path.join(plan_dir, "plan.json")))
    if plan.get("precision") != precision:
        fail(f"plan.json precision {plan.get('precision')!r}, expected {precision}")
    tensors = plan["tensors"]
    reduced = [t for t in tensors if t["dtype"] == DTYPE[precision]]
    weights = [t for t in tensors if t["kind"] == "weight"]
    if not reduced or len(reduced) < len(tensors) // 2:
        fail(f"only {len(reduced)} of {len(tensors)} tensors stored in {DTYPE[precision]}")
    for t in tensors:
        if t["kind"] in ("input", "output") and t["dtype"] in ("f16", "bf16"):
            fail(f"model {t['kind']} {t['name']} changed dtype to {t['dtype']}")
    f32_bytes = sum(4 * math.prod(t["shape"]) for t in weights if t["dtype"] in ("f32", "f16", "bf16"))
    size = os.path.getsize(os.path.join(plan_dir, "weights.bin"))
    ratio = size / f32_bytes
    print(f"plan: {len(plan['steps'])} steps, {len(reduced)}/{len(tensors)} tensors in "
          f"{DTYPE[precision]}, weights.bin {size / 2**20:.2f} MiB = {ratio:.3f} of f32")
    if not 0.45 < ratio < 0.6:
        fail(f"weights.bin is {ratio:.3f} of the f32 weights, expected about half")

    rc, out, err = run([dc_run, plan_dir, "--emulate", "--data", data])
    print(out)
    if rc != 0 or "PASS" not in out or "FAIL" in out:
        fail(f"dc-run --emulate --data exited {rc}:\n{out}\n{err}")
    if f"precision {precision}" not in out:
        fail("dc-run does not show the plan's precision")
    outputs = [t for t in tensors if t["kind"] == "output"]
    if len(outputs) == 1 and len(outputs[0]["shape"]) == 2 and outputs[0]["shape"][1] >= 5:
        if "top-1 agreement" not in out:
            fail("a classifier's dc-run --data shows no top-1/top-5 agreement")
    shutil.rmtree(tmp)
    print("OK")


if __name__ == "__main__":
    main()
