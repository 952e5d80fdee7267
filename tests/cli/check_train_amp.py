#!/usr/bin/env python3
"""Mixed-precision training from the command line (docs/training.md, "Mixed precision").

`dc-coordinator plan MODEL --train --precision P --out DIR` for fp32, fp16 and bf16, then
`dc-run DIR --train --emulate --steps 3` on one fixed batch. Checks: plan.json records the
mixed precision (f16: the loss scaling state); the bf16 losses fall and match the fp32 run's
step by step within mixed_precision_step_tolerance's loss bound (docs/precision.md); the
fp16 run's first step overflows at GradScaler's initial scale 65536 (tiny_cnn at batch 2
does): dc-run says it was skipped with the scale halved, the second step's loss is the
first's exactly (the weights did not move), and from then on the fp16 run is the fp32 run one
step late, within the same bound. A plan for PoCL's CPU device (no fp16, no tensor cores)
is refused with an `error:` naming it.
Usage: check_train_amp.py DC_COORDINATOR DC_RUN MODEL.onnx
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_train_plans import fail, run, write_batch  # noqa: E402

# common/ir/training_tolerance.cpp mixed_precision_step_tolerance: the loss, relative.
LOSS_RTOL = {"fp16": 2e-4, "bf16": 1e-3}
FLAGS = ["--train", "--loss", "cross_entropy", "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9",
         "--weight-decay", "0.01"]


def steps(text):
    return [(float(m.group(1)), m.group(2)) for m in re.finditer(r"^step \d+ loss (\S+)(.*)$", text, re.M)]


def close(a, b, rtol):
    return abs(a - b) <= rtol * abs(b)


def main():
    coord, dcrun, model = sys.argv[1:4]
    with tempfile.TemporaryDirectory(prefix="dc-train-amp-") as tmp:
        data = os.path.join(tmp, "batch")
        write_batch(model, data)
        got = {}
        for p in ("fp32", "fp16", "bf16"):
            out = os.path.join(tmp, p)
            run([coord, "plan", model, "--gpus", "h100", "--out", out, "--precision", p, *FLAGS])
            plan = json.load(open(os.path.join(out, "plan.json")))
            mixed = plan["training"].get("mixed_precision")
            if p == "fp32" and mixed is not None:
                fail("the fp32 plan records mixed precision: %s" % mixed)
            if p != "fp32" and (not mixed or mixed["dtype"] != {"fp16": "f16", "bf16": "bf16"}[p]
                                or ("loss_scaling" in mixed) != (p == "fp16")):
                fail("%s plan.json training.mixed_precision: %s" % (p, mixed))
            got[p] = steps(run([dcrun, out, "--train", "--emulate", "--data", data, "--steps", "3"]))
            if len(got[p]) != 3:
                fail("%s: dc-run printed %d steps" % (p, len(got[p])))
        ref = [loss for loss, _ in got["fp32"]]
        bf16 = [loss for loss, _ in got["bf16"]]
        if not (bf16[0] > bf16[1] > bf16[2]) or any(note for _, note in got["bf16"]):
            fail("bf16 losses do not fall: %s" % got["bf16"])
        for k in range(3):
            if not close(bf16[k], ref[k], LOSS_RTOL["bf16"]):
                fail("step %d: bf16 loss %g, fp32 %g (rtol %g)" % (k + 1, bf16[k], ref[k], LOSS_RTOL["bf16"]))
        (f1, n1), (f2, n2), (f3, n3) = got["fp16"]
        if n1.strip() != "(skipped: overflow, scale 32768)" or n2 or n3:
            fail("fp16: expected only step 1 skipped at scale 65536 -> 32768: %s" % got["fp16"])
        if f2 != f1:
            fail("fp16: the step after a skipped one has loss %g, not the same %g" % (f2, f1))
        for k, (a, b) in enumerate([(f1, ref[0]), (f3, ref[1])]):
            if not close(a, b, LOSS_RTOL["fp16"]):
                fail("fp16 loss %g against fp32's %g (rtol %g)" % (a, b, LOSS_RTOL["fp16"]))
        if not f3 < f1:
            fail("fp16 loss does not fall after the skipped step: %s" % got["fp16"])
        # PoCL's CPU device has no cl_khr_fp16 and no tensor cores: the plan is refused, clearly.
        for p in ("fp16", "bf16"):
            r = subprocess.run([coord, "plan", model, "--gpus", "pocl-cpu", "--precision", p, *FLAGS],
                               capture_output=True, text=True)
            if r.returncode != 2 or not r.stderr.startswith("error:") or "pocl-cpu" not in r.stderr:
                fail("plan --train --precision %s for pocl-cpu: exit %d, %s" % (p, r.returncode, r.stderr))
        print("PASS  %s: fp32 losses %s; bf16 %s; fp16 %s" % (os.path.basename(os.path.dirname(model)), ref, bf16,
                                                            got["fp16"]))


if __name__ == "__main__":
    main()
