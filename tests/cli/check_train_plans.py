#!/usr/bin/env python3
"""Tuned training plans end to end (docs/training.md, "Training plans"): `tune --train
--emulate --out` of a model through the local farm of emulated workers, then `dc-run --train
--emulate --data --steps 2 --save-weights` of the tuned plan. Checks: every job ends ok, the
plan is a training plan, dc-run's per-step losses equal `verify --train`'s (the CPU reference)
on the same batch, the saved model loads in onnxruntime (PYTHONPATH /opt/dc/ort) and holds
weights that changed, while a weight dc-run did not train would be unchanged.

usage: check_train_plans.py DC_COORDINATOR DC_RUN MODEL.onnx [--loss L] [--recompute] [--ulp-bound] [--timeout S] [tune flags...]
       check_train_plans.py DC_COORDINATOR DC_RUN MODEL.onnx --opencl
  --loss cross_entropy (default) or mse: the training loss; labels follow the plan's labels
  input (class indices, or a seeded float target).
  --timeout S: each command's limit (default 3000 s).
  --ulp-bound: a later step's loss may be ill-conditioned (a large SGD step of ResNet-50 at
  batch 8 moves step 2's loss by 2 % when the input moves by one ulp): each step's loss
  must then be within max(1e-4 relative, twice the change of verify --train's loss when
  every input element moves by one ulp), measured in the same run.
  --recompute: the plan must record a recomputed Relu output (tiny_cnn's Conv-BatchNorm-Relu).
  The batch: seeded uniform floats, and integer inputs (token ids in range, masks) from the
  exported model's test_data_set_0.
  --opencl: the estimate-only training plan for PoCL's CPU device (`plan --train --gpus
  pocl-cpu --out`), two steps run by dc-run on that real OpenCL device (no emulator), the
  optimizer state updated in place (docs/training.md "State between steps"): the losses
  equal verify --train's, and each trained weight's update equals that of the h100 plan's
  two steps on the host emulator (a wrong in-place update shows in step 2).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, "/opt/dc/ort")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from train_batch import write_batch  # noqa: E402,F401 (check_train_amp and check_train_tf32 import it from here)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


TIMEOUT = 3000  # seconds a command may take (--timeout)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def losses(text):
    return [float(x) for x in re.findall(r"^step \d+ loss (\S+)$", text, re.M)]


def perturb_by_one_ulp(data, out):
    """A copy of the batch whose float inputs move by one ulp each, up or down at random
    (seeded); integer inputs (class labels, token ids) stay."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(data, out)
    rng = np.random.default_rng(1)
    for f in sorted(os.listdir(out)):
        if not f.startswith("input_"):
            continue
        t = onnx.load_tensor(os.path.join(out, f))
        x = numpy_helper.to_array(t)
        if x.dtype != np.float32:
            continue
        away = np.where(rng.random(x.shape) < 0.5, np.inf, -np.inf).astype(np.float32)
        with open(os.path.join(out, f), "wb") as fh:
            fh.write(numpy_helper.from_array(np.nextafter(x, away).astype(np.float32), t.name).SerializeToString())
    return out


def compare_with_emulator(coord, dcrun, model, data, saved, flags, steps, tmp):
    """The h100 plan's steps on the host emulator from the same batch: every trained
    initializer's update (after - before) within verify --train's bound (rel L2 1e-3) of
    the PoCL run's."""
    out = os.path.join(tmp, "emulated")
    run([coord, "plan", model, "--gpus", "h100", "--out", out, *flags])
    emulated = os.path.join(tmp, "emulated.onnx")
    run([dcrun, out, "--train", "--emulate", "--data", data, "--steps", steps, "--save-weights", emulated])
    before = {i.name: numpy_helper.to_array(i) for i in onnx.load(model).graph.initializer}
    pocl = {i.name: numpy_helper.to_array(i) for i in onnx.load(saved).graph.initializer}
    emu = {i.name: numpy_helper.to_array(i) for i in onnx.load(emulated).graph.initializer}
    compared = 0
    for name, w in before.items():
        if w.dtype.kind != "f" or np.array_equal(emu[name], w):
            continue
        want, got = emu[name] - w, pocl[name] - w
        err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
        if err > 1e-3:
            fail("%s: the PoCL update after %s steps differs from the emulator's (rel L2 %.2e)" % (name, steps, err))
        compared += 1
    if compared == 0:
        fail("no trained initializer to compare with the emulator's")
    print("PoCL's updates after %s steps equal the emulator's for %d trained initializers" % (steps, compared))


