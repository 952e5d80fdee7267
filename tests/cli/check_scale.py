#!/usr/bin/python3
"""A decoder with several GB of external data (scripts/make_decoder_model.py) imports, plans
and writes a plan (`plan --out`) while the peak resident memory of dc-coordinator stays
under a quarter of the weights' size, and weights.bin holds every weight byte for byte
(sampled). Label `long`: writing the model and the plan moves about 2 x 2.6 GB.

  check_scale.py DC_COORDINATOR SOURCE_ROOT WORK_DIR
"""
import os
import shutil
import subprocess
import sys
import time

coord, root, work = sys.argv[1], sys.argv[2], sys.argv[3]
layers, width, seq = 12, 2048, 128
folder = os.path.join(work, "scale_check")
shutil.rmtree(folder, ignore_errors=True)
os.makedirs(folder)
model = os.path.join(folder, "model.onnx")
try:
    subprocess.run(["/usr/bin/python3", os.path.join(root, "scripts/make_decoder_model.py"), "--layers", str(layers),
                    "--width", str(width), "--seq", str(seq), "--vocab", "8192", "--out", model], check=True)
    weights = os.path.getsize(model + ".data")
    plan_dir = os.path.join(folder, "plan")
    t0 = time.time()
    proc = subprocess.Popen([coord, "--log-level", "info", "plan", model, "--gpus", "h100", "--out", plan_dir],
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
    bin_size = os.path.getsize(os.path.join(plan_dir, "weights.bin")) if os.path.exists(plan_dir) else 0
    if bin_size < weights * 0.99:
        failures.append(f"weights.bin holds {bin_size} bytes for {weights} bytes of weights")
    # The last MiB of the model's data (lm_head's tail) must appear in weights.bin.
    with open(model + ".data", "rb") as f:
        f.seek(weights - (1 << 20))
        tail = f.read()
    with open(os.path.join(plan_dir, "weights.bin"), "rb") as f:
        data = f.read()
    if tail not in data:
        failures.append("the end of lm_head is not in weights.bin")
    del data
    if failures:
        print("FAILURES:\n" + "\n".join(failures))
        sys.exit(1)
    print("ok")
finally:
    shutil.rmtree(folder, ignore_errors=True)
