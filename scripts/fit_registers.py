#!/usr/bin/python3
"""Register estimates against ptxas: reads the folders `dc-coordinator codegen --top 0`
writes (GPU/SIGNATURE/NN_template.json with the NVRTC compile report) and prints, per
template family, how the estimate (old formulas and the fitted ones, mirrored from
codegen/param_space*.cpp) compares with ptxas's register count. docs/bench/registers.md.

usage: /usr/bin/python3 scripts/fit_registers.py DIR... [--csv FILE]
"""
import csv
import glob
import json
import math
import os
import re
import statistics
import sys


def params_of(variant_key):
    # "gemm_tiled/fp32/block_k=8,block_m=16,..." -> ("fp32", {"block_k": 8, ...})
    _, precision, rest = variant_key.split("/", 2)
    params = {}
    for kv in rest.split(","):
        if "=" in kv:
            k, v = kv.split("=")
            params[k] = int(v)
    return precision, params


def conv_attrs(workload_text):
    m = re.search(r"Conv\(([^)]*)\)", workload_text)
    attrs = {}
    if m:
        for k, v in re.findall(r"(\w+)=\[([^\]]*)\]", m.group(1)):
            attrs[k] = [int(x) for x in v.split(",")]
    return attrs


def reduction_length(workload_text):
    """K of the workload's MatMul/Gemm/Conv, from the tensor shapes of workload.txt."""
    shapes = {}
    for name, dims in re.findall(r"(t\d+)\s+(?:\w+\s+|:\s+)?f32\[([\d,]*)\]", workload_text):
        shapes[name] = [int(x) for x in dims.split(",") if x]
    for line in workload_text.splitlines():
        m = re.match(r"n\d+ (MatMul|Gemm|Conv)\(([^)]*)\) (t\d+),(t\d+)", line)
        if not m:
            continue
        op, attrs, a, b = m.groups()
        if op == "Conv":
            w = shapes[b]
            return w[1] * w[2] * w[3]
        if op == "Gemm" and "transA=1" in attrs:
            return shapes[a][-2]
        return shapes[a][-1]
    return 0


def gemm_layout(workload_text):
    """M, N, K and how the template reads each operand (codegen/param_space.cpp,
    analyze_operand_layouts): a/b_rows contiguous along the operand's rows (m / n),
    a/b_plain read by address (a workload input, and for Conv's A not the im2col gather)."""
    shapes, inputs = {}, set()
    for line in workload_text.splitlines():
        m = re.match(r"in (t\d+) \w+ f32\[([\d,]*)\]", line)
        if m:
            inputs.add(m.group(1))
        for name, dims in re.findall(r"(t\d+)\s+(?:\w+\s+|:\s+)?f32\[([\d,]*)\]", line):
            shapes[name] = [int(x) for x in dims.split(",") if x]
    for line in workload_text.splitlines():
        m = re.match(r"n\d+ (MatMul|Gemm|Conv)\(([^)]*)\) (t\d+),(t\d+)\S* -> (t\d+)", line)
        if not m:
            continue
        op, attrs, a, b, out = m.groups()
        sa, sb, so = shapes[a], shapes[b], shapes[out]
        f = dict(a_direct=int(a in inputs), b_direct=int(b in inputs))
        if op == "Conv":
            groups = int((re.search(r"group=(\d+)", attrs) or [0, 1])[1])
            f.update(m=so[0] * math.prod(so[2:]), n=so[1] // groups, k=math.prod(sb[1:]),
                     a_rows=1, b_rows=0, plane=math.prod(so[2:]),
                     gather=int(not ("kernel_shape=[1,1]" in attrs and "strides=[1,1]" in attrs
                                     and re.search(r"pads=\[(0,)*0\]", attrs))))
        elif op == "Gemm":
            ta, tb = "transA=1" in attrs, "transB=1" in attrs
            f.update(m=sa[1] if ta else sa[0], k=sa[0] if ta else sa[1], n=sb[0] if tb else sb[1],
                     a_rows=int(ta), b_rows=int(not tb), plane=0, gather=0)
        else:
            sa = [1] + sa if len(sa) == 1 else sa
            sb = sb + [1] if len(sb) == 1 else sb
            m_ = math.prod(sa[:-1]) if len(sb) == 2 else sa[-2]
            f.update(m=m_, k=sa[-1], n=sb[-1], a_rows=0, b_rows=1, plane=0, gather=0)
        f["a_plain"] = int(f["a_direct"] and not f["gather"])
        f["b_plain"] = f["b_direct"]
        return f
    return {}


