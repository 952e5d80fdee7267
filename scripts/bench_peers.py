#!/usr/bin/python3
"""Peer benchmark: dc's tuned plan against PyTorch and JAX/XLA on the same GPU.

    scripts/bench_peers.py [--models resnet50,mobilenetv2,bert_base] [--batches 1,32]
        [--runners eager,compile,compile-max,jax,dc] [--runs 200] [--min-seconds 2]
        [--dc-bin DIR] [--gpu-type TYPE] [--config examples/tune.yaml] [--skip-tune]
        [--work build-bench] [--out-md docs/bench/peers.md] [--fresh] [--device cuda|cpu]
        [--precision fp32|fp16|bf16]

For each model and batch, every runner computes the same architecture with the same
weights on the same inputs, in fp32 (TF32 off everywhere):
  eager        PyTorch eager (cuDNN/cuBLAS), the module export_models.py exported
  compile      torch.compile(module), default mode
  compile-max  torch.compile(module, mode="max-autotune")
  jax          the ONNX graph itself under jax.jit (scripts/onnx_to_jax.py), i.e. XLA
  dc           dc-coordinator tune (cold DB, then warm DB: both timed), then dc-run --bench
Batch 1 uses models/<name> (exported when missing); other batches are exported with the
same seeds into WORK/models/b<B>/ (BERT's reshapes bake the batch in, so a --shape
override cannot rebatch it). Every runner's output is compared with the exported test
data (PyTorch CPU fp32). PyTorch is timed with CUDA events per run, JAX with wall time to
block_until_ready; median and p99 of at least --runs runs and --min-seconds.

--precision fp16|bf16 runs every runner in that precision: PyTorch on module.half() /
.bfloat16() with float inputs cast alike, torch.compile on the same, JAX with float
parameters and inputs cast to jnp.float16 / jnp.bfloat16, dc tuned with --precision; each
runner's error is against the fp32 test data, and the table goes to
docs/bench/peers-<precision>.md.

Results accumulate in WORK/results-<gpu>[-<precision>].json, so the runners can be run in several calls
(each within a time limit); every call rewrites the Markdown table from all of them.
--device cpu is a plumbing smoke test for machines without a GPU (tiny models, emulated
dc): its table says so and is refused for docs/bench/peers.md. docs/bench/peers-method.md.

--train benchmarks a whole training step instead (dc's training plan against PyTorch eager
and torch.compile max-autotune, time and peak memory): scripts/bench_peers.py --train --help.
"""
import argparse
import datetime
import glob
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_util import add_dc_peer_args, cpu_name, finish_common_args, fresh_tune_dir, require_torch  # noqa: E402 (after the path is set)

ALL_RUNNERS = ("eager", "compile", "compile-max", "jax", "dc")
RUNNER_LABELS = {
    "eager": "PyTorch eager (cuDNN/cuBLAS)",
    "compile": "torch.compile (default)",
    "compile-max": "torch.compile (max-autotune)",
    "jax": "JAX/XLA (jax.jit of the ONNX graph)",
    "dc": "dc (tuned plan, dc-run)",
}
REAL_MODELS = ("resnet50", "mobilenetv2", "bert_base")
TINY_MODELS = ("tiny_cnn", "tiny_transformer")
ERROR_WARN = 1e-3  # max rel error above which a peer is flagged as computing something else
# In reduced precision every runner rounds: the flag moves to what that precision's whole-model
# tolerance allows (docs/precision.md "Whole model").
ERROR_WARN_BY_PRECISION = {"fp32": 1e-3, "fp16": 5e-2, "bf16": 2.2e-1}
TORCH_DTYPE = {"fp16": "float16", "bf16": "bfloat16"}


PRECISION = "fp32"  # --precision, set by parse_args


class RunnerUnavailable(Exception):
    """The runner cannot run here (a package or feature is missing): an n/a row, not a failure."""


# --- environment ------------------------------------------------------------------------

