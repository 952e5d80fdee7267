#!/usr/bin/python3
"""Fits sm_70's m8n8k4 tensor-core register estimates (gemm_m8n8k4_regs, attention) to ptxas.

Input: `dc-coordinator codegen MODEL --gpus v100 --precision fp16 --out DIR` folders (the
kernel JSONs carry ptxas's figures, the space's `estimated_registers` and, for GEMM/conv,
the per-thread figures `mma_thread_load`). A folder compiled before codegen wrote
`mma_thread_load` takes them from a `--no-compile` run of the same command (--figures-from
DIR..., matched by path; the variant and the estimate must agree). Each distinct (variant,
workload figures) counts once.

Least squares over the compiles below 250 registers without spills; those at 254-255 are
censored (ptxas stopped at the limit) and count as "at least 255": each round refits with
their target raised to the current prediction where that is above 255 (as
scripts/fit_tf32_regs.py). Prints the coefficients, the error before (the estimate in the
JSONs) and after, and the share within +-20 %. docs/bench/registers.md has the figures of the
committed fit.

  scripts/fit_m8n8k4_regs.py DIR... [--figures-from DIR...] [--check-gemm c0,c1,...] [--per-run]
"""
import argparse
import glob
import json
import math
import os
import sys

import numpy as np

GEMM_TERMS = ["accumulators", "copies", "live_scalar", "gathered", "conv", "const"]
ATTENTION_TERMS = ["const", "fragments, outputs", "scores"]


def params(variant):
    return {k: int(v) for k, v in (kv.split("=") for kv in variant.split("/")[2].split(","))}


def figures_index(dirs):
    """Relative path (run/gpu/signature/stem.json) -> JSON, over the --no-compile folders."""
    out = {}
    for d in dirs or []:
        for f in glob.glob(os.path.join(d, "*", "*", "*.json")):
            out[os.path.relpath(f, d)] = json.load(open(f))
    return out


