#!/usr/bin/python3
"""Fits the tf32 tensor-core register estimate (gemm_tf32_regs) to ptxas.

Input: the per-kernel CSVs of dc_compile_all_tests (DC_CSV, DC_MMA_PATH=tf32; the columns are
in tests/compile_all/test_compile_kept_mma.cpp), e.g. the whole kept matrix written by
scripts/compile_kept_variants.sh. Each distinct (arch, variant, workload figures) counts once.

Least squares over the compiles below 250 registers without spills; compiles at 254-255
registers are censored (ptxas stopped at the limit) and count as "at least 255": each round
refits with their target raised to the current prediction where that is above 255. Prints
the coefficients, the fit's error per architecture, and how the drop threshold of the tf32
space (kMaxTf32Regs) separates spilling compiles from the others. docs/bench/registers.md
has the figures of the committed fit.

  scripts/fit_tf32_regs.py tf32.csv [more.csv ...] [--check 0.8,1.85,5,0.9,5.2,5,16.8]
"""
import argparse
import csv
import sys

import numpy as np

TERMS = ["accumulators", "moved", "staged", "gathered", "narrow_copies", "stages", "conv"]
WORKLOAD = "m n k batch conv gather a_copy b_copy nodes k_tiles".split()


def read(paths):
    rows = {}
    for path in paths:
        for r in csv.reader(open(path)):
            if len(r) < 24:
                continue
            # model,gpu,arch,path,rank,key (with commas),estimate,registers,spill,ok,workload...
            row = dict(arch=r[2], key=",".join(r[5:-14]), estimate=int(r[-14]),
                       registers=int(r[-13]), spill=int(r[-12]))
            row.update(zip(WORKLOAD, map(int, r[-10:])))
            row.update({k: int(v) for k, v in (kv.split("=") for kv in row["key"].split("/")[2].split(","))})
            if r[3] == "tf32":
                rows[(row["arch"], row["key"]) + tuple(row[w] for w in WORKLOAD)] = row
    return list(rows.values())


def features(r):
    """The enumerator's per-thread figures (codegen/param_space_gemm.cpp), one row per term."""
    bm, bn, bk = r["block_m"], r["block_n"], r["block_k"]
    threads = (bm // r["warp_m"]) * (bn // r["warp_n"]) * 32
    a_elems, b_elems = bm * bk / threads, bn * bk / threads
    staged = (a_elems if r["a_copy"] == 0 else 0) + (b_elems if r["b_copy"] == 0 else 0)
    gathered = 0 if not r["gather"] else (2 if r["a_copy"] > 0 else 4) * a_elems
    narrow = (a_elems if not r["gather"] and r["a_copy"] == 4 else 0) + (b_elems if r["b_copy"] == 4 else 0)
    accum = r["warp_m"] * r["warp_n"] / 32
    x = [accum, a_elems + b_elems, staged, gathered, narrow if r["k_tiles"] > 2 else 0, r["stages"], r["conv"]]
    return np.array(x, float), accum * accum / 256  # the a²/256 term is fixed, not fitted


def fit(rows, rounds=60):
    free = [r for r in rows if r["registers"] < 250 and r["spill"] == 0]
    capped = [r for r in rows if r["registers"] >= 254]
    fu = [features(r) for r in free]
    fc = [features(r) for r in capped]
    xu = np.array([f[0] for f in fu]); yu = np.array([r["registers"] - f[1] for r, f in zip(free, fu)])
    xc = np.array([f[0] for f in fc]); oc = np.array([f[1] for f in fc])
    coef = np.linalg.lstsq(xu, yu, rcond=None)[0]
    for _ in range(rounds):
        yc = np.maximum(255, xc @ coef + oc) - oc
        coef = np.linalg.lstsq(np.vstack([xu, xc]), np.concatenate([yu, yc]), rcond=None)[0]
    return coef


def report(rows, coef, threshold=200):
    est = np.array([round(features(r)[0] @ coef + features(r)[1]) for r in rows])
    regs = np.array([r["registers"] for r in rows])
    spill = np.array([r["spill"] > 0 for r in rows])
    free = (regs < 250) & ~spill
    print("terms: " + ", ".join(f"{t} {c:.2f}" for t, c in zip(TERMS, coef)) + " (+ a²/256)")
    for name, mask in [("all", free)] + [(a, free & np.array([r["arch"] == a for r in rows]))
                                         for a in sorted({r["arch"] for r in rows})]:
        d = regs[mask] - est[mask]
        print(f"  {name:6} {mask.sum():6d} compiles below 250: ptxas - estimate mean {d.mean():+.1f}, "
              f"rmse {np.sqrt((d ** 2).mean()):.1f}, p10 {np.percentile(d, 10):+.0f}, p90 {np.percentile(d, 90):+.0f}")
    above = est > threshold
    print(f"  estimated above {threshold}: {(spill & above).sum()} of {spill.sum()} spilling compiles, "
          f"{(~spill & above).sum()} of {(~spill).sum()} others ({(~spill & above & (regs >= 200)).sum()} of them at 200-255)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", nargs="+")
    p.add_argument("--check", help="comma-separated coefficients to evaluate instead of fitting")
    args = p.parse_args()
    rows = read(args.csv)
    if not rows:
        sys.exit("no tf32 rows in " + ", ".join(args.csv))
    print(f"{len(rows)} distinct tf32 compiles")
    coef = np.array([float(c) for c in args.check.split(",")]) if args.check else fit(rows)
    if len(coef) != len(TERMS):
        sys.exit(f"--check needs {len(TERMS)} coefficients: {', '.join(TERMS)}")
    report(rows, coef)


if __name__ == "__main__":
    main()