def operand_vec(f, operand):
    """Elements per global load of operand "a" or "b" (param_space.cpp gemm_operand_vec)."""
    if not f[operand + "_plain"]:
        return 1
    rows = f[operand + "_rows"]
    extent = (f["m"] if operand == "a" else f["n"]) if rows else f["k"]
    along = (f["block_m"] if operand == "a" else f["block_n"]) if rows else f["block_k"]
    plane = f["plane"] if operand == "a" else 0  # Conv's A: vectors inside an image plane
    vec = max(f["vec"], 1)
    while vec > 1 and (extent % vec or along % vec or plane % vec):
        vec //= 2
    return vec


def features(template, precision, p, j, workload_text):
    """Shape facts the estimates need, from the kernel's launch and buffers."""
    threads = j["launches"][0]["block"][0]
    f = dict(p, threads=threads, precision=precision)
    outs = [b for b in j["buffers"] if b["role"] == "output"]
    ins = [b for b in j["buffers"] if b["role"] == "input"]
    if template in ("gemm_tiled", "conv_implicit_gemm"):
        f["k"] = reduction_length(workload_text)
        f.update(gemm_layout(workload_text))
        f["vec_a"], f["vec_b"] = operand_vec(f, "a"), operand_vec(f, "b")
        # Stages 3 is a cp.async pipeline only when both operands allow it (param_space.cpp
        # gemm_async_ok); otherwise the kernel runs stages 2.
        t, bm = f["threads"], f["block_m"]
        hoisted = f["gather"] and f["a_direct"] and (t % bm == 0 or bm % t == 0)
        if f["stages"] >= 3 and not ((f["a_plain"] or hoisted) and f["b_plain"]):
            f["stages"] = 2
    if template == "attention_fused":
        f["dv"] = outs[0]["shape"][-1]
        f["keys"] = outs[0]["shape"][-2]  # self-attention: as many keys as queries
    if template == "depthwise_direct":
        a = conv_attrs(workload_text)
        f["stride_w"] = a.get("strides", [1, 1])[-1]
        f["kernel_w"] = a.get("kernel_shape", [3, 3])[-1]
    if template in ("elementwise", "opaque_generic"):
        f["inputs"] = len(ins)
    return f


