#!/usr/bin/python3
"""ptxas figures of `dc-coordinator codegen --top 0` folders, and the register estimate
checked against them: per template and math path, the kernels compiled, how many failed,
spilled, the NVRTC versions, ptxas's register range, and the estimate (Variant::
regs_per_thread, "estimated_registers" in each kernel's JSON) against ptxas's count of the
variant's main kernel: median ratio, the share within +-20 %, and the count ptxas exceeds
(an estimate below ptxas overstates occupancy). Markdown on stdout (docs/bench/compile-all.md).

usage: scripts/compile_report.py DIR...
"""
import glob
import json
import os
import statistics
import sys


def kernels(dirs):
    for d in dirs:
        for f in glob.glob(os.path.join(d, "*", "*", "*.json")):
            j = json.load(open(f))
            if "compile" not in j:
                continue
            yield os.path.basename(d.rstrip("/")), j


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = {}
    for run, j in kernels(sys.argv[1:]):
        variant = j["variant"]
        family = variant if variant == "reference" else "/".join(variant.split("/")[:2])
        if "m8n8k4=1" in variant:
            family += " m8n8k4"
        r = rows.setdefault(family, {"n": 0, "failed": 0, "spilled": 0, "regs": [], "ratios": [], "under": 0,
                                     "nvrtc": set(), "runs": set()})
        c = j["compile"]
        r["n"] += 1
        r["runs"].add(run)
        r["nvrtc"].add(c.get("nvrtc", "?"))
        if not c["ok"]:
            r["failed"] += 1
            continue
        ks = c["kernels"]
        if any(k["spill_stores_bytes"] + k["spill_loads_bytes"] > 0 for k in ks):
            r["spilled"] += 1
        regs = max(k["registers"] for k in ks)
        r["regs"].append(regs)
        est = j.get("estimated_registers", 0)
        if est > 0:
            r["ratios"].append(est / regs)
            r["under"] += est < regs
    print("| template / path | kernels | failed | spilled | NVRTC | ptxas registers | estimate / ptxas (median) "
          "| within +-20 % | estimate below ptxas |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    total = failed = 0
    for family in sorted(rows):
        r = rows[family]
        total += r["n"]
        failed += r["failed"]
        regs = f"{min(r['regs'])}-{max(r['regs'])}" if r["regs"] else "-"
        if r["ratios"]:
            med = f"{statistics.median(r['ratios']):.2f}"
            within = sum(0.8 <= x <= 1.2 for x in r["ratios"]) / len(r["ratios"])
            within = f"{100 * within:.0f} %"
            under = str(r["under"])
        else:
            med = within = under = "-"
        print(f"| {family} | {r['n']} | {r['failed']} | {r['spilled']} | {', '.join(sorted(r['nvrtc']))} | {regs} "
              f"| {med} | {within} | {under} |")
    print(f"\n{total} kernels, {failed} failed to compile")


if __name__ == "__main__":
    main()