def run_text(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cuda_driver_version():
    """The driver's CUDA version (cuDriverGetVersion) and the driver release (nvidia-smi)."""
    cuda = "unknown"
    try:
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            cuda = "%d.%d" % (v.value // 1000, (v.value % 1000) // 10)
    except OSError:
        pass
    release = run_text(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return cuda, (release.splitlines()[0] if release else "unknown")


def package_version(name):
    try:
        module = __import__(name)
        return getattr(module, "__version__", "?")
    except Exception:  # noqa: BLE001 -- any import failure means "not usable here"
        return "not installed"


def environment(device):
    import torch
    env = {
        "device": device,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "jax": package_version("jax"),
        "commit": run_text(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]) or "unknown",
    }
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        env["torch_cuda"] = torch.version.cuda or "?"
        env["cudnn"] = str(torch.backends.cudnn.version())
        env["driver_cuda"], env["driver"] = cuda_driver_version()
    else:
        env["gpu"] = "none (CPU smoke run: %s)" % cpu_name()
    return env


# --- GPU type: the name dc's GPU table gives this device ---------------------------------

def gpu_table_patterns():
    """(type, [device patterns]) from common/gpu/gpus.yaml, read with a regex (no PyYAML)."""
    text = open(os.path.join(ROOT, "common", "gpu", "gpus.yaml")).read()
    out = []
    for m in re.finditer(r"-\s*name:\s*(\S+)(.*?)device_patterns:\s*\[([^\]]*)\]", text, re.S):
        patterns = re.findall(r'"([^"]*)"', m.group(3))
        out.append((m.group(1), patterns))
    return out


def _match_length(name, pattern):
    """GpuCatalog's match_length: whole-word match, '$' anchors at the end of the name."""
    at_end = pattern.endswith("$")
    pattern = pattern.rstrip("$")
    if not pattern:
        return 0
    pos = name.find(pattern)
    while pos >= 0:
        end = pos + len(pattern)
        left = pos == 0 or not name[pos - 1].isalnum() or not pattern[0].isalnum()
        right = end == len(name) or not name[end].isalnum() or not pattern[-1].isalnum()
        if left and right and (not at_end or end == len(name)):
            return len(pattern)
        pos = name.find(pattern, pos + 1)
    return 0


def gpu_type_for(device_name):
    """The type dc's workers serve this device as: the table entry whose pattern matches
    longest (GpuCatalog::match_name), else the generic name dc derives from the device name
    (GpuCatalog::match_device's slug). A match that dc then rejects for a different SM
    count (a MIG slice) is not detected here: give --gpu-type."""
    name = device_name.strip().lower()
    table = gpu_table_patterns()
    best, best_len = None, 0
    for gpu_type, patterns in table:
        for p in patterns:
            n = _match_length(name, p.lower())
            if n > best_len:
                best, best_len = gpu_type, n
    if best:
        return best
    generic = re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown-gpu"
    if generic in {t for t, _ in table}:
        generic += "-generic"
    print("note: '%s' is not in dc's GPU table; its workers serve it as '%s'" % (device_name, generic))
    return generic


# --- models and test data ----------------------------------------------------------------

def build_module(name, batch, outputs):
    """The torch module, its example inputs and ONNX names, built as the exporters build
    them (same seeds), so that its weights are the ONNX file's."""
    import torch
    if name in REAL_MODELS:
        import export_models
        if name == "bert_base":
            return export_models.build_bert(batch, pooler=outputs == 2)
        return export_models.build_cnn(name, batch)
    import make_examples as ex
    data = torch.Generator().manual_seed(ex.SEED + 1)
    if name == "tiny_cnn":
        model, _, ins, outs, keep = ex.build_tiny_cnn()
        return model, (torch.randn((batch, 3, 32, 32), generator=data),), ins, outs, keep
    if name == "tiny_transformer":
        model, _, ins, outs, keep = ex.build_tiny_transformer()
        model.layer.b = batch
        c = ex.TinyConfig
        x = torch.randn((batch, c.seq, c.hidden), generator=data)
        mask = torch.ones(batch, c.seq, dtype=torch.int64)
        mask[:, c.seq - 4:] = 0
        return model, (x, mask), ins, outs, keep
    raise SystemExit("unknown model %s; known: %s" % (name, ", ".join(REAL_MODELS + TINY_MODELS)))


def canonical_dir(name):
    return os.path.join(ROOT, "examples" if name in TINY_MODELS else "models", name)


def model_dir(name, batch, work):
    """The folder with model.onnx and test_data_set_0 for this batch; exported if missing."""
    import onnx_export_util as util
    directory = canonical_dir(name) if batch == 1 else os.path.join(work, "models", "b%d" % batch, name)
    if util.model_dir_complete(directory):
        return directory
    print("%s b%d: exporting %s ..." % (name, batch, directory), flush=True)
    model, args, in_names, out_names, keep_bn = build_module(name, batch, outputs=1)
    model.eval()
    expected = util.torch_outputs(model, args)
    onnx_model = util.export_onnx(model, args, in_names, out_names, keep_bn)
    util.write_model_dir(directory, onnx_model, [a.numpy() for a in args], expected)
    util.check_model_file(os.path.join(directory, "model.onnx"))
    return directory


def test_data(directory):
    import onnx
    from onnx import numpy_helper

    def read(kind):
        files = sorted(glob.glob(os.path.join(directory, "test_data_set_0", kind + "_*.pb")),
                       key=lambda p: int(re.search(r"_(\d+)\.pb$", p).group(1)))
        return [numpy_helper.to_array(onnx.load_tensor(p)) for p in files]
    return read("input"), read("output")


def max_rel_error(outs, refs):
    """Worst over the outputs of max|out-ref| / max|ref|."""
    worst = 0.0
    for out, ref in zip(outs, refs):
        out = np.asarray(out, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        if out.shape != ref.shape:
            return math.inf
        worst = max(worst, float(np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-30)))
    return worst


# --- timing ------------------------------------------------------------------------------

def summarize(samples_ms):
    return {"median_ms": statistics.median(samples_ms),
            "p99_ms": float(np.percentile(samples_ms, 99)),
            "min_ms": min(samples_ms), "runs": len(samples_ms)}


def repeat(one_run_ms, runs, min_seconds, warmup_seconds):
    """Warm-up, then at least `runs` runs and `min_seconds`; returns the samples in ms."""
    start = time.perf_counter()
    warm = 0
    while warm < 5 or time.perf_counter() - start < warmup_seconds:
        one_run_ms()
        warm += 1
    samples = []
    start = time.perf_counter()
    while len(samples) < runs or (time.perf_counter() - start < min_seconds and len(samples) < 100 * runs):
        samples.append(one_run_ms())
    return samples


def time_torch(fn, device, a):
    import torch
    if device == "cpu":
        def one():
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
    else:
        def one():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
    return summarize(repeat(one, a.runs, a.min_seconds, a.warmup_seconds))


# --- runners -----------------------------------------------------------------------------

def torch_setup(device):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32: no TF32 on tensor cores
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True          # cuDNN picks its fastest algorithm
    torch.set_float32_matmul_precision("highest")
    return torch.device(device)


def run_torch(runner, name, batch, refs, inputs, a):
    import torch
    dev = torch_setup(a.device)
    try:
        model = build_module(name, batch, outputs=len(refs))[0].eval().to(dev)
    except ImportError as e:
        raise RunnerUnavailable("cannot build the PyTorch module: %s" % e)
    args = [torch.from_numpy(np.array(x)).to(dev) for x in inputs]  # a writable copy
    if a.precision != "fp32":  # module.half() / .bfloat16(), float inputs alike
        dtype = getattr(torch, TORCH_DTYPE[a.precision])
        model = model.to(dtype)
        args = [x.to(dtype) if x.is_floating_point() else x for x in args]
    compile_s = None
    if runner != "eager":
        if not hasattr(torch, "compile"):
            raise RunnerUnavailable("torch %s has no torch.compile" % torch.__version__)
        torch._dynamo.reset()
        model = torch.compile(model, mode="max-autotune" if runner == "compile-max" else None)

    def call():
        with torch.inference_mode():
            return model(*args)
    t = time.perf_counter()
    try:
        out = call()
    except RuntimeError as e:  # e.g. torch 1.13 on the CPU: "not implemented for 'Half'"
        if a.precision != "fp32" and "not implemented for" in str(e):
            raise RunnerUnavailable("PyTorch has no %s kernel here: %s" % (a.precision, str(e)[:80]))
        raise
    if a.device == "cuda":
        torch.cuda.synchronize()
    first_s = time.perf_counter() - t
    if runner != "eager":
        compile_s = first_s
    outs = out if isinstance(out, (tuple, list)) else (out,)
    err = max_rel_error([o.detach().float().cpu().numpy() for o in outs], refs)
    result = time_torch(call, a.device, a)
    result.update(err=err, compile_s=compile_s, timing="CUDA events" if a.device == "cuda" else "wall")
    return result


def release_torch_memory(device):
    """After a torch runner's module is gone: give its cached blocks back (JAX shares the GPU)."""
    import gc
    import torch
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def import_jax(device):
    try:
        import jax
        import onnx_to_jax
    except ImportError as e:
        raise RunnerUnavailable("jax is not installed (%s)" % e)
    jax.config.update("jax_default_matmul_precision", "highest")  # fp32, not TF32
    try:
        dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    except RuntimeError as e:
        raise RunnerUnavailable("jax has no %s backend (%s)" % ("GPU" if device == "cuda" else "CPU", e))
    return jax, onnx_to_jax, dev


def run_jax(directory, refs, inputs, a):
    jax, onnx_to_jax, dev = import_jax(a.device)
    try:
        model = onnx_to_jax.load(os.path.join(directory, "model.onnx")).to_device(dev)
    except onnx_to_jax.UnsupportedOp as e:
        raise RunnerUnavailable("no JAX implementation of this model offline: %s" % e)
    args = [jax.device_put(x.astype(np.int32) if x.dtype == np.int64 else x, dev) for x in inputs]
    if a.precision != "fp32":  # float parameters and inputs in the reduced type
        import jax.numpy as jnp
        dtype = getattr(jnp, TORCH_DTYPE[a.precision])
        cast = lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x  # noqa: E731
        model.params = jax.tree_util.tree_map(cast, model.params)
        args = [cast(x) for x in args]
    fn = jax.jit(model.apply)
    t = time.perf_counter()
    outs = jax.block_until_ready(fn(model.params, *args))
    compile_s = time.perf_counter() - t
    err = max_rel_error([np.asarray(o, dtype=np.float32) for o in outs], refs)

    def one():
        start = time.perf_counter()
        jax.block_until_ready(fn(model.params, *args))
        return (time.perf_counter() - start) * 1e3
    result = summarize(repeat(one, a.runs, a.min_seconds, a.warmup_seconds))
    result.update(err=err, compile_s=compile_s, timing="wall to block_until_ready")
    return result


# --- dc ----------------------------------------------------------------------------------

def dc_paths(a, name, batch):
    suffix = "" if a.precision == "fp32" else "-" + a.precision
    base = os.path.join(a.work, "tune", "%s-b%d%s" % (name, batch, suffix))
    return base, os.path.join(base, "tuning.db"), os.path.join(base, "out")


def run_logged(cmd, log_path, env=None):
    """Runs cmd, writing its output to log_path; returns (rc, seconds, stdout+stderr)."""
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    text = p.stdout + p.stderr
    with open(log_path, "w") as f:
        f.write("$ %s\n%s" % (" ".join(cmd), text))
    return p.returncode, seconds, text


def tail(text, lines=8):
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"


def tune(a, name, batch, directory, gpu_type):
    """Cold DB (a fresh file), then warm DB (the same file again); both timed."""
    base, db, out = dc_paths(a, name, batch)
    fresh_tune_dir(base, db, out)
    cmd = [os.path.join(a.dc_bin, "dc-coordinator"), "tune", os.path.join(directory, "model.onnx"),
           "--gpus", gpu_type, "--db", db, "--out", out, "--config", a.config,
           "--precision", a.precision]
    if a.device == "cpu":
        cmd += ["--emulate", "--local-workers", "2"]
    # Cold means no DB and no compile cache: the workers get a fresh, empty one (they keep
    # NVRTC output under $XDG_CACHE_HOME/dc/worker, which would otherwise outlive the DB).
    cache = os.path.join(base, "worker-cache")
    shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    record = {"gpu_type": gpu_type, "config": os.path.relpath(a.config, ROOT), "emulated": a.device == "cpu"}
    for phase in ("cold", "warm"):
        print("%s b%d: dc tune, %s DB ..." % (name, batch, phase), flush=True)
        rc, seconds, text = run_logged(cmd, os.path.join(base, "tune-%s.log" % phase), env)
        if rc != 0:
            raise RuntimeError("dc-coordinator tune (%s DB) exited %d: %s" % (phase, rc, tail(text)))
        jobs = re.search(r"this run\s+(\d+) jobs sent", text)
        record[phase + "_s"] = seconds
        record[phase + "_jobs"] = int(jobs.group(1)) if jobs else None
    selection = os.path.join(out, gpu_type, "selection.json")
    if os.path.exists(selection):
        with open(selection) as f:
            sel = json.load(f)
        record["kernel_sum_us"] = sel.get("measured_total_us")
        record["reference_fallbacks"] = sel.get("reference_fallbacks")
    return record


def to_ms(value, unit):
    scale = {"ms": 1.0, "us": 1e-3, "µs": 1e-3, "s": 1e3}
    return float(value) * scale.get((unit or "ms").lower(), 1.0)


def parse_bench(text):
    """median and p99 from dc-run's output, in ms: tolerant of layout and of the unit."""
    number = r"[:=]?\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s*(ms|us|µs|s)?\b"
    both = re.search(r"median\s*/\s*p99\s*(?:\((ms|us)\))?\s*[:=]?\s*([0-9.]+)\s*/\s*([0-9.]+)\s*(ms|us|µs)?",
                     text, re.I)
    if both:
        unit = both.group(4) or both.group(1)
        return {"median_ms": to_ms(both.group(2), unit), "p99_ms": to_ms(both.group(3), unit)}
    median = re.search(r"median\s*(?:\((ms|us)\))?" + number, text, re.I)
    p99 = re.search(r"p99\s*(?:\((ms|us)\))?" + number, text, re.I)
    if not median or not p99:
        return None
    return {"median_ms": to_ms(median.group(2), median.group(3) or median.group(1)),
            "p99_ms": to_ms(p99.group(2), p99.group(3) or p99.group(1))}


def dc_check(a, plan, directory, base):
    """dc-run's own check against the test data, where dc-run offers one (--data)."""
    cmd = [os.path.join(a.dc_bin, "dc-run"), plan, "--data", os.path.join(directory, "test_data_set_0")]
    if a.device == "cpu":
        cmd.append("--emulate")
    rc, _, text = run_logged(cmd, os.path.join(base, "dc-run-check.log"))
    err = re.search(r"(?:rel(?:ative)?[ _]?err(?:or)?|\u2016out\u2212ref\u2016/\u2016ref\u2016)[^0-9]*"
                    r"([0-9.]+(?:[eE][-+]?[0-9]+)?)", text, re.I)
    if rc == 0:
        return (float(err.group(1)) if err else None), "dc-run --data: exit 0"
    return None, "dc-run --data exited %d: %s" % (rc, tail(text, 2))


def run_dc(a, name, batch, directory, gpu_type, results_tune):
    key = "%s/b%d" % (name, batch)
    base, _, out = dc_paths(a, name, batch)
    plan = os.path.join(out, gpu_type)
    if a.skip_tune:
        if not os.path.isdir(plan):
            raise RuntimeError("--skip-tune: no plan at %s (run once without --skip-tune)" % plan)
    else:
        results_tune[key] = tune(a, name, batch, directory, gpu_type)
    err, check_note = dc_check(a, plan, directory, base)
    cmd = [os.path.join(a.dc_bin, "dc-run"), plan]
    if a.device == "cpu":
        # The emulator runs the plan but its times are not GPU times: run once, time nothing.
        rc, seconds, text = run_logged(cmd + ["--emulate"], os.path.join(base, "dc-run.log"))
        if rc != 0:
            raise RuntimeError("dc-run --emulate exited %d: %s" % (rc, tail(text, 3)))
        return {"emulated": True, "err": err, "note": check_note + "; emulated run, not timed"}
    rc, _, text = run_logged(cmd + ["--bench", str(a.runs)], os.path.join(base, "dc-run.log"))
    if rc != 0:
        raise RuntimeError("dc-run --bench exited %d: %s" % (rc, tail(text, 3)))
    bench = parse_bench(text)
    if bench is None:
        raise RuntimeError("dc-run --bench printed no 'median ... p99' figures: %s" % tail(text, 4))
    bench.update(err=err, runs=a.runs, timing="dc-run --bench", note=check_note)
    return bench


# --- results and the table ---------------------------------------------------------------

def fmt_ms(r):
    if "median_ms" not in r:
        return "—"
    return "%.3f / %.3f" % (r["median_ms"], r["p99_ms"])


def fmt_err(r):
    e = r.get("err")
    if e is None:
        return "—"
    flag = " **(!)**" if e > ERROR_WARN_BY_PRECISION.get(PRECISION, ERROR_WARN) else ""
    return ("%.1e" % e) + flag


def cell_status(r):
    if r is None:
        return "not run"
    if r["status"] == "na":
        return "n/a (%s)" % r["why"]
    if r["status"] == "failed":
        return "FAILED (%s)" % r["why"]
    return None


def model_table(name, batches, runners, results):
    head = ["runner"]
    for b in batches:
        head += ["b%d median / p99 ms" % b, "b%d peer/dc" % b, "b%d max rel err" % b]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    notes = []
    for runner in runners:
        row = [RUNNER_LABELS[runner]]
        for b in batches:
            r = results.get("%s/b%d/%s" % (name, b, runner))
            dc = results.get("%s/b%d/dc" % (name, b))
            status = cell_status(r)
            if status:
                row += [status if len(status) < 60 else status[:57] + "...", "—", "—"]
                if len(status) >= 60:
                    notes.append("%s, batch %d, %s: %s" % (name, b, runner, status))
                continue
            ratio = "—"
            if dc and dc.get("status") == "ok" and "median_ms" in dc and "median_ms" in r:
                ratio = "%.2f" % (r["median_ms"] / dc["median_ms"])
            row += [fmt_ms(r), ratio, fmt_err(r)]
            if r.get("compile_s"):
                notes.append("%s, batch %d, %s: first call (compile) %.1f s" % (name, b, runner, r["compile_s"]))
            if r.get("note"):
                notes.append("%s, batch %d, %s: %s" % (name, b, runner, r["note"]))
        lines.append("| " + " | ".join(row) + " |")
    return lines, notes


def tune_table(tunes):
    lines = ["| model | batch | GPU type | config | cold DB s (jobs) | warm DB s (jobs) | plan kernel sum us |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
    for key in sorted(tunes):
        t = tunes[key]
        name, batch = key.split("/b")
        ksum = t.get("kernel_sum_us")
        lines.append("| %s | %s | %s%s | %s | %.1f (%s) | %.1f (%s) | %s |" % (
            name, batch, t["gpu_type"], " (emulated)" if t.get("emulated") else "", t["config"],
            t["cold_s"], t.get("cold_jobs"), t["warm_s"], t.get("warm_jobs"),
            "%.1f" % ksum if ksum is not None else "—"))
    return lines


def render(env, models, batches, runners, store):
    smoke = env["device"] == "cpu"
    out = ["# Peer benchmark: dc against PyTorch and JAX/XLA", ""]
    if smoke:
        out += ["**CPU SMOKE RUN: NOT A BENCHMARK.** It only exercises the script's plumbing on a",
                "machine without a GPU (PyTorch and JAX on the CPU, dc on emulated workers, not",
                "timed). Never commit these numbers as results.", ""]
    out += ["Written by `scripts/bench_peers.py` (method: docs/bench/peers-method.md).", "",
            "| | |", "| --- | --- |",
            "| GPU | %s |" % env["gpu"]]
    if not smoke:
        out += ["| driver | %s (CUDA %s) |" % (env["driver"], env["driver_cuda"]),
                "| PyTorch | %s (CUDA %s, cuDNN %s) |" % (env["torch"], env["torch_cuda"], env["cudnn"])]
    else:
        out.append("| PyTorch | %s |" % env["torch"])
    out += ["| JAX | %s |" % env["jax"], "| Python | %s |" % env["python"],
            "| dc commit | %s |" % env["commit"], "| date | %s |" % env["date"], ""]
    precision = env.get("precision", "fp32")
    if precision == "fp32":
        out.append("fp32 everywhere (TF32 off in PyTorch and JAX). Latency per inference in ms,")
    else:
        out += ["**%s** everywhere: PyTorch on module.%s(), torch.compile on the same, JAX with" % (
                    precision, "half" if precision == "fp16" else "bfloat16"),
                "%s parameters and inputs, dc's `--precision %s` plan. Latency per inference in ms," % (
                    precision, precision)]
    out += ["median / p99; *peer/dc* is the peer's median over dc's (above 1: dc is faster);",
            "*max rel err* is max|out−ref| / max|ref| against the exported test data",
            "(PyTorch CPU **fp32**); **(!)** marks one above %.0e." % ERROR_WARN_BY_PRECISION[precision], ""]
    notes = []
    for name in models:
        lines, n = model_table(name, batches, runners, store["runs"])
        out += ["## %s" % name, ""] + lines + [""]
        notes += n
    if store["tune"]:
        out += ["## Tuning time", "",
                "`dc-coordinator tune` wall time: cold = a fresh tuning DB and an empty worker",
                "compile cache, warm = the same command again on that DB (everything reused);",
                "(jobs) = jobs sent to the farm. *plan kernel sum* is the sum of",
                "the chosen kernels' measured medians (selection.json), without launch gaps.", ""]
        out += tune_table(store["tune"]) + [""]
    out += ["## Notes", ""]
    if smoke:
        out += ["- CPU smoke run: PyTorch and JAX timed by wall clock on the CPU; dc tuned on",
                "  emulated workers (modelled times) and its plan run once on the host emulator."]
    else:
        out += ["- PyTorch rows: CUDA events around each call, synchronised per run; JAX: wall time",
                "  from the call to `block_until_ready`, which includes Python dispatch; dc: the",
                "  figures `dc-run --bench` prints."]
    out += ["- Each figure: warm-up, then at least the set number of runs and minimum time.",
            "- The JAX row runs the ONNX file's graph (scripts/onnx_to_jax.py) under jax.jit:",
            "  the same architecture and weights, BatchNormalization computed, not folded."]
    out += ["- " + n for n in notes]
    return "\n".join(out) + "\n"


def load_store(path, env, fresh):
    if fresh or not os.path.exists(path):
        return {"env": env, "runs": {}, "tune": {}}
    with open(path) as f:
        store = json.load(f)
    if store.get("env", {}).get("gpu") != env["gpu"]:
        print("note: %s holds results of another device (%s); starting afresh" % (path, store["env"].get("gpu")))
        return {"env": env, "runs": {}, "tune": {}}
    store["env"] = env
    return store


def save_store(path, store):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(store, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


# --- main --------------------------------------------------------------------------------

def one_runner(runner, a, name, batch, directory, refs, inputs, gpu_type, tunes):
    print("%s b%d: %s ..." % (name, batch, runner), flush=True)
    try:
        if runner in ("eager", "compile", "compile-max"):
            r = run_torch(runner, name, batch, refs, inputs, a)
        elif runner == "jax":
            r = run_jax(directory, refs, inputs, a)
        else:
            r = run_dc(a, name, batch, directory, gpu_type, tunes)
        r["status"] = "ok"
    except RunnerUnavailable as e:
        r = {"status": "na", "why": str(e)}
    except Exception as e:  # noqa: BLE001 -- one failed runner must not lose the others
        r = {"status": "failed", "why": "%s: %s" % (type(e).__name__, e)}
    if runner in ("eager", "compile", "compile-max"):
        release_torch_memory(a.device)
    shown = fmt_ms(r) if r["status"] == "ok" else r["why"]
    print("%s b%d: %s -> %s %s, err %s" % (name, batch, runner, r["status"], shown, fmt_err(r)), flush=True)
    return r


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--models", help="comma list of %s (cpu default: %s)" % (
        ", ".join(REAL_MODELS + TINY_MODELS), ",".join(TINY_MODELS)))
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--runners", default=",".join(ALL_RUNNERS))
    add_dc_peer_args(ap, ROOT, 200, "runs", os.path.join(ROOT, "docs", "bench", "peers.md"), "/tmp/peers-smoke.md")
    ap.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32",
                    help="every runner in this precision; errors against the fp32 test data")
    a = ap.parse_args()
    a.models = [m.strip() for m in (a.models or ",".join(REAL_MODELS if a.device == "cuda" else TINY_MODELS)).split(",")]
    a.batches = [int(b) for b in a.batches.split(",")]
    a.runners = [r.strip() for r in a.runners.split(",")]
    for m in a.models:
        if m not in REAL_MODELS + TINY_MODELS:
            ap.error("unknown model %s; known: %s" % (m, ", ".join(REAL_MODELS + TINY_MODELS)))
    for r in a.runners:
        if r not in ALL_RUNNERS:
            ap.error("unknown runner %s; known: %s" % (r, ", ".join(ALL_RUNNERS)))
    if min(a.batches) < 1:
        ap.error("batches must be >= 1")
    suffix = "" if a.precision == "fp32" else "-" + a.precision
    finish_common_args(ap, a, ROOT, os.path.join(ROOT, "docs", "bench", "peers%s.md" % suffix),
                       "/tmp/peers-smoke%s.md" % suffix)
    global PRECISION
    PRECISION = a.precision
    return a


def find_dc_bin(a):
    candidates = [a.dc_bin] if a.dc_bin else [os.path.join(ROOT, "dist", "bin"), os.path.join(ROOT, "build", "bin")]
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("dc-coordinator", "dc-worker", "dc-run")):
            return os.path.abspath(d)
    sys.exit("error: no folder with executable dc-coordinator, dc-worker and dc-run among %s (--dc-bin DIR)"
             % ", ".join(candidates))


