#!/usr/bin/python3
"""Kernel counts of a plan: reads `dc-coordinator plan MODEL --gpus G --json` on stdin or
from a file and prints, for the first GPU type, the chosen kernels (free views excluded),
the free views, the attention kernels, the copy-only kernels (every node a pure data move)
and the estimate. docs/bench/fusion.md takes per-layer figures as the difference between a
model of L+n layers and one of L layers, divided by n.

  dc-coordinator plan m.onnx --gpus h100 --precision fp16 --json | plan_kernel_counts.py
"""
import json
import sys

MOVES = {"transpose", "reshape", "slice", "expand", "concat", "unsqueeze", "squeeze", "flatten",
         "split", "tile", "gather", "identity", "cast"}


def counts(plan):
    gpu = plan["gpus"][0]
    cands = plan["candidates"]
    out = {"kernels": 0, "views": 0, "attention": 0, "copy_only": 0,
           "estimated_us": round(gpu["estimated_seconds"] * 1e6, 1)}
    for c in gpu["chosen"]:
        cand = cands[c]
        if cand.get("free_view"):
            out["views"] += 1
            continue
        out["kernels"] += 1
        out["attention"] += cand["kind"] == "attention"
        out["copy_only"] += all(op in MOVES for op in cand["pattern"].split("+"))
    return out


def main():
    data = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    print(json.dumps(counts(json.loads(data))))


if __name__ == "__main__":
    main()