def main():
    global TIMEOUT
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for name in ("dc_coordinator", "dc_run", "model"):
        parser.add_argument(name)
    parser.add_argument("--opencl", action="store_true")
    parser.add_argument("--recompute", action="store_true")
    parser.add_argument("--ulp-bound", action="store_true")
    parser.add_argument("--loss", default="cross_entropy")
    parser.add_argument("--timeout", type=int, default=TIMEOUT)
    a, extra = parser.parse_known_args()  # the rest are tune flags
    coord, dcrun, model = a.dc_coordinator, a.dc_run, a.model
    opencl, recompute, ulp_bound, loss = a.opencl, a.recompute, a.ulp_bound, a.loss
    TIMEOUT = a.timeout
    gpu = "pocl-cpu" if opencl else "h100"
    steps = "2"
    flags = ["--train", "--loss", loss, "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"]
    with tempfile.TemporaryDirectory(prefix="dc-train-plans-") as tmp:
        out = os.path.join(tmp, "out")
        if opencl:
            run([coord, "plan", model, "--gpus", gpu, "--out", os.path.join(out, gpu), *flags])
            jobs = None
        else:
            text = run([coord, "tune", model, "--gpus", gpu, "--emulate", "--db", os.path.join(tmp, "db.sqlite"),
                        "--out", out, "--quiet", *flags, *extra])
            jobs = re.search(r"^(\d+) jobs, (\d+) results committed", text, re.M)
            if not jobs or jobs.group(1) != jobs.group(2):
                fail("not every job of the training tune has a result:\n" + text[-2000:])
            if "activations kept for the backward pass" not in text:
                fail("tune --train's summary has no memory report:\n" + text[-2000:])
        plan = json.load(open(os.path.join(out, gpu, "plan.json")))
        if plan.get("mode") != "train" or not plan["training"]["state"]:
            fail("the tuned plan is not a training plan")
        # The memory report (docs/training.md, "Memory"): tiny_cnn keeps activations for the
        # backward pass, and recomputes its Conv-BatchNorm-Relu blocks' Relu outputs.
        memory = plan["memory"]
        if memory["saved_for_backward"]["bytes"] <= 0 or memory["total_bytes"] < memory["arena_bytes"]:
            fail("plan.json's memory report is wrong: %s" % memory)
        if recompute and not any(t.startswith("recompute: ") and "Relu_output_0" in t
                                 for t in plan["weight_transforms"]):
            fail("the plan records no recomputed Relu output: %s" % plan["weight_transforms"])
        data = os.path.join(tmp, "batch")
        write_batch(model, data, plan)
        saved = os.path.join(tmp, "trained.onnx")
        device = run([dcrun, os.path.join(out, gpu), "--train", *([] if opencl else ["--emulate"]), "--data", data,
                      "--steps", steps, "--save-weights", saved])
        # verify --train needs an expected loss to compare with: give it dc-run's last one,
        # and compare every step's loss here.
        got = losses(device)
        if len(got) != int(steps):
            fail("dc-run printed %d step losses:\n%s" % (len(got), device))
        with open(os.path.join(data, "output_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.array(got[-1], dtype=np.float32), "loss").SerializeToString())
        # With --ulp-bound the last step is ill-conditioned: verify's own rtol would judge it
        # before the bound measured below does, so it only computes the reference here.
        ref = run([coord, "verify", model, "--data", data, "--steps", steps, *flags,
                   *(["--rtol", "1e9"] if ulp_bound else [])])
        want = losses(ref)
        print("dc-run --train losses %s, verify --train %s" % (got, want), flush=True)
        bounds = [1e-4 * max(abs(b), 1e-6) for b in want]
        if ulp_bound:
            perturbed = perturb_by_one_ulp(data, os.path.join(tmp, "perturbed"))
            moved = losses(run([coord, "verify", model, "--data", perturbed, "--steps", steps, *flags,
                                "--rtol", "1e9"]))
            bounds = [max(bound, 2 * abs(m - b)) for bound, m, b in zip(bounds, moved, want)]
            print("verify --train's losses with every input moved by one ulp: %s (bounds %s)" % (moved, bounds))
        for k, (a, b) in enumerate(zip(got, want)):
            if abs(a - b) > bounds[k]:
                fail("step %d: dc-run loss %g, CPU reference %g (bound %g)" % (k + 1, a, b, bounds[k]))
        # Every weight and momentum buffer is updated in place (docs/training.md "State between
        # steps"): only BatchNorm's running statistics and the step counter are copied.
        pairs = [(plan["tensors"][w]["name"], plan["tensors"][n]["kind"]) for w, n in plan["training"]["state"]]
        copied = [w for w, kind in pairs if kind != "view"]
        if any("running_" not in w and w != "train.step" for w in copied):
            fail("state pairs not updated in place: %s" % copied)
        if opencl:
            compare_with_emulator(coord, dcrun, model, data, saved, flags, steps, tmp)
        import onnxruntime as ort  # noqa: E402  (from /opt/dc/ort)
        sess = ort.InferenceSession(saved, providers=["CPUExecutionProvider"])
        before = {i.name: numpy_helper.to_array(i) for i in onnx.load(model).graph.initializer}
        after = {i.name: numpy_helper.to_array(i) for i in onnx.load(saved).graph.initializer}
        changed = [n for n in before if n in after and before[n].dtype.kind == "f" and before[n].ndim >= 1
                   and not np.array_equal(before[n], after[n])]
        if not changed or set(after) != set(before):
            fail("the saved model's initializers: %d changed, names %s" %
                 (len(changed), "equal" if set(after) == set(before) else "differ"))
        how = "estimate-only plan on PoCL, dc-run --train" if opencl else \
            "training tune (%s jobs), dc-run --train --emulate" % jobs.group(1)
        print("PASS  %s: %s losses %s = verify --train %s, saved model loads in onnxruntime %s, %d trained "
              "initializers changed" % (os.path.basename(os.path.dirname(model)), how, got, want, ort.__version__,
                                       len(changed)))
        del sess


if __name__ == "__main__":
    main()