def ceil_div(a, b):
    return -(-a // b)


def old_estimate(t, f):
    if t in ("gemm_tiled", "conv_implicit_gemm"):
        if f["precision"] == "fp32":
            staged = (f["block_m"] + f["block_n"]) * f["block_k"] // f["threads"] if f["stages"] == 2 else 0
            tm, tn = f["thread_m"], f["thread_n"]
            return tm * tn + tm + tn + 24 + staged
        wm, wn = f["warp_m"], f["warp_n"]
        staged = (f["block_m"] + f["block_n"]) * f["block_k"] // f["threads"] \
            if f["precision"] != "tf32" and f["stages"] == 2 else 0
        return wm * wn // 32 + 2 * ((wm // 16) * 4 + (wn // 8) * 2) + 32 + staged
    if t == "depthwise_direct":
        ppt = f["pixels_per_thread"]
        return 24 + 2 * ppt + (ppt - 1) * f["stride_w"] + f["kernel_w"]
    if t == "attention_fused":
        spt = f["block_m"] * f["block_n"] // f["threads"]
        return spt + ceil_div(f["block_m"] * f["dv"], f["threads"]) + 32
    return None


def launch_bound(threads):
    return min(255, 65536 // threads // 8 * 8)


def previous_gemm_fp32(f):
    """The first fit (one vector width for both operands, no layout), before capping."""
    e = (f["block_m"] + f["block_n"]) * f["block_k"] / f["threads"]
    return round(21.5 + f["thread_m"] * f["thread_n"] + 1.4 * e + 3.4 * e / max(f["vec"], 1)
                 + 0.5 * e * (f["stages"] == 2))


def new_estimate(t, f, gemm_fp32=None):
    """The fitted formulas of codegen/param_space.cpp and param_space_gemm.cpp; gemm_fp32
    replaces the fp32 GEMM demand (previous_gemm_fp32 for the earlier fit)."""
    bound = launch_bound(f["threads"])
    if t in ("gemm_tiled", "conv_implicit_gemm") and f["precision"] == "fp32":
        if gemm_fp32:
            demand = gemm_fp32(f)
        else:
            # Per operand: its elements, its loads (its own vector width), prologue elements.
            ea = f["block_m"] * f["block_k"] / f["threads"]
            eb = f["block_n"] * f["block_k"] / f["threads"]
            e = ea + eb
            loads = ea / f["vec_a"] + eb / f["vec_b"]
            prologue = ea * (1 - f["a_direct"]) + eb * (1 - f["b_direct"])
            demand = int(math.floor(23.5 + f["thread_m"] * f["thread_n"] + 1.1 * e + 3.4 * loads
                                    + 0.4 * prologue + 0.5 * e * (f["stages"] == 2) + 0.5))
    elif t == "attention_fused":
        spt = f["block_m"] * f["block_n"] // f["threads"]
        opt = ceil_div(f["block_m"] * f["dv"], f["threads"])
        if f["keys"] <= f["block_n"]:
            demand = 32 + spt
        elif f["block_n"] <= 32:
            demand = 200 + opt if f["stages"] >= 2 else 32 + 8 * opt
        else:
            demand = 43 + 5 * opt
    else:
        return old_estimate(t, f)
    return min(demand, bound) if bound < 255 else demand


def load(dirs):
    rows = []
    for d in dirs:
        for path in glob.glob(os.path.join(d, "**", "[0-9]*_*.json"), recursive=True):
            with open(path) as fh:
                j = json.load(fh)
            c = j.get("compile")
            if not c or not c["ok"]:
                continue
            with open(os.path.join(os.path.dirname(path), "workload.txt")) as fh:
                wl = fh.read()
            precision, p = params_of(j["variant"])
            main = c["kernels"][0]
            for k in c["kernels"]:  # the template's main kernel (split-K adds a reduce)
                if k["registers"] > main["registers"]:
                    main = k
            f = features(j["template"], precision, p, j, wl)
            rows.append(dict(template=j["template"], arch=c["arch"], key=j["variant"], f=f, source=d,
                             ptxas=main["registers"], spill=main["spill_stores_bytes"],
                             path=path))
    return rows


def summary(name, pairs):
    ratios = sorted(pt / est for pt, est in pairs if est)
    if not ratios:
        return f"{name}: no data"
    p90 = ratios[min(len(ratios) - 1, int(0.9 * len(ratios)))]
    return (f"{name}: n={len(ratios)} median={statistics.median(ratios):.2f} "
            f"p10={ratios[int(0.1 * len(ratios))]:.2f} p90={p90:.2f} "
            f"min={ratios[0]:.2f} max={ratios[-1]:.2f}")


def main(argv):
    csv_path = None
    if "--csv" in argv:
        i = argv.index("--csv")
        csv_path = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    rows = load(argv)
    families = sorted({(r["template"], r["f"]["precision"]) for r in rows})
    for t, prec in families:
        sel = [r for r in rows if r["template"] == t and r["f"]["precision"] == prec]
        print(summary(f"{t}/{prec} old", [(r["ptxas"], old_estimate(t, r["f"])) for r in sel]))
        if t in ("gemm_tiled", "conv_implicit_gemm") and prec == "fp32":
            print(summary(f"{t}/{prec} previous",
                          [(r["ptxas"], new_estimate(t, r["f"], previous_gemm_fp32)) for r in sel]))
        print(summary(f"{t}/{prec} new", [(r["ptxas"], new_estimate(t, r["f"])) for r in sel]))
    gemm = [r for r in rows if r["template"] in ("gemm_tiled", "conv_implicit_gemm")
            and r["f"]["precision"] == "fp32"]
    for name, fn in (("previous", previous_gemm_fp32), ("new", None)):
        est = [new_estimate(r["template"], r["f"], fn) for r in gemm]
        print(f"fp32 GEMM/conv {name}: estimated > 255 (dropped): {sum(e > 255 for e in est)}, "
              f"of them ptxas < 200: {sum(e > 255 and r['ptxas'] < 200 for e, r in zip(est, gemm))}, "
              f"ptxas >= 250: {sum(e > 255 and r['ptxas'] >= 250 for e, r in zip(est, gemm))}")
    if csv_path:
        keys = sorted({k for r in rows for k in r["f"]})
        with open(csv_path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["source", "template", "arch", "ptxas", "spill", "old", "new"] + keys)
            for r in rows:
                w.writerow([r["source"], r["template"], r["arch"], r["ptxas"], r["spill"],
                            old_estimate(r["template"], r["f"]), new_estimate(r["template"], r["f"])]
                           + [r["f"].get(k, "") for k in keys])


if __name__ == "__main__":
    main(sys.argv[1:])