def read(dirs, figures):
    rows = {}
    for d in dirs:
        for f in glob.glob(os.path.join(d, "*", "*", "*.json")):
            j = json.load(open(f))
            if "m8n8k4=1" not in j["variant"] or "compile" not in j or not j["compile"]["ok"]:
                continue
            p = params(j["variant"])
            r = dict(variant=j["variant"], estimate=j["estimated_registers"], path=f, **p)
            ks = j["compile"]["kernels"]
            r["registers"] = max(k["registers"] for k in ks)
            r["spill"] = max(k["spill_stores_bytes"] + k["spill_loads_bytes"] for k in ks)
            r["attention"] = j["template"] == "attention_fused"
            field = "attention_dims" if r["attention"] else "mma_thread_load"
            load = j.get(field)
            if load is None:
                g = figures.get(os.path.relpath(f, os.path.dirname(os.path.dirname(os.path.dirname(f)))))
                if g is None or g["variant"] != j["variant"] or g.get("estimated_registers") != r["estimate"]:
                    sys.exit(f"{f}: no {field}, and no matching --figures-from JSON")
                load = g[field]
            if r["attention"]:
                r["threads"] = r["block_m"] // r["warp_m"] * 32
            else:
                r["threads"] = (r["block_m"] // r["warp_m"]) * (r["block_n"] // r["warp_n"]) * 32
            r.update(load)
            rows[(r["variant"],) + tuple(sorted(load.items())) + (r.get("d"), r.get("dv"))] = r
    return list(rows.values())


def launch_bound(threads):
    """launch_bounds_regs (codegen/param_space.cpp): 65536 registers over the warps counted in
    multiples of 4, in units of 256 per warp, at most 255."""
    warps = math.ceil(threads / 32)
    per_warp = 65536 // (4 * math.ceil(warps / 4))  # registers a warp may hold
    return min(255, (per_warp // 256) * 256 // 32)


def copies(r):
    """Vector copies a thread makes per K tile of the operands copied (MmaThreadLoad::copies;
    the f16 elements of a tile over the bytes of one copy)."""
    c = 0.0
    for tile, copy in ((r["block_m"], r["a_copy"]), (r["block_n"], r["b_copy"])):
        if copy > 0:
            c += tile * r["block_k"] * 2 / (copy * r["threads"])
    return c


def gemm_features(r):
    """Per thread and K tile: the warp tile's accumulators, the vector copies where there is a
    next K tile (synchronous on sm_70: the next tile's values and addresses are live across
    the mma; with one K tile the loop is straight-line code), the f16 elements
    loaded one by one through registers times the tiles live at once (min(2 stages, K
    tiles)), the im2col cost, whether it is a conv, and 1. The second value is the fixed
    a²/256 term of the tensor-core fits (not fitted)."""
    a = r["warp_m"] * r["warp_n"] / 32
    prefetched = copies(r) if r["k_tiles"] > 1 else 0.0  # one K tile: no next tile to load
    live_scalar = r["scalar"] * min(2, r["k_tiles"])
    return np.array([a, prefetched, live_scalar, r["gathered"], 1.0 if r["conv"] else 0.0, 1.0]), a * a / 256


def attention_features(r):
    """Per m16 tile of a warp: Q's A fragments (m8n8k4: 2 registers per k4 step, kept all along),
    the Dv/2 output accumulators and 4 for m and l (one term: the data has one head dimension),
    and the block_n/2 score accumulators (each with its exponential and its f16 copy for P's
    shared tile); and 1."""
    mt = r["warp_m"] // 16
    fixed = math.ceil(r["d"] / 4) * 2 + math.ceil(r["dv"] / 16) * 8 + 4
    return np.array([1.0, mt * fixed, mt * r["block_n"] / 2]), 0.0


def fit(rows, features, rounds=60):
    free = [r for r in rows if r["registers"] < 250 and r["spill"] == 0]
    capped = [r for r in rows if r["registers"] >= 254]
    fu = [features(r) for r in free]
    xu = np.array([f[0] for f in fu])
    yu = np.array([r["registers"] - f[1] for r, f in zip(free, fu)], float)
    coef = np.linalg.lstsq(xu, yu, rcond=None)[0]
    if capped:
        fc = [features(r) for r in capped]
        xc = np.array([f[0] for f in fc])
        oc = np.array([f[1] for f in fc])
        for _ in range(rounds):
            yc = np.maximum(255, xc @ coef + oc) - oc
            coef = np.linalg.lstsq(np.vstack([xu, xc]), np.concatenate([yu, yc]), rcond=None)[0]
    return coef


def estimate(r, features, coef):
    """The estimate as the space computes it: rounded, at most the launch bound below 255."""
    x, offset = features(r)
    e = int(round(float(x @ coef + offset)))
    b = launch_bound(r["threads"])
    return min(e, b) if b < 255 else e


def report(name, rows, est, offered=255):
    regs = np.array([r["registers"] for r in rows])
    spill = np.array([r["spill"] > 0 for r in rows])
    est = np.array(est, float)
    free = (regs < 250) & ~spill
    d = regs[free] - est[free]
    ratio = est / regs
    print(f"  {name}: {len(rows)} compiles ({free.sum()} below 250 without spill, {spill.sum()} spilled); "
          f"ptxas - estimate mean {d.mean():+.1f}, rmse {np.sqrt((d ** 2).mean()):.1f}, "
          f"p10 {np.percentile(d, 10):+.0f}, p90 {np.percentile(d, 90):+.0f}; estimate/ptxas median "
          f"{np.median(ratio):.2f}, within +-20 % {100 * np.mean((ratio >= 0.8) & (ratio <= 1.2)):.0f} %, "
          f"below ptxas {(est < regs).sum()}, spilled and offered (estimated <= {offered}): {(spill & (est <= offered)).sum()}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="+")
    p.add_argument("--figures-from", nargs="*", default=[])
    p.add_argument("--check-gemm", help=f"comma-separated coefficients ({', '.join(GEMM_TERMS)}) instead of a fit")
    p.add_argument("--per-run", action="store_true", help="before and after for each folder and template too")
    p.add_argument("--check-attention", help=f"comma-separated coefficients ({', '.join(ATTENTION_TERMS)})")
    args = p.parse_args()
    figures = figures_index(args.figures_from)
    rows = read(args.dirs, figures)
    if not rows:
        sys.exit("no compiled m8n8k4 kernels in " + ", ".join(args.dirs))
    for kind, features, terms, check in [("gemm/conv", gemm_features, GEMM_TERMS, args.check_gemm),
                                         ("attention", attention_features, ATTENTION_TERMS, args.check_attention)]:
        sel = [r for r in rows if r["attention"] == (kind == "attention")]
        if not sel:
            continue
        print(f"{kind}: {len(sel)} distinct m8n8k4 compiles")
        coef = np.array([float(c) for c in check.split(",")]) if check else fit(sel, features)
        if len(coef) != len(terms):
            sys.exit(f"{kind} needs {len(terms)} coefficients: {', '.join(terms)}")
        print("  terms: " + ", ".join(f"{t} {c:.2f}" for t, c in zip(terms, coef)))
        report("before (the JSONs' estimate)", sel, [r["estimate"] for r in sel])
        offered = 215 if kind == "gemm/conv" else 255  # kMaxM8n8k4Regs; fits_gpu
        report("after", sel, [estimate(r, features, coef) for r in sel], offered)
        if args.per_run:  # each folder alone, per template
            for d in args.dirs:
                for template in ("conv_implicit_gemm", "gemm_tiled", "attention_fused"):
                    part = [r for r in read([d], figures)
                            if r["attention"] == (kind == "attention") and r["variant"].startswith(template)]
                    if part:
                        print(f"  {os.path.basename(d.rstrip('/'))} {template}:")
                        report("  before", part, [r["estimate"] for r in part])
                        report("  after", part, [estimate(r, features, coef) for r in part], offered)


if __name__ == "__main__":
    main()
