#!/usr/bin/python3
"""A decoder with several GB of external data (scripts/make_decoder_model.py) imports, plans
and writes a plan (`plan --out`) while the peak resident memory of dc-coordinator stays
under a quarter of the weights' size, and weights.bin holds every weight byte for byte
(sampled). Label `long`: writing the model and the plan moves about 2 x 2.6 GB.

With PRECISION fp16 or bf16 (`plan --precision`, test scale_external_data_fp16): a 6-layer
decoder (1.3 GB); every weight is converted chunk by chunk while weights.bin is written, so
the peak stays under a quarter of the fp32 weights too (converting them in memory would
hold half of them), and the end of lm_head in weights.bin is numpy's round-to-nearest-even
conversion of the model's bytes.

  check_scale.py DC_COORDINATOR SOURCE_ROOT WORK_DIR [PRECISION]
"""
import os
import shutil
import subprocess
import sys
import time

coord, root, work = sys.argv[1], sys.argv[2], sys.argv[3]
precision = sys.argv[4] if len(sys.argv) > 4 else "fp32"
layers, width, seq = (12 if precision == "fp32" else 6), 2048, 128
folder = os.path.join(work, "scale_check_" + precision)
shutil.rmtree(folder, ignore_errors=True)
os.makedirs(folder)
model = os.path.join(folder, "model.onnx")
try:
    subprocess.run(["/usr/bin/python3", os.path.join(root, "scripts/make_decoder_model.py"), "--layers", str(layers),
                    "--width", str(width), "--seq", str(seq), "--vocab", "8192", "--out", model], check=True)
    weights = os.path.getsize(model + ".data")
    plan_dir = os.path.join(folder, "plan")
    t0 = time.time()
    proc = subprocess.Popen([coord, "--log-level", "info", "plan", model, "--gpus", "h100", "--precision", precision,
                             "--out", plan_dir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    log = proc.stderr.read()
    seconds = time.time() - t0
    peak = usage.ru_maxrss * 1024
    print(log)
    print(f"weights {weights / 2**30:.2f} GiB; import + plan + plan writing {seconds:.1f} s, "
          f"peak RSS {peak / 2**20:.0f} MiB ({100 * peak / weights:.1f} % of the weights)")
    failures = []
    if os.waitstatus_to_exitcode(status) != 0:
        failures.append(f"plan --out failed: {log}")
    if peak >= weights / 4:
        failures.append(f"peak RSS {peak} bytes is not under a quarter of the weights' {weights} bytes")
    stored = weights if precision == "fp32" else weights // 2
    bin_size = os.path.getsize(os.path.join(plan_dir, "weights.bin")) if os.path.exists(plan_dir) else 0
    if bin_size < stored * 0.99:
        failures.append(f"weights.bin holds {bin_size} bytes for {stored} bytes of {precision} weights")
    # The last MiB of the model's data (lm_head's tail) must appear in weights.bin.
    with open(model + ".data", "rb") as f:
        f.seek(weights - (1 << 20))
        tail = f.read()
    if precision != "fp32":
        import numpy as np
        values = np.frombuffer(tail, dtype=np.float32)
        if precision == "fp16":
            tail = values.astype(np.float16).tobytes()
        else:  # bf16: round to nearest even on the upper half of the bits (no NaNs here)
            bits = values.view(np.uint32).astype(np.uint64)
            tail = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    with open(os.path.join(plan_dir, "weights.bin"), "rb") as f:
        data = f.read()
    if tail not in data:
        failures.append(f"the end of lm_head ({precision}) is not in weights.bin")
    del data
    if failures:
        print("FAILURES:\n" + "\n".join(failures))
        sys.exit(1)
    print("ok")
finally:
    shutil.rmtree(folder, ignore_errors=True)
