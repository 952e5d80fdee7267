#!/usr/bin/env python3
"""A TF32 training step of the tiny transformer from the command line (docs/training.md,
"Attention backward").

`dc-coordinator plan MODEL --train --precision tf32 --out DIR` and the same plan in fp32, then
`dc-run DIR --train --emulate --steps 3` of each on one fixed batch. Checks: the tf32 plan runs
the step's fused attention forward (dc.Attention, which also writes each row's log-sum-exp
for the backward) on TF32 tensor cores (an `attention_fused/tf32/...` variant), the fp32 plan
on CUDA cores; the tf32 losses fall and follow the fp32 run's step by step within the step
bound of common/ir/training_tolerance.cpp (tf32: loss 1e-3 relative, docs/precision.md).
Usage: check_train_tf32.py DC_COORDINATOR DC_RUN MODEL.onnx
"""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_train_plans import fail, run, write_batch  # noqa: E402

LOSS_RTOL = 1e-3  # mixed_precision_step_tolerance(tf32).loss
FLAGS = ["--train", "--loss", "cross_entropy", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]


def main():
    coord, dcrun, model = sys.argv[1:4]
    with tempfile.TemporaryDirectory(prefix="dc-train-tf32-") as tmp:
        data = os.path.join(tmp, "batch")
        got = {}
        for p in ("fp32", "tf32"):
            out = os.path.join(tmp, p)
            run([coord, "plan", model, "--gpus", "h100", "--out", out, "--precision", p, "--train-attention", "fused", *FLAGS])
            plan = json.load(open(os.path.join(out, "plan.json")))
            if not os.path.isdir(data):
                write_batch(model, data, plan)
            forward = [s["variant_key"] for s in plan["steps"] if s["cluster"].startswith("dc.attention#")]
            if len(forward) != 1 or not forward[0].startswith("attention_fused/%s/" % p):
                fail("%s plan: the attention forward steps are %s, not one attention_fused/%s variant"
                     % (p, forward, p))
            got[p] = [float(x) for x in re.findall(r"^step \d+ loss (\S+)$",
                      run([dcrun, out, "--train", "--emulate", "--data", data, "--steps", "3"]), re.M)]
            if len(got[p]) != 3:
                fail("%s: dc-run printed %d steps" % (p, len(got[p])))
        ref, tf32 = got["fp32"], got["tf32"]
        if not (tf32[0] > tf32[1] > tf32[2]):
            fail("tf32 losses do not fall: %s" % tf32)
        for k in range(3):
            if abs(tf32[k] - ref[k]) > LOSS_RTOL * abs(ref[k]):
                fail("step %d: tf32 loss %g, fp32 %g (rtol %g)" % (k + 1, tf32[k], ref[k], LOSS_RTOL))
        print("PASS  %s: fp32 losses %s; tf32 %s" % (os.path.basename(os.path.dirname(model)), ref, tf32))


if __name__ == "__main__":
    main()
