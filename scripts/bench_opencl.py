#!/usr/bin/python3
"""OpenCL benchmarks on this machine's OpenCL device (PoCL's CPU device, pocl-cpu):

    scripts/bench_opencl.py [--dc-bin build/bin] [--work build-bench/opencl] [--shapes all|NAME,...]
        [--accuracy-models M.onnx,...] [--out-md docs/bench/opencl.md]
        [--accuracy-md docs/bench/estimator-accuracy.md] [--accuracy-top-k K] [--layers-only] [--smoke]
        [--accuracy-db DB]

Layers (docs/bench/opencl.md): each shape is one layer exported alone as an ONNX model
(bench_templates.py's builders); dc is `dc-coordinator tune --gpus pocl-cpu --local-workers 1`
on it, real measurements through dc-worker's OpenCL path, and the figure is the measured
median of the kernel(s) its plan chose; the peer is dc-bench-clblast on the same device in
the same run: CLBlast's SGEMM, convolutions as CLBlast's im2col + SGEMM, and what dc fuses
(bias + ReLU/GELU, residual + LayerNorm) as separate OpenCL C kernels. Both are timed with
profiling events (median). Each is also given as a fraction of the device's fp32 peak
(2 x CUs x fp32 lanes x clock, from dc-worker's inventory).

Estimator accuracy (docs/bench/estimator-accuracy.md): the models are tuned on pocl-cpu with
top_k 16 (--accuracy-top-k) and no DB calibration into a fresh DB; per workload with at least 3 measured
variants, Spearman's rank correlation between the estimate recorded with each measurement
and its measured median, and whether the measured best lies inside the estimator's top-K
(K = 4, 8) of those variants. "After calibration" applies the per-kind factors fitted from
the same DB (exp of the median log measured/estimated, as estimator/calibration_fit.h).

--accuracy-db DB: no layers and no tunes; the accuracy table from DB's rows (a DB an accuracy
tune wrote earlier, e.g. WORK/accuracy.db), with --accuracy-models and --accuracy-top-k saying
what it holds, printed (and written to --accuracy-md only when that is given). With --re-estimate, the estimates are today's estimator's, not those recorded
with the measurements: `dc-coordinator plan MODEL --gpus pocl-cpu --json` over every variant of
each --accuracy-models model (nothing compiled or run), so that a change to the estimator or
to gpus.yaml is scored against the same measured times in seconds. With --param-calibration-from
DB2, each estimate is multiplied by the per-parameter factors a tune would fit from DB2's real
results (docs/estimator.md, "Per-parameter calibration"): DB2 another run's or another model's DB
scores the calibration out of sample.

--smoke: small shapes, the tiny example model, short timing, tables printed and written
into WORK only (the CPU plumbing test, ctest bench_opencl_smoke).
"""
import argparse
import json
import math
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bench_templates as bt  # noqa: E402: the layer builders and the export

GPU = "pocl-cpu"

# name -> (what, the CLBlast peer's command line, bench_templates builder)
SHAPES = {
    "gemm_1024": ("MatMul 1024x1024 . 1024x1024", ["gemm", "1024", "1024", "1024"], bt._linear(1024, 1024, 1024, bias=False)),
    "gemm_2048": ("MatMul 2048x2048 . 2048x2048", ["gemm", "2048", "2048", "2048"], bt._linear(2048, 2048, 2048, bias=False)),
    "bert_qkv": ("BERT-base QKV: 128x768 . 768x2304", ["gemm", "128", "2304", "768"], bt._linear(128, 768, 2304, bias=False)),
    "bert_ffn2": ("BERT-base FFN2: 128x3072 . 3072x768", ["gemm", "128", "768", "3072"], bt._linear(128, 3072, 768, bias=False)),
    "r50_1x1_1024_256": ("ResNet-50 conv 1x1 1024->256 @14 + bias + ReLU",
                         ["conv_bias_relu", "1", "1024", "14", "14", "256", "1", "0", "1"], bt._conv(1024, 256, 1, 1, 0, 14)),
    "r50_3x3_64": ("ResNet-50 conv 3x3 64->64 @56 + bias + ReLU (fused layer)",
                   ["conv_bias_relu", "1", "64", "56", "56", "64", "3", "1", "1"], bt._conv(64, 64, 3, 1, 1, 56)),
    "bert_ffn1": ("BERT-base FFN1 128x768 . 768x3072 + bias + GELU (fused layer)",
                  ["gemm_bias_gelu", "128", "3072", "768"], bt._linear(128, 768, 3072, "gelu")),
    "bert_add_layernorm": ("BERT-base residual add + LayerNorm 128 x 768 (fused layer)",
                           ["residual_layernorm", "128", "768"], bt._add_layernorm(128, 768)),
}
SMOKE_SHAPES = {
    "smoke_gemm": ("MatMul 64x64 . 64x64", ["gemm", "64", "64", "64"], bt._linear(64, 64, 64, bias=False)),
    "smoke_gelu": ("MatMul 32x64 . 64x96 + bias + GELU", ["gemm_bias_gelu", "32", "96", "64"], bt._linear(32, 64, 96, "gelu")),
}


