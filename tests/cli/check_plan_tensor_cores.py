#!/usr/bin/python3
"""Issue 11's acceptance: `dc-coordinator plan MODEL --gpus GPU --precisions P` ranks a
tensor-core variant first for every chosen Conv, MatMul and Gemm cluster (workload kinds
conv, gemm and attention; depthwise convolutions have no tensor-core template and run on
CUDA cores, docs/codegen.md).

    check_plan_tensor_cores.py DC_COORDINATOR MODEL GPU PRECISION
"""
import json
import subprocess
import sys


def main():
    coord, model, gpu, precision = sys.argv[1:5]
    out = subprocess.run([coord, "plan", model, "--gpus", gpu, "--precisions", precision, "--json"],
                         check=True, capture_output=True, text=True).stdout
    plan = json.loads(out)
    kinds = {w["signature"]: w["kind"] for w in plan["workloads"]}
    candidates = {c["id"]: c for c in plan["candidates"]}
    g = plan["gpus"][0]
    kept = {w["signature"]: w["kept"] for w in g["workloads"]}
    checked, bad = 0, []
    for cid in g["chosen"]:
        c = candidates[cid]
        if kinds[c["workload"]] not in ("conv", "gemm", "attention"):
            continue
        best = min(kept[c["workload"]], key=lambda v: v["estimate"]["seconds"])
        path = best["variant"].split("/")[1]
        checked += 1
        if path != precision:
            bad.append("%s (%s): best estimate %s" % (c["nodes"][0], kinds[c["workload"]], best["variant"]))
    print("%s on %s, %s: %d GEMM-family clusters, %d with a %s tensor-core variant first"
          % (model, gpu, precision, checked, checked - len(bad), precision))
    for b in bad:
        print("  not tensor-core:", b)
    if checked == 0 or bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
