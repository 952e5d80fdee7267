#!/usr/bin/python3
"""Per-template benchmark: dc's best kernel for a layer against its roofline floor and cuBLAS/cuDNN.

    scripts/bench_templates.py [--shapes all|NAME,...] [--batch 1] [--precision fp32|tf32|fp16|bf16] [--runs 200]
        [--min-seconds 1] [--dc-bin DIR] [--gpu-type TYPE] [--config examples/tune.yaml]
        [--work build-bench/templates] [--out-md docs/bench/templates.md] [--fresh]
        [--device cuda|cpu] [--list]

Each shape is one layer of ResNet-50, BERT-base or MobileNetV2 with its fused epilogue
(conv + bias + ReLU, MatMul + bias + GELU, ...), exported alone as a small ONNX model with
test data. For each:
  dc       `dc-coordinator tune` on that model (this machine's GPU through the local farm):
           the measured median of the kernel(s) its plan chose (selection.json), i.e. the
           best measured variant of each template the layer maps to;
  floor    the roofline floor of the same workload(s): max(FLOPs / peak, compulsory
           bytes / DRAM bandwidth), FLOPs and bytes from the tuning DB's workloads table,
           peak and bandwidth from the GPU type's spec in the DB (common/gpu/gpus.yaml); the
           peak is the precision's: fp32 CUDA cores, or the tensor cores' tf32/fp16/bf16
           dense peak;
  PyTorch  eager PyTorch on the same inputs in the same precision: cuDNN convolution
           (cudnn.benchmark) or cuBLAS GEMM, with the bias, activation, softmax or norm as
           the separate kernels PyTorch launches; fp32 with TF32 off, tf32 with TF32 on,
           fp16/bf16 on a .half()/.bfloat16() module and inputs. CUDA-event timing, median
           of at least --runs runs.
`--precision` (default fp32) tunes dc's plan in that precision (`tune --precision`) and
writes docs/bench/templates.md for fp32, docs/bench/templates-<precision>.md otherwise.
The table gives times in us, each one's fraction of the floor (floor / time: 100% is the
roofline) and PyTorch/dc (above 1: dc is faster). Results accumulate in
WORK/results-<gpu>.json so that the shapes can be run over several calls.

--device cpu is a plumbing smoke test for machines without a GPU: dc on emulated workers
(modelled times), PyTorch on the CPU; its table says so and may not be written to
docs/bench/templates.md.
"""
import argparse
import json
import os
import re
import sqlite3
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bench_peers as peers  # noqa: E402 (after the path is set): environment, timing, GPU type
from bench_util import finish_common_args, require_torch  # noqa: E402

# --- the shapes --------------------------------------------------------------------------
# name -> (model it comes from, description, builder(batch) -> (module, example inputs)).


def _conv(cin, cout, k, stride, pad, hw, act="relu", groups=1):
    def build(batch):
        import torch
        import torch.nn as nn
        layers = [nn.Conv2d(cin, cout, k, stride, pad, groups=groups, bias=True)]
        layers.append({"relu": nn.ReLU(), "relu6": nn.ReLU6()}[act])
        gen = torch.Generator().manual_seed(7)
        module = nn.Sequential(*layers)
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / np.sqrt(cin // groups * k * k)))
        return module, (torch.randn((batch, cin, hw, hw), generator=gen),)
    return build


def _linear(m, k, n, act=None, bias=True):
    def build(batch):
        import torch
        import torch.nn as nn

        class Linear(nn.Module):
            def __init__(self):
                super().__init__()
                gen = torch.Generator().manual_seed(7)
                self.w = nn.Parameter(torch.randn((k, n), generator=gen) / np.sqrt(k))
                self.b = nn.Parameter(torch.randn((n,), generator=gen) * 0.1) if bias else None

            def forward(self, x):
                y = torch.matmul(x, self.w)
                if self.b is not None:
                    y = y + self.b
                return torch.nn.functional.gelu(y) if act == "gelu" else y
        gen = torch.Generator().manual_seed(8)
        return Linear(), (torch.randn((batch, m, k), generator=gen),)
    return build


def _attention(heads, seq, d):
    def build(batch):
        import torch
        import torch.nn as nn

        class Attention(nn.Module):
            def forward(self, q, k, v):
                s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / np.sqrt(d))
                return torch.matmul(torch.softmax(s, dim=-1), v)
        gen = torch.Generator().manual_seed(9)
        return Attention(), tuple(torch.randn((batch, heads, seq, d), generator=gen) for _ in range(3))
    return build