def run(cmd, log=None, timeout=7200):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if log:
        with open(log, "w") as f:
            f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (os.path.basename(cmd[0]), p.returncode, (p.stdout + p.stderr)[-2000:]))
    return p.stdout, time.time() - t0


def device_figures(a):
    """(description, fp32 peak FLOP/s, measured bandwidth GB/s) from dc-worker's inventory."""
    out, _ = run([os.path.join(a.dc_bin, "dc-worker"), "--opencl", "0", "--list-devices"])
    m = re.search(r"\((.*); ([0-9.]+) GFLOP/s fp32 peak, ([0-9.]+) GB/s measured\)", out)
    if not m:
        raise RuntimeError("dc-worker --opencl 0 --list-devices: no pocl-cpu line in %r" % out)
    return m.group(1), float(m.group(2)) * 1e9, float(m.group(3))


def tune(a, model, out, db, config, log):
    cmd = [os.path.join(a.dc_bin, "dc-coordinator"), "tune", model, "--gpus", GPU, "--local-workers", "1",
           "--db", db, "--out", out, "--config", config]
    if a.no_calibration:
        cmd.append("--no-db-calibration")
    _, seconds = run(cmd, log)
    with open(os.path.join(out, GPU, "selection.json")) as f:
        return json.load(f), seconds


def layer(a, name, shapes, peak):
    what, peer_cmd, builder = shapes[name]
    bt.SHAPES[name] = ("-", what, builder)
    directory = bt.export_shape(a, name)
    base = bt.shape_dir(a, name)
    selection, seconds = tune(a, os.path.join(directory, "model.onnx"), os.path.join(base, "out"), a.db, a.config,
                              os.path.join(base, "tune.log"))
    clusters = selection["clusters"]
    missing = [c["kernel"] for c in clusters if not c.get("measured")]
    if missing:
        raise RuntimeError("no successful measurement for %s" % ", ".join(missing))
    dc_us = sum(c["measured_us"] for c in clusters)
    out, _ = run([os.path.join(a.dc_bin, "dc-bench-clblast")] + peer_cmd + ["--min-ms", str(a.min_ms)])
    peer = json.loads(out.strip().splitlines()[-1])
    flops = peer["flops"]
    return {"name": name, "what": what, "dc_us": dc_us, "clblast_us": peer["median_us"], "flops": flops,
            "dc_peak": flops / (dc_us * 1e-6) / peak, "clblast_peak": flops / (peer["median_us"] * 1e-6) / peak,
            "kernels": [c["kernel"] for c in clusters], "tune_s": seconds}


