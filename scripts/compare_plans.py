#!/usr/bin/python3
"""Plans of one model side by side (scripts/quickstart.sh): precision, weights.bin size,
steps, estimated and measured (or emulated) total time, and the error against PyTorch's fp32
outputs from a saved `dc-run --data` transcript (rel-L2, max-abs, top-1/top-5, PASS/FAIL).

    compare_plans.py LABEL=PLAN_DIR:DC_RUN_OUTPUT.txt ..."""
import json
import os
import re
import sys


def describe(label, plan_dir, run_txt):
    with open(os.path.join(plan_dir, "plan.json")) as f:
        plan = json.load(f)
    row = {
        "plan": label,
        "precision": plan.get("precision", "fp32"),
        "weights MiB": f"{os.path.getsize(os.path.join(plan_dir, 'weights.bin')) / 2**20:.1f}",
        "steps": str(len(plan["steps"])),
        "estimated us": f"{plan['estimated_total_us']:.1f}",
        ("emulated us" if plan["emulated"] else "measured us"): f"{plan['measured_total_us']:.1f}",
    }
    text = open(run_txt).read() if os.path.exists(run_txt) else ""
    m = re.search(r"^\s+\S+\s+\S+\s+([0-9.e+-]+)\s+([0-9.e+-]+)\s+(PASS|FAIL)", text, re.M)
    row["max-abs err"], row["rel-L2 err"], row["check"] = m.groups() if m else ("-", "-", "-")
    m = re.search(r"top-1 agreement (\d+/\d+).*top-5 (\d+/\d+)", text)
    row["top-1"], row["top-5"] = m.groups() if m else ("-", "-")
    m = re.search(r"latency\s+median ([0-9.]+) ms", text)
    row["latency ms"] = m.group(1) if m else "-"
    return row


def main():
    rows = []
    for arg in sys.argv[1:]:
        label, rest = arg.split("=", 1)
        plan_dir, run_txt = rest.rsplit(":", 1)
        rows.append(describe(label, plan_dir, run_txt))
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    width = {k: max(len(k), *(len(r.get(k, "-")) for r in rows)) for k in keys}
    print("  ".join(k.ljust(width[k]) for k in keys))
    for r in rows:
        print("  ".join(r.get(k, "-").ljust(width[k]) for k in keys))


if __name__ == "__main__":
    main()