def write_md(path, env, store):
    """The table of everything in store, written to path; returns its text."""
    models = [m for m in REAL_MODELS + TINY_MODELS if any(k.startswith(m + "/") for k in store["runs"])]
    batches = sorted({int(k.split("/")[1][1:]) for k in store["runs"]})
    runners = [r for r in ALL_RUNNERS if any(k.endswith("/" + r) for k in store["runs"])]
    text = render(env, models, batches, runners, store)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return text


def main():
    if "--train" in sys.argv[1:]:  # a training step instead of inference: its own script
        import bench_peers_train
        return bench_peers_train.main([x for x in sys.argv[1:]])
    a = parse_args()
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU with torch
    require_torch(a.device)
    env = environment(a.device)
    env["precision"] = a.precision
    gpu_type = None
    if "dc" in a.runners:
        a.dc_bin = find_dc_bin(a)
        gpu_type = a.gpu_type or (gpu_type_for(env["gpu"]) if a.device == "cuda" else "h100")
        env["gpu_type"] = gpu_type
    os.makedirs(a.work, exist_ok=True)
    store_path = os.path.join(a.work, "results-%s%s.json" % (
        re.sub(r"[^a-z0-9]+", "-", env["gpu"].lower())[:60], "" if a.precision == "fp32" else "-" + a.precision))
    store = load_store(store_path, env, a.fresh)
    print("device: %s; dc GPU type: %s; results: %s" % (env["gpu"], gpu_type or "-", store_path), flush=True)

    for name in a.models:
        for batch in a.batches:
            try:
                directory = model_dir(name, batch, a.work)
                inputs, refs = test_data(directory)
            except Exception as e:  # noqa: BLE001 -- the other models can still run
                why = "no model: %s: %s" % (type(e).__name__, e)
                print("%s b%d: %s" % (name, batch, why), flush=True)
                for runner in a.runners:
                    store["runs"]["%s/b%d/%s" % (name, batch, runner)] = {"status": "failed", "why": why}
                save_store(store_path, store)
                continue
            for runner in a.runners:
                store["runs"]["%s/b%d/%s" % (name, batch, runner)] = one_runner(
                    runner, a, name, batch, directory, refs, inputs, gpu_type, store["tune"])
                save_store(store_path, store)
                write_md(a.out_md, env, store)  # after each runner: a run cut off keeps its table

    text = write_md(a.out_md, env, store)
    print("\n" + text)
    print("written: %s" % a.out_md)


if __name__ == "__main__":
    main()