def render_layers(rows, device, peak, bandwidth, smoke):
    head = ["# OpenCL layers: dc against CLBlast on PoCL's CPU device", "",
            "Generated by `scripts/bench_opencl.py`%s on %s: the 2-core AMD EPYC container of this "
            "project, no GPU; OpenCL device %s. fp32 peak %.1f GFLOP/s (2 x CUs x fp32 lanes x clock), "
            "DRAM bandwidth %.1f GB/s (dc-worker's probe). dc: `dc-coordinator tune --gpus pocl-cpu "
            "--local-workers 1` on the layer alone, the measured median of its plan's kernel(s); CLBlast: "
            "`dc-bench-clblast` (CLBlast SGEMM, im2col + SGEMM for convolutions, epilogues as separate kernels), "
            "same device, same run, profiling events, median. Ratio: CLBlast time / dc time (above 1: dc faster)."
            % (" --smoke" if smoke else "", time.strftime("%Y-%m-%d"), device, peak / 1e9, bandwidth), "",
            "| layer | dc us | CLBlast us | CLBlast / dc | dc % of peak | CLBlast % of peak | dc kernels |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        if "error" in r:
            head.append("| %s | failed: %s | | | | | |" % (r["what"], r["error"][:200].replace("|", "/").replace("\n", " ")))
            continue
        head.append("| %s | %.1f | %.1f | %.2fx | %.1f%% | %.1f%% | %s |" % (
            r["what"], r["dc_us"], r["clblast_us"], r["clblast_us"] / r["dc_us"], 100 * r["dc_peak"],
            100 * r["clblast_peak"], ", ".join(r["kernels"])))
    return "\n".join(head) + "\n"


def spearman(x, y):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r
    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((p - mx) * (q - my) for p, q in zip(rx, ry))
    den = math.sqrt(sum((p - mx) ** 2 for p in rx) * sum((q - my) ** 2 for q in ry))
    return num / den if den > 0 else float("nan")


def current_estimates(a, models):
    """{(workload signature, variant key): estimated us} of today's estimator over every variant
    of the models' workloads on pocl-cpu (plan --json with nothing pruned)."""
    config = os.path.join(a.work, "keep-all.yaml")
    with open(config, "w") as f:
        f.write("prune:\n  within: 1000000\n  top_k: 1000000\nprecision: fp32\n")
    out = {}
    for model in models:
        plan = subprocess.run([os.path.join(a.dc_bin, "dc-coordinator"), "plan", model, "--gpus", GPU,
                               "--json", "--config", config], capture_output=True, text=True)
        if plan.returncode != 0:
            sys.exit("error: plan %s: %s" % (model, plan.stderr.strip()))
        for gpu in json.loads(plan.stdout)["gpus"]:
            for w in gpu["workloads"]:
                for v in w["kept"]:
                    out[(w["signature"], v["variant"])] = v["estimate"]["seconds"] * 1e6
    return out


def param_factors(a, db_path):
    """{(kind, unit, template): {param: {value: factor}}}: the per-parameter calibration a tune
    would fit from DB_PATH's real pocl-cpu results (`dc-db calibration`'s second table)."""
    p = subprocess.run([os.path.join(a.dc_bin, "dc-db"), "--db", db_path, "calibration", "--gpu", GPU],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("error: dc-db calibration of %s: %s" % (db_path, p.stderr.strip()))
    out, table = {}, False
    for line in p.stdout.splitlines():
        if line.startswith("per-parameter factors ("):
            table = True
            continue
        if line.startswith("pairwise ranking vectors"):  # the next table
            break
        cols = line.split()
        if not table or len(cols) < 7 or cols[0] == "kind" or set(cols[0]) <= set("-"):
            continue
        kind, unit, template, param, value, _, factor = cols[:7]
        out.setdefault((kind, unit, template), {}).setdefault(param, {})[int(value)] = float(factor)
    return out


def key_factor(factors, kind, key):
    """The product of a variant key's parameter factors (Calibration::variant_factor without the
    per-kind factor, which reorders nothing)."""
    parts = key.split("/")
    if len(parts) < 3 or not parts[2]:
        return 1.0
    unit = {"tf32": "tf32", "fp16": "fp16/bf16", "bf16": "fp16/bf16"}.get(parts[1], "fp32")
    group = factors.get((kind, unit, parts[0]), {})
    f = 1.0
    for item in parts[2].split(","):
        name, value = item.split("=")
        f *= group.get(name, {}).get(int(value), 1.0)
    return f


def variant_factors(a, db_path, scored_db):
    """{measurement id: factor}: per real result of SCORED_DB, the factor a tune's real fits from
    DB_PATH give its variant (the pairwise ranking vector where its template has one, else the
    per-parameter factors; `dc-db calibration --factors-of`), without the per-kind factor."""
    p = subprocess.run([os.path.join(a.dc_bin, "dc-db"), "--db", db_path, "calibration", "--gpu", GPU,
                        "--factors-of", scored_db], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("error: dc-db calibration of %s: %s" % (db_path, p.stderr.strip()))
    return {int(i): float(f) for i, f in (line.split() for line in p.stdout.splitlines() if line.strip())}


def accuracy(db_path, estimates=None, factors=None, since_ms=0, statuses=("ok",), id_factors=None):
    """Per workload: (kind, n, spearman, best in top-4, best in top-8, |log est/meas| median) before
    and after the per-kind calibration fitted from the same rows. `estimates` (current_estimates)
    replaces the estimates recorded with the measurements; rows it lacks are left out. `factors`
    (param_factors) multiply each estimate by its parameter values' factors. Only results
    recorded at or after `since_ms` count (one run of a DB that holds several), of `statuses`.
    `id_factors` (variant_factors) multiply each result's estimate by its measurement's factor."""
    db = sqlite3.connect("file:%s?mode=ro" % db_path, uri=True)
    rows = db.execute(
        "SELECT v.workload, w.kind, v.key, m.estimate_us, m.median_us, m.id FROM measurements m "
        "JOIN variants v ON v.id = m.variant_id JOIN workloads w ON w.signature = v.workload "
        "WHERE m.gpu_type = ? AND m.status IN (%s) AND m.emulated = 0 AND m.estimate_us > 0 "
        "AND v.template != 'reference' AND m.recorded_ms >= ?" % ",".join("?" * len(statuses)),
        (GPU,) + tuple(statuses) + (since_ms,)).fetchall()
    db.close()
    if id_factors is not None:
        rows = [(wl, kind, key, est * id_factors.get(i, 1.0), meas) for wl, kind, key, est, meas, i in rows]
    else:
        rows = [r[:5] for r in rows]
    if estimates is not None:
        rows = [(wl, kind, key, estimates[(wl, key)], meas) for wl, kind, key, _, meas in rows
                if (wl, key) in estimates]
    if factors is not None:
        rows = [(wl, kind, key, est * key_factor(factors, kind, key), meas) for wl, kind, key, est, meas in rows]
    by_kind = {}
    for _, kind, _, est, meas in rows:
        by_kind.setdefault(kind, []).append(math.log(meas / est))
    factor = {k: math.exp(statistics.median(v)) for k, v in by_kind.items() if len(v) >= 8}
    per = {}
    for wl, kind, key, est, meas in rows:
        per.setdefault((wl, kind), {})[key] = (est, meas)
    out = []
    for (wl, kind), d in sorted(per.items()):
        if len(d) < 3:
            continue
        est = [v[0] for v in d.values()]
        meas = [v[1] for v in d.values()]
        best = min(range(len(meas)), key=lambda i: meas[i])
        by_est = sorted(range(len(est)), key=lambda i: est[i])
        f = factor.get(kind, 1.0)
        err_before = statistics.median(abs(math.log(e / m)) for e, m in zip(est, meas))
        err_after = statistics.median(abs(math.log(e * f / m)) for e, m in zip(est, meas))
        out.append({"workload": wl, "kind": kind, "n": len(d), "rho": spearman(est, meas),
                    "top4": best in by_est[:4], "top8": best in by_est[:8], "err_before": err_before,
                    "err_after": err_after, "factor": f})
    return out, factor


def render_accuracy(acc, factor, models, smoke, top_k, re_estimated=False):
    lines = ["# Estimator accuracy on a real device (pocl-cpu)", "",
             "Generated by `scripts/bench_opencl.py`%s on %s, 2-core AMD EPYC container, PoCL's CPU "
             "device. Models tuned with top_k %d, no DB calibration, into a fresh DB: %s. Per workload with at least 3 "
             "measured variants: Spearman's rho between the estimate and the measured median over its measured "
             "variants (nan where the estimates tie), and whether the measured best is inside the estimator's "
             "top 4 / top 8 of them (trivially yes when no more than 4 / 8 were measured). "
             "Calibration is one factor per cluster kind (estimator/calibration_fit.h), so within one workload it "
             "does not reorder variants: rho and top-K are the same before and after it, and only the absolute "
             "error (median |ln(estimate / measured)|) changes."
             % (" --smoke" if smoke else "", time.strftime("%Y-%m-%d"), top_k, ", ".join(models)), ""]
    if re_estimated:
        lines += ["Estimates: **today's estimator** (`--re-estimate`: `plan --json` over every variant, "
                  "nothing pruned), scored against the times measured in that tune; the estimates recorded "
                  "with the measurements are not used.", ""]
    if not acc:
        return "\n".join(lines + ["No workload had 3 measured variants."]) + "\n"
    rhos = [r["rho"] for r in acc if not math.isnan(r["rho"])]
    lines += ["| figure | value |", "| --- | ---: |",
              "| workloads | %d |" % len(acc),
              "| median Spearman rho (before = after calibration) | %.2f |" % (statistics.median(rhos) if rhos else float("nan")),
              "| measured best in the kept top 4 | %d of %d (%.0f%%) |" % (sum(r["top4"] for r in acc), len(acc),
                                                                        100.0 * sum(r["top4"] for r in acc) / len(acc)),
              "| measured best in the kept top 8 | %d of %d (%.0f%%) |" % (sum(r["top8"] for r in acc), len(acc),
                                                                        100.0 * sum(r["top8"] for r in acc) / len(acc)),
              "| median abs. log error, before calibration | %.2f |" % statistics.median(r["err_before"] for r in acc),
              "| median abs. log error, after calibration | %.2f |" % statistics.median(r["err_after"] for r in acc),
              "", "Calibration factors fitted (measured / estimated, per kind): " +
              ", ".join("%s %.2f" % (k, v) for k, v in sorted(factor.items())), "",
              "| workload | kind | variants | rho | best in top 4 | best in top 8 | log err before | after |",
              "| --- | --- | ---: | ---: | --- | --- | ---: | ---: |"]
    for r in acc:
        lines.append("| %s | %s | %d | %.2f | %s | %s | %.2f | %.2f |" % (
            r["workload"], r["kind"], r["n"], r["rho"], "yes" if r["top4"] else "no", "yes" if r["top8"] else "no",
            r["err_before"], r["err_after"]))
    return "\n".join(lines) + "\n"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dc-bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--work", default=os.path.join(ROOT, "build-bench", "opencl"))
    p.add_argument("--shapes", default="all")
    p.add_argument("--accuracy-models", default=None,
                   help="comma-separated ONNX models for the accuracy table (default: the tiny examples, and "
                        "models/mobilenet_v2/model.onnx where it exists)")
    p.add_argument("--out-md", default=os.path.join(ROOT, "docs", "bench", "opencl.md"))
    p.add_argument("--accuracy-md", default=None,
                   help="where the accuracy table goes (default: docs/bench/estimator-accuracy.md after the "
                        "accuracy tunes; with --accuracy-db, standard output only, so that scoring a DB never "
                        "overwrites the written-up page)")
    p.add_argument("--accuracy-top-k", type=int, default=None,
                   help="top_k of the accuracy tunes (default 16, 4 with --smoke): fewer PoCL builds")
    p.add_argument("--layers-only", action="store_true", help="the layer table only, no accuracy tunes")
    p.add_argument("--accuracy-db", default=None, help="the accuracy table from this DB only (no layers, no tunes)")
    p.add_argument("--re-estimate", action="store_true",
                   help="with --accuracy-db: score today's estimator (plan --json over --accuracy-models) "
                        "against the DB's measured times instead of the estimates recorded with them")
    p.add_argument("--param-calibration-from", default=None, metavar="DB",
                   help="with --accuracy-db: multiply the estimates by the per-parameter calibration a tune "
                        "would fit from DB (`dc-db calibration`), e.g. another run's or another model's DB")
    p.add_argument("--rank-calibration-from", default=None, metavar="DB",
                   help="with --accuracy-db: multiply the estimates by the factors a tune's real fits from DB would "
                        "give (pairwise ranking vectors where a template has one, else per-parameter factors: "
                        "`dc-db calibration --factors-of`); the estimates recorded with the measurements")
    p.add_argument("--accuracy-since-ms", type=int, default=0, metavar="UNIX_MS",
                   help="with --accuracy-db: only results recorded at or after this time (one tune of a DB "
                        "that holds several, e.g. a --retune on a copy of another run's DB)")
    p.add_argument("--include-implausible", action="store_true",
                   help="with --accuracy-db: score results a tune marked implausible too (e.g. a worker's "
                        "drift sentinel moved with the machine's load; paired timing keeps a workload's ratios)")
    p.add_argument("--smoke", action="store_true")
    a = p.parse_args()
    a.batch, a.precision, a.device = 1, "fp32", "opencl"
    a.no_calibration = False
    a.min_ms = 20 if a.smoke else 200
    os.makedirs(a.work, exist_ok=True)
    a.db = os.path.join(a.work, "layers.db")
    a.config = os.path.join(a.work, "tune-layers.yaml")
    with open(a.config, "w") as f:
        f.write("prune:\n  within: 1.5\n  top_k: %d\nprecision: fp32\n" % (2 if a.smoke else 8))
    if a.smoke:
        a.out_md = os.path.join(a.work, "opencl.md")
        a.accuracy_md = a.accuracy_md or os.path.join(a.work, "estimator-accuracy.md")
    if a.accuracy_md is None and a.accuracy_db is None:
        a.accuracy_md = os.path.join(ROOT, "docs", "bench", "estimator-accuracy.md")
    return a


def main():
    a = parse_args()
    if a.accuracy_db:
        if not os.path.exists(a.accuracy_db):
            sys.exit("error: no such DB: %s" % a.accuracy_db)
        models = (a.accuracy_models or "?").split(",")
        if a.re_estimate and not a.accuracy_models:
            sys.exit("error: --re-estimate needs --accuracy-models (the models the DB's tunes measured)")
        if a.rank_calibration_from and (a.re_estimate or a.param_calibration_from):
            sys.exit("error: --rank-calibration-from scores the recorded estimates alone")
        factors = param_factors(a, a.param_calibration_from) if a.param_calibration_from else None
        id_factors = (variant_factors(a, a.rank_calibration_from, a.accuracy_db)
                      if a.rank_calibration_from else None)
        acc, factor = accuracy(a.accuracy_db, current_estimates(a, models) if a.re_estimate else None, factors,
                               a.accuracy_since_ms, ("ok", "implausible") if a.include_implausible else ("ok",),
                               id_factors)
        text = render_accuracy(acc, factor, models, False, a.accuracy_top_k or 0, a.re_estimate)
        if factors is not None:
            text = text.replace("\n\n", "\n\nEstimates times the **per-parameter factors fitted from %s** "
                                "(`--param-calibration-from`, %d values).\n\n"
                                % (a.param_calibration_from, sum(len(v) for g in factors.values() for v in g.values())), 1)
        if id_factors is not None:
            text = text.replace("\n\n", "\n\nEstimates times the **ranking calibration fitted from %s** "
                                "(`--rank-calibration-from`: pairwise ranking vectors, else per-parameter "
                                "factors).\n\n" % a.rank_calibration_from, 1)
        if a.accuracy_md:
            with open(a.accuracy_md, "w") as f:
                f.write(text)
        print(text)
        return
    device, peak, bandwidth = device_figures(a)
    shapes = SMOKE_SHAPES if a.smoke else SHAPES
    names = list(shapes) if a.shapes == "all" else a.shapes.split(",")
    rows = []
    for name in names:
        print("layer %s ..." % name, flush=True)
        try:
            rows.append(layer(a, name, shapes, peak))
            r = rows[-1]
            print("  dc %.1f us, CLBlast %.1f us" % (r["dc_us"], r["clblast_us"]), flush=True)
        except Exception as e:  # a failed layer is a row of the table, not the end of the run
            rows.append({"name": name, "what": shapes[name][0], "error": str(e)})
            print("  failed: %s" % e, flush=True)
    text = render_layers(rows, device, peak, bandwidth, a.smoke)
    with open(a.out_md, "w") as f:
        f.write(text)
    print(text)
    if a.layers_only:
        sys.exit(1 if any("error" in r for r in rows) else 0)

    if a.accuracy_models is None:
        models = [os.path.join(ROOT, "examples", "tiny_cnn", "model.onnx")]
        if not a.smoke:
            models.append(os.path.join(ROOT, "examples", "tiny_transformer", "model.onnx"))
            for name in ("mobilenetv2", "resnet50", "bert_base"):  # scripts/export_models.py's exports
                path = os.path.join(ROOT, "models", name, "model.onnx")
                if os.path.exists(path):
                    models.append(path)
    else:
        models = a.accuracy_models.split(",")
    acc_db = os.path.join(a.work, "accuracy.db")
    if os.path.exists(acc_db):
        os.remove(acc_db)
    acc_config = os.path.join(a.work, "tune-accuracy.yaml")
    top_k = a.accuracy_top_k or (4 if a.smoke else 16)
    with open(acc_config, "w") as f:
        f.write("prune:\n  within: 100\n  top_k: %d\nprecision: fp32\n" % top_k)
    a.no_calibration = True
    for m in models:
        name = os.path.basename(os.path.dirname(m))
        print("accuracy: tuning %s ..." % name, flush=True)
        tune(a, m, os.path.join(a.work, "acc-" + name), acc_db, acc_config, os.path.join(a.work, "acc-%s.log" % name))
    acc, factor = accuracy(acc_db)
    text = render_accuracy(acc, factor, [os.path.relpath(m, ROOT) for m in models], a.smoke, top_k)
    with open(a.accuracy_md, "w") as f:
        f.write(text)
    print(text)
    if any("error" in r for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
