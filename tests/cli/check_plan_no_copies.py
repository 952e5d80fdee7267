#!/usr/bin/env python3
"""No kernel of an estimate-only plan only moves data (issue 14, "Views are not kernels").

  `dc-coordinator plan MODEL --gpus GPU --out DIR` writes the least-estimate plan; every
  step of DIR/plan.json must compute something: a step whose ops are all view ops
  (Reshape/Flatten/Squeeze/Unsqueeze/Identity, which the plan makes views) or Transposes
  (which fuse into the index maps of the kernel next to them: attention's Q/K/V and output
  transposes, GEMM operand prologues) is a copy kernel and fails the test. With
  --min-views N the plan must also hold at least N views, with --max-steps N at most N
  steps (kernels).

usage: check_plan_no_copies.py DC_COORDINATOR MODEL.onnx GPU [--min-views N] [--max-steps N] [plan flags]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

COPY_OPS = {"reshape", "flatten", "squeeze", "unsqueeze", "identity", "transpose"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def ops_of(cluster):
    """'transpose+reshape#12' -> ['transpose', 'reshape']"""
    return cluster.split("#")[0].split("+")


def main():
    coord, model, gpu = sys.argv[1:4]
    extra = sys.argv[4:]
    bounds = {"--min-views": 0, "--max-steps": None}
    for flag in bounds:
        if flag in extra:
            i = extra.index(flag)
            bounds[flag] = int(extra[i + 1])
            del extra[i:i + 2]
    min_views, max_steps = bounds["--min-views"], bounds["--max-steps"]
    tmp = tempfile.mkdtemp(prefix="dc_check_plan_no_copies_")
    try:
        out = os.path.join(tmp, "plan")
        cmd = [coord, "plan", model, "--gpus", gpu, "--out", out] + extra
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        print(f"$ {' '.join(cmd)}  -> {p.returncode}")
        if p.returncode != 0:
            fail(f"plan exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        plan = json.load(open(os.path.join(out, "plan.json")))
        steps, views = plan["steps"], plan.get("views", [])
        print(f"plan: {len(steps)} steps, {len(views)} views")
        copies = [s["cluster"] for s in steps if all(op in COPY_OPS for op in ops_of(s["cluster"]))]
        if copies:
            fail(f"{len(copies)} steps only move data (views or transposes to absorb): {copies[:8]}")
        if len(views) < min_views:
            fail(f"{len(views)} views, expected at least {min_views}")
        if max_steps is not None and len(steps) > max_steps:
            fail(f"{len(steps)} steps, expected at most {max_steps}")
        print("OK")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