def _add_layernorm(seq, hidden):
    def build(batch):
        import torch
        import torch.nn as nn

        class AddNorm(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = nn.LayerNorm(hidden, eps=1e-12)
                gen = torch.Generator().manual_seed(7)
                with torch.no_grad():
                    self.norm.weight.copy_(1 + 0.1 * torch.randn((hidden,), generator=gen))
                    self.norm.bias.copy_(0.1 * torch.randn((hidden,), generator=gen))

            def forward(self, x, r):
                return self.norm(x + r)
        gen = torch.Generator().manual_seed(10)
        return AddNorm(), tuple(torch.randn((batch, seq, hidden), generator=gen) for _ in range(2))
    return build


SHAPES = {
    "r50_stem_7x7s2": ("resnet50", "conv 7x7/2 3->64 @224 + bias + relu", _conv(3, 64, 7, 2, 3, 224)),
    "r50_3x3_64": ("resnet50", "conv 3x3 64->64 @56 + bias + relu", _conv(64, 64, 3, 1, 1, 56)),
    "r50_1x1_256_64": ("resnet50", "conv 1x1 256->64 @56 + bias + relu", _conv(256, 64, 1, 1, 0, 56)),
    "r50_3x3s2_128": ("resnet50", "conv 3x3/2 128->128 @56 + bias + relu", _conv(128, 128, 3, 2, 1, 56)),
    "r50_1x1_1024_256": ("resnet50", "conv 1x1 1024->256 @14 + bias + relu", _conv(1024, 256, 1, 1, 0, 14)),
    "r50_3x3_512": ("resnet50", "conv 3x3 512->512 @7 + bias + relu", _conv(512, 512, 3, 1, 1, 7)),
    "mbv2_dw3x3_144": ("mobilenetv2", "depthwise 3x3 144 @56 + bias + relu6",
                       _conv(144, 144, 3, 1, 1, 56, act="relu6", groups=144)),
    "bert_qkv": ("bert_base", "MatMul 128x768 . 768x2304 + bias", _linear(128, 768, 2304)),
    "bert_ffn1": ("bert_base", "MatMul 128x768 . 768x3072 + bias + GELU", _linear(128, 768, 3072, "gelu")),
    "bert_ffn2": ("bert_base", "MatMul 128x3072 . 3072x768 + bias", _linear(128, 3072, 768)),
    "gemm_4096": ("-", "MatMul 4096x4096 . 4096x4096", _linear(4096, 4096, 4096, bias=False)),
    "bert_attention": ("bert_base", "attention 12 heads, 128 x 64: softmax(QK^T/8) V", _attention(12, 128, 64)),
    "bert_add_layernorm": ("bert_base", "residual add + LayerNorm 128 x 768", _add_layernorm(128, 768)),
}
SMOKE_SHAPES = ("r50_3x3s2_128", "bert_ffn1", "bert_add_layernorm")


# --- export ------------------------------------------------------------------------------

def shape_dir(a, name):
    return os.path.join(a.work, "b%d" % a.batch, name)


def export_shape(a, name):
    """WORK/b<B>/<name>/ with model.onnx and test_data_set_0 (exported once)."""
    import onnx_export_util as util
    directory = os.path.join(shape_dir(a, name), "model")
    if util.model_dir_complete(directory):
        return directory
    module, args = SHAPES[name][2](a.batch)
    module.eval()
    names = ["x%d" % i for i in range(len(args))]
    expected = util.torch_outputs(module, args)
    model = util.export_onnx(module, args, names, ["y"], keep_batch_norm=False)
    util.write_model_dir(directory, model, [t.numpy() for t in args], expected)
    util.check_model_file(os.path.join(directory, "model.onnx"))
    return directory


# --- dc: tune, then read the chosen kernels and their floors -----------------------------

def tune_shape(a, name, directory, gpu_type):
    base = shape_dir(a, name)
    out = os.path.join(base, "out" if a.precision == "fp32" else "out-" + a.precision)
    cmd = [os.path.join(a.dc_bin, "dc-coordinator"), "tune", os.path.join(directory, "model.onnx"),
           "--gpus", gpu_type, "--db", a.db, "--out", out, "--config", a.config]
    if a.precision != "fp32":
        cmd += ["--precision", a.precision]
    if a.device == "cpu":
        cmd += ["--emulate", "--local-workers", "2"]
    rc, seconds, text = peers.run_logged(cmd, os.path.join(base, "tune.log"))
    if rc != 0:
        raise RuntimeError("dc-coordinator tune exited %d: %s" % (rc, peers.tail(text)))
    with open(os.path.join(out, gpu_type, "selection.json")) as f:
        return json.load(f), seconds


def gpu_peaks(db, gpu_type, precision):
    """(peak FLOP/s of the precision, DRAM bytes/s) of the GPU type, from the spec the DB
    recorded: fp32 on CUDA cores (FMA = 2 FLOPs per lane), tf32/fp16/bf16 the tensor cores'
    dense rate."""
    row = db.execute("SELECT spec_json FROM gpu_types WHERE name = ?", (gpu_type,)).fetchone()
    if row is None:
        raise RuntimeError("the tuning DB has no GPU type %s" % gpu_type)
    spec = json.loads(row[0])
    clock = spec["sm_count"] * spec["boost_clock_mhz"] * 1e6
    if precision == "fp32":
        flops = 2.0 * spec["fp32_lanes_per_sm"] * clock
    else:
        flops = spec["tc_%s_flops_per_sm_clk" % precision] * clock
    return flops, spec["dram_bandwidth_gbs"] * 1e9


def roofline_floor_us(db, workload, peaks):
    row = db.execute("SELECT flops, bytes FROM workloads WHERE signature = ?", (workload,)).fetchone()
    if row is None:
        raise RuntimeError("the tuning DB has no workload %s" % workload)
    flops, nbytes = row
    return 1e6 * max(flops / peaks[0], nbytes / peaks[1]), flops, nbytes


def run_dc(a, name, directory, gpu_type):
    selection, seconds = tune_shape(a, name, directory, gpu_type)
    clusters = selection["clusters"]
    unmeasured = [c["kernel"] for c in clusters if not c.get("measured")]
    if unmeasured:
        raise RuntimeError("no successful measurement for %s" % ", ".join(unmeasured))
    db = sqlite3.connect("file:%s?mode=ro" % a.db, uri=True)
    try:
        peaks = gpu_peaks(db, gpu_type, a.precision)
        floors = [roofline_floor_us(db, c["workload"], peaks) for c in clusters]
    finally:
        db.close()
    return {
        "dc_us": sum(c["measured_us"] for c in clusters),
        "floor_us": sum(f[0] for f in floors),
        "flops": sum(f[1] for f in floors),
        "bytes": sum(f[2] for f in floors),
        "kernels": [c["kernel"] for c in clusters],
        "source": selection.get("source"),
        "tune_s": seconds,
    }


# --- PyTorch -----------------------------------------------------------------------------

TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def run_torch(a, name, directory):
    import torch
    dev = peers.torch_setup(a.device)
    if a.precision == "tf32":  # the same fp32 tensors, GEMMs and convolutions on TF32 tensor cores
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dtype = getattr(torch, TORCH_DTYPES[a.precision])
    inputs, refs = peers.test_data(directory)
    module = SHAPES[name][2](a.batch)[0].eval().to(dev, dtype)
    args = [torch.from_numpy(np.array(x)).to(dev, dtype) for x in inputs]

    def call():
        with torch.inference_mode():
            return module(*args)
    err = peers.max_rel_error([call().float().cpu().numpy()], refs)
    r = peers.time_torch(call, a.device, a)
    r["err"] = err
    return r


# --- table -------------------------------------------------------------------------------

def pct(floor, t):
    return "%.0f%%" % (100.0 * floor / t) if t else "—"


def template_names(kernels):
    names = [k.split("/")[0] for k in kernels]
    return " + ".join(names) if len(names) <= 2 else "%d kernels" % len(names)


PRECISION_TEXT = {
    "fp32": "fp32, TF32 off (CUDA cores).",
    "tf32": "tf32: fp32 tensors, GEMMs and convolutions on TF32 tensor cores (PyTorch: allow_tf32).",
    "fp16": "fp16: tensors stored in fp16, tensor cores with fp32 accumulation (PyTorch: .half()).",
    "bf16": "bf16: tensors stored in bf16, tensor cores with fp32 accumulation (PyTorch: .bfloat16()).",
}


def render(env, store):
    smoke = env["device"] == "cpu"
    precision = env.get("precision", "fp32")
    out = ["# Per-template benchmark (%s): dc kernels against the roofline floor and cuBLAS/cuDNN" % precision,
           ""]
    if smoke:
        out += ["**CPU SMOKE RUN: NOT A BENCHMARK.** dc ran on emulated workers (modelled times) and",
                "PyTorch on the CPU; this only exercises the script. Never commit these numbers.", ""]
    out += ["Written by `scripts/bench_templates.py`.", "", "| | |", "| --- | --- |",
            "| GPU | %s (dc type %s) |" % (env["gpu"], env.get("gpu_type", "?"))]
    if not smoke:
        out += ["| driver | %s (CUDA %s) |" % (env["driver"], env["driver_cuda"]),
                "| PyTorch | %s (CUDA %s, cuDNN %s) |" % (env["torch"], env["torch_cuda"], env["cudnn"])]
    out += ["| dc commit | %s |" % env["commit"], "| date | %s |" % env["date"], "",
            PRECISION_TEXT[precision] + " *dc*: measured median of the chosen kernel(s); *floor*: max(FLOPs /",
            "peak %s, compulsory bytes / DRAM bandwidth) from the GPU type's public figures;" % precision,
            "*% floor* = floor / time; *PyTorch* = eager (cuDNN or cuBLAS plus separate kernels",
            "for the rest), median of CUDA-event timed runs; *PyTorch/dc* above 1: dc is faster.", "",
            "| shape | layer | dc kernel(s) | dc us | floor us | dc % floor | PyTorch us | PyTorch % floor "
            "| PyTorch/dc | tune s |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    notes = []
    for name in SHAPES:
        r = store["runs"].get(name)
        if r is None:
            continue
        desc = "%s: %s" % (SHAPES[name][0], SHAPES[name][1])
        dc, pt = r.get("dc", {}), r.get("torch", {})
        dc_ok, pt_ok = dc.get("status") == "ok", pt.get("status") == "ok"
        row = [name, desc, template_names(dc["kernels"]) if dc_ok else "FAILED"]
        row += ["%.1f" % dc["dc_us"], "%.1f" % dc["floor_us"], pct(dc["floor_us"], dc["dc_us"])] if dc_ok \
            else ["—", "—", "—"]
        if pt_ok:
            t_us = pt["median_ms"] * 1e3
            row += ["%.1f" % t_us, pct(dc["floor_us"], t_us) if dc_ok else "—",
                    "%.2f" % (t_us / dc["dc_us"]) if dc_ok else "—"]
        else:
            row += ["FAILED", "—", "—"]
        row.append("%.1f" % dc["tune_s"] if dc_ok else "—")
        out.append("| " + " | ".join(row) + " |")
        for who, res in (("dc", dc), ("PyTorch", pt)):
            if res.get("status") != "ok":
                notes.append("%s, %s: %s" % (name, who, res.get("why", "not run")))
        if dc_ok:
            notes.append("%s: dc ran %s" % (name, "; ".join(dc["kernels"])))
        if pt_ok and pt.get("err", 0) > peers.ERROR_WARN:
            notes.append("%s: PyTorch max rel err %.1e against the test data" % (name, pt["err"]))
    out += ["", "## Notes", ""] + ["- " + n for n in notes]
    return "\n".join(out) + "\n"


# --- main --------------------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--shapes", help="all, or a comma list (--list shows them); cpu default: %s"
                    % ",".join(SMOKE_SHAPES))
    ap.add_argument("--list", action="store_true", help="print the shapes and exit")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--precision", choices=("fp32", "tf32", "fp16", "bf16"), default="fp32",
                    help="the plan's precision, and PyTorch's (default fp32)")
    ap.add_argument("--runs", type=int, default=200, help="at least this many timed runs (>= 50 on a GPU)")
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--warmup-seconds", type=float, default=0.5)
    ap.add_argument("--dc-bin", help="folder with dc-coordinator, dc-worker, dc-run (default: dist/bin, else build/bin)")
    ap.add_argument("--gpu-type", help="dc's GPU type (default: matched from the device name)")
    ap.add_argument("--config", help="tune configuration (default examples/tune.yaml; cpu: tune-quick.yaml)")
    ap.add_argument("--work", default=os.path.join(ROOT, "build-bench", "templates"))
    ap.add_argument("--out-md", help="default docs/bench/templates.md (cuda), /tmp/templates-smoke.md (cpu)")
    ap.add_argument("--fresh", action="store_true", help="forget earlier results (and the tuning DB)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    a = ap.parse_args()
    if a.list:
        for name, (model, desc, _) in SHAPES.items():
            print("%-20s %-12s %s" % (name, model, desc))
        sys.exit(0)
    default = ",".join(SHAPES) if a.device == "cuda" else ",".join(SMOKE_SHAPES)
    a.shapes = [s.strip() for s in (a.shapes or default).split(",")]
    if a.shapes == ["all"]:
        a.shapes = list(SHAPES)
    for s in a.shapes:
        if s not in SHAPES:
            ap.error("unknown shape %s; known: %s" % (s, ", ".join(SHAPES)))
    if a.batch < 1:
        ap.error("--batch must be >= 1")
    md = "templates.md" if a.precision == "fp32" else "templates-%s.md" % a.precision
    finish_common_args(ap, a, ROOT, os.path.join(ROOT, "docs", "bench", md), "/tmp/" + md.replace(".md", "-smoke.md"))
    return a


def one(label, fn):
    print("%s ..." % label, flush=True)
    try:
        r = fn()
        r["status"] = "ok"
    except Exception as e:  # noqa: BLE001 -- one failed shape must not lose the others
        r = {"status": "failed", "why": "%s: %s" % (type(e).__name__, e)}
    print("%s -> %s" % (label, r["status"] if r["status"] == "ok" else r["why"]), flush=True)
    return r


def write_md(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main():
    a = parse_args()
    require_torch(a.device)
    env = peers.environment(a.device)
    a.dc_bin = peers.find_dc_bin(a)
    gpu_type = a.gpu_type or (peers.gpu_type_for(env["gpu"]) if a.device == "cuda" else "h100")
    env["gpu_type"] = gpu_type
    env["precision"] = a.precision
    os.makedirs(a.work, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", env["gpu"].lower())[:60]
    suffix = "" if a.precision == "fp32" else "-" + a.precision
    store_path = os.path.join(a.work, "results-%s-b%d%s.json" % (slug, a.batch, suffix))
    a.db = os.path.join(a.work, "tuning-%s.db" % slug)
    if a.fresh:
        for path in (a.db, a.db + "-wal", a.db + "-shm"):
            if os.path.exists(path):
                os.remove(path)
    store = peers.load_store(store_path, env, a.fresh)
    print("device: %s; dc GPU type: %s; results: %s" % (env["gpu"], gpu_type, store_path), flush=True)
    for name in a.shapes:
        start = time.perf_counter()
        try:
            directory = export_shape(a, name)
        except Exception as e:  # noqa: BLE001
            why = "export failed: %s: %s" % (type(e).__name__, e)
            store["runs"][name] = {"dc": {"status": "failed", "why": why}, "torch": {"status": "failed", "why": why}}
            peers.save_store(store_path, store)
            continue
        r = {"dc": one("%s: dc tune" % name, lambda: run_dc(a, name, directory, gpu_type)),
             "torch": one("%s: PyTorch eager" % name, lambda: run_torch(a, name, directory))}
        if a.device == "cuda":
            peers.release_torch_memory(a.device)
        store["runs"][name] = r
        peers.save_store(store_path, store)
        write_md(a.out_md, render(env, store))  # after each shape: a run cut off keeps its table
        print("%s: %.1f s" % (name, time.perf_counter() - start), flush=True)
    text = render(env, store)
    write_md(a.out_md, text)
    print("\n" + text)
    print("written: %s" % a.out_md)
    failed = [n for n in a.shapes if any(store["runs"][n][k]["status"] != "ok" for k in ("dc", "torch"))]
    if failed:
        print("failed: %s" % ", ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
