#!/usr/bin/python3
"""Training peer benchmark (issue 27): one training step of dc's tuned plan against PyTorch
eager and torch.compile(mode="max-autotune") on the same GPU, in the same run.

    scripts/bench_peers.py --train [--models resnet50,bert_base] [--batches 32,128]
        [--precisions fp32,tf32,bf16,fp16] [--runners eager,dc,compile-max] [--runs 50]
        [--min-seconds 2] [--dc-bin DIR] [--gpu-type TYPE] [--config examples/tune.yaml]
        [--skip-tune] [--work build-bench] [--out-md docs/bench/training-peers.md] [--fresh]
        [--device cuda|cpu]

The step: the model exported by scripts/export_models.py at that batch (same seeds, so the
same weights), in train mode (BatchNorm on batch statistics), its loss as dc's plan defines
it (ResNet-50: cross-entropy of the logits against int64 class labels; BERT-base: mse of the
hidden states against a seeded float target), the mean over the batch, then SGD with
momentum 0.9 and lr 0.1 (a step dc's plan takes as one multi-tensor update per bucket).
Every runner trains on the same fixed batch (scripts/train_batch.py).
  eager        PyTorch eager: zero_grad, forward, loss, backward, optimizer.step
  compile-max  the module under torch.compile(mode="max-autotune") (AOTAutograd + Inductor
               compile the forward and backward; the loss and the optimizer stay eager)
  dc           dc-coordinator tune --train (a fresh DB), then dc-run --train --bench N
Precisions: fp32 (TF32 off everywhere), tf32 (PyTorch's allow_tf32 on; dc --precision tf32),
bf16 and fp16 as AMP (PyTorch: torch.autocast, GradScaler for fp16; dc: --precision, fp32
master weights, dynamic loss scaling for fp16).

Per step: the median of at least --runs timed steps and --min-seconds after a warm-up (CUDA
events around the whole step for PyTorch; dc-run's host clock around each whole step).
Memory: PyTorch's peak allocated bytes over the timed steps (torch.cuda.max_memory_allocated),
dc's memory plan total (plan.json memory.total_bytes: weights, optimizer state, arena).
The goals (issue 27): dc's step at least 1.2x faster than compile-max's, at a peak memory no
higher than eager's. Results accumulate in WORK/train-results-<gpu>.json; every call rewrites
the table from all of them. --device cpu is the plumbing smoke test (tiny_cnn, PyTorch on the
CPU, dc on emulated workers and its plan run once on the host emulator, not timed).
"""
import argparse
import contextlib
import json
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bench_peers as peers  # noqa: E402 (after the path is set)
from bench_util import add_dc_peer_args, finish_common_args, fresh_tune_dir, require_torch  # noqa: E402
from train_batch import write_batch  # noqa: E402

RUNNERS = ("eager", "compile-max", "dc")
RUNNER_LABELS = {"eager": "PyTorch eager", "compile-max": "torch.compile (max-autotune)", "dc": "dc (tuned plan)"}
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
MODELS = ("resnet50", "bert_base", "tiny_cnn")
DEFAULT_BATCHES = {"resnet50": (32, 128), "bert_base": (32,), "tiny_cnn": (2,)}
LOSS = {"resnet50": "cross_entropy", "bert_base": "mse", "tiny_cnn": "cross_entropy"}
LR, MOMENTUM = 0.1, 0.9
GOAL_SPEEDUP = 1.2


class RunnerUnavailable(Exception):
    """The runner cannot run here: an n/a cell, not a failure."""


# --- the model and its batch ---------------------------------------------------------------

def model_dir(name, batch, work):
    """model.onnx and test_data_set_0 for this batch (exported by bench_peers' exporter)."""
    return peers.model_dir(name, batch, work)


def batch_dir(directory, work, name, batch, plan=None):
    """The fixed training batch in the plan's input order (without a plan: the model's inputs,
    then the labels), written once per model and batch."""
    data = os.path.join(work, "train-data", "%s-b%d%s" % (name, batch, "" if plan is None else "-plan"))
    if not os.path.isdir(data):
        write_batch(os.path.join(directory, "model.onnx"), data, plan)
    return data


def torch_batch(directory, work, name, batch):
    """The model's inputs and the labels for PyTorch: the batch written without a plan (int64
    class labels last); for mse, a seeded float target of the first output's shape instead."""
    import onnx
    from onnx import numpy_helper
    data = batch_dir(directory, work, name, batch)
    files = sorted((f for f in os.listdir(data) if f.startswith("input_")),
                   key=lambda f: int(re.search(r"_(\d+)\.pb$", f).group(1)))
    arrays = [numpy_helper.to_array(onnx.load_tensor(os.path.join(data, f))) for f in files]
    if LOSS[name] == "mse":
        out = onnx.load(os.path.join(directory, "model.onnx")).graph.output[0]
        shape = [d.dim_value for d in out.type.tensor_type.shape.dim]
        arrays[-1] = np.random.default_rng(5).uniform(-1, 1, size=shape).astype(np.float32)
    return arrays


# --- PyTorch -----------------------------------------------------------------------------

def torch_precision(torch, precision):
    allow = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high" if allow else "highest")


def torch_step(torch, model, args, labels, loss_kind, precision, device):
    """One closure that takes a whole training step, AMP as PyTorch's recipe has it."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    amp = precision in ("bf16", "fp16")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    scaler = torch.cuda.amp.GradScaler(enabled=precision == "fp16" and device == "cuda")
    if precision == "fp16" and device != "cuda":
        raise RunnerUnavailable("PyTorch has no fp16 autocast on the CPU")
    loss_fn = torch.nn.functional.cross_entropy if loss_kind == "cross_entropy" else torch.nn.functional.mse_loss

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=dtype) if amp else contextlib.nullcontext():
            out = model(*args)
            first = out[0] if isinstance(out, (tuple, list)) else out
        loss = loss_fn(first.float(), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss
    return step


def run_torch(runner, name, batch, precision, batch_arrays, a):
    import torch
    torch_precision(torch, precision)
    dev = torch.device(a.device)
    model = peers.build_module(name, batch, outputs=1)[0].train().to(dev)
    arrays = [torch.from_numpy(np.array(x)).to(dev) for x in batch_arrays]
    args, labels = arrays[:-1], arrays[-1]
    if runner == "compile-max":
        if not hasattr(torch, "compile"):
            raise RunnerUnavailable("torch %s has no torch.compile" % torch.__version__)
        torch._dynamo.reset()
        model = torch.compile(model, mode="max-autotune")
    step = torch_step(torch, model, args, labels, LOSS[name], precision, a.device)
    t = time.perf_counter()
    first_loss = float(step())
    if a.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    first_s = time.perf_counter() - t
    result = peers.time_torch(step, a.device, a)
    result.update(first_loss=first_loss, timing="CUDA events" if a.device == "cuda" else "wall",
                  compile_s=first_s if runner != "eager" else None)
    if a.device == "cuda":
        result["peak_bytes"] = int(torch.cuda.max_memory_allocated())
    return result


# --- dc ----------------------------------------------------------------------------------

def dc_paths(a, name, batch, precision):
    base = os.path.join(a.work, "train-tune", "%s-b%d-%s" % (name, batch, precision))
    return base, os.path.join(base, "tuning.db"), os.path.join(base, "out")


def dc_tune(a, name, directory, base, db, out, gpu_type, precision):
    fresh_tune_dir(base, db, out)
    cmd = [os.path.join(a.dc_bin, "dc-coordinator"), "tune", os.path.join(directory, "model.onnx"),
           "--train", "--loss", LOSS[name], "--optimizer", "sgd", "--lr", str(LR), "--momentum", str(MOMENTUM),
           "--gpus", gpu_type, "--db", db, "--out", out, "--config", a.config, "--precision", precision]
    if a.device == "cpu":
        cmd += ["--emulate", "--local-workers", "2"]
    print("%s: dc tune --train (%s) ..." % (name, precision), flush=True)
    rc, seconds, text = peers.run_logged(cmd, os.path.join(base, "tune.log"))
    if rc != 0:
        raise RuntimeError("dc-coordinator tune --train exited %d: %s" % (rc, peers.tail(text)))
    jobs = re.search(r"this run\s+(\d+) jobs sent", text)
    return {"tune_s": seconds, "jobs": int(jobs.group(1)) if jobs else None}


def parse_step_bench(text):
    m = re.search(r"^step\s+median ([0-9.]+) ms, min ([0-9.]+) ms, mean ([0-9.]+) ms \((\d+) steps", text, re.M)
    if not m:
        return None
    return {"median_ms": float(m.group(1)), "min_ms": float(m.group(2)), "mean_ms": float(m.group(3)),
            "runs": int(m.group(4))}


def run_dc(a, name, batch, precision, directory, gpu_type):
    base, db, out = dc_paths(a, name, batch, precision)
    plan_dir = os.path.join(out, gpu_type)
    record = {}
    if a.skip_tune:
        if not os.path.isdir(plan_dir):
            raise RuntimeError("--skip-tune: no plan at %s (run once without --skip-tune)" % plan_dir)
    else:
        record.update(dc_tune(a, name, directory, base, db, out, gpu_type, precision))
    with open(os.path.join(plan_dir, "plan.json")) as f:
        plan = json.load(f)
    record["peak_bytes"] = int(plan["memory"]["total_bytes"])
    data = batch_dir(directory, a.work, name, batch, plan)
    cmd = [os.path.join(a.dc_bin, "dc-run"), plan_dir, "--train", "--data", data]
    if a.device == "cpu":  # the emulator's times are not GPU times: one step, not timed
        rc, _, text = peers.run_logged(cmd + ["--emulate", "--steps", "1"], os.path.join(base, "dc-run.log"))
        if rc != 0:
            raise RuntimeError("dc-run --train --emulate exited %d: %s" % (rc, peers.tail(text, 3)))
        record.update(emulated=True, note="emulated step, not timed")
    else:
        warm = max(1, a.runs // 10)
        rc, _, text = peers.run_logged(cmd + ["--steps", str(warm), "--bench", str(a.runs)],
                                       os.path.join(base, "dc-run.log"))
        if rc != 0:
            raise RuntimeError("dc-run --train --bench exited %d: %s" % (rc, peers.tail(text, 3)))
        bench = parse_step_bench(text)
        if bench is None:
            raise RuntimeError("dc-run --train --bench printed no 'step median' line: %s" % peers.tail(text, 4))
        record.update(bench, timing="dc-run --bench (host clock around each whole step)")
    first = re.search(r"^step 1 loss (\S+)", text, re.M)
    record["first_loss"] = float(first.group(1)) if first else None
    return record


# --- results and the table ---------------------------------------------------------------

def key(name, batch, precision, runner):
    return "%s/b%d/%s/%s" % (name, batch, precision, runner)


def one_runner(runner, a, name, batch, precision, directory, gpu_type):
    print("%s b%d %s: %s ..." % (name, batch, precision, runner), flush=True)
    try:
        if runner == "dc":
            r = run_dc(a, name, batch, precision, directory, gpu_type)
        else:
            r = run_torch(runner, name, batch, precision, torch_batch(directory, a.work, name, batch), a)
        r["status"] = "ok"
    except RunnerUnavailable as e:
        r = {"status": "na", "why": str(e)}
    except Exception as e:  # noqa: BLE001 -- one failed runner must not lose the others
        r = {"status": "failed", "why": "%s: %s" % (type(e).__name__, e)}
    if runner != "dc":
        peers.release_torch_memory(a.device)
    print("%s b%d %s: %s -> %s" % (name, batch, precision, runner, cell(r)), flush=True)
    return r


def cell(r):
    if r is None:
        return "not run"
    if r["status"] != "ok":
        why = r["why"] if len(r["why"]) < 70 else r["why"][:67] + "..."
        return ("n/a (%s)" if r["status"] == "na" else "FAILED (%s)") % why
    return "%.3f" % r["median_ms"] if "median_ms" in r else "ran (%s)" % r.get("note", "not timed")


def mib(r):
    return "%.1f" % (r["peak_bytes"] / 2**20) if r and r.get("status") == "ok" and r.get("peak_bytes") else "—"


def ratio(num, den, fmt="%.2f"):
    ok = all(x and x.get("status") == "ok" and "median_ms" in x for x in (num, den))
    return fmt % (num["median_ms"] / den["median_ms"]) if ok else "—"


def memory_ratio(dc, eager):
    ok = all(x and x.get("status") == "ok" and x.get("peak_bytes") for x in (dc, eager))
    return "%.2f" % (dc["peak_bytes"] / eager["peak_bytes"]) if ok else "—"


def render(env, runs):
    smoke = env["device"] == "cpu"
    out = ["# Training step: dc against PyTorch eager and torch.compile", ""]
    if smoke:
        out += ["**CPU SMOKE RUN: NOT A BENCHMARK.** It only exercises the script's plumbing on a",
                "machine without a GPU (PyTorch on the CPU, dc on emulated workers, not timed).", ""]
    out += ["Written by `scripts/bench_peers.py --train` (its --help says what a step is).", "",
            "| | |", "| --- | --- |", "| GPU | %s |" % env["gpu"], "| PyTorch | %s |" % env["torch"],
            "| dc commit | %s |" % env["commit"], "| date | %s |" % env["date"], "",
            "Median ms per whole step; *compile/dc* is torch.compile's median over dc's (goal >= %.1f);" % GOAL_SPEEDUP,
            "peak MiB: PyTorch's max allocated over the timed steps, dc's memory plan total; *dc/eager",
            "memory* (goal <= 1.00).", "",
            "| model | batch | precision | eager ms | compile-max ms | dc ms | compile/dc | eager/dc | "
            "eager MiB | compile MiB | dc MiB | dc/eager memory |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    notes = []
    combos = sorted({tuple(k.split("/")[:3]) for k in runs},
                    key=lambda c: (MODELS.index(c[0]) if c[0] in MODELS else 99, int(c[1][1:]), PRECISIONS.index(c[2])))
    for name, b, precision in combos:
        r = {runner: runs.get("%s/%s/%s/%s" % (name, b, precision, runner)) for runner in RUNNERS}
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, b[1:], precision, cell(r["eager"]), cell(r["compile-max"]), cell(r["dc"]),
            ratio(r["compile-max"], r["dc"]), ratio(r["eager"], r["dc"]),
            mib(r["eager"]), mib(r["compile-max"]), mib(r["dc"]), memory_ratio(r["dc"], r["eager"])))
        for runner, x in r.items():
            if x and x.get("status") == "ok" and x.get("compile_s"):
                notes.append("%s %s %s, %s: first step (compile) %.1f s" % (name, b, precision, runner, x["compile_s"]))
            if x and x.get("status") == "ok" and x.get("tune_s"):
                notes.append("%s %s %s, dc: tune %.0f s, %s jobs" % (name, b, precision, x["tune_s"], x.get("jobs")))
            if x and x.get("status") == "ok" and x.get("first_loss") is not None:
                notes.append("%s %s %s, %s: first step's loss %.6g" % (name, b, precision, runner, x["first_loss"]))
    out += ["", "## Notes", ""] + ["- " + n for n in notes]
    return "\n".join(out) + "\n"


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench_peers.py --train", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--train", action="store_true", help="(this benchmark)")
    ap.add_argument("--models", help="comma list of %s (cuda default: resnet50,bert_base; cpu: tiny_cnn)"
                    % ", ".join(MODELS))
    ap.add_argument("--batches", help="comma list for every model (default: resnet50 32,128; bert_base 32; "
                    "tiny_cnn 2)")
    ap.add_argument("--precisions", help="comma list of %s (cuda default: all; cpu: fp32)" % ", ".join(PRECISIONS))
    ap.add_argument("--runners", default="eager,dc,compile-max",
                    help="in this order (max-autotune's compile, the slowest, last)")
    add_dc_peer_args(ap, ROOT, 50, "steps", os.path.join(ROOT, "docs", "bench", "training-peers.md"),
                     "/tmp/training-peers-smoke.md")
    a = ap.parse_args(argv)
    cpu = a.device == "cpu"
    a.models = [m.strip() for m in (a.models or ("tiny_cnn" if cpu else "resnet50,bert_base")).split(",")]
    a.precisions = [p.strip() for p in (a.precisions or ("fp32" if cpu else ",".join(PRECISIONS))).split(",")]
    a.runners = [r.strip() for r in a.runners.split(",")]
    for values, known, what in ((a.models, MODELS, "model"), (a.precisions, PRECISIONS, "precision"),
                                (a.runners, RUNNERS, "runner")):
        for v in values:
            if v not in known:
                ap.error("unknown %s %s; known: %s" % (what, v, ", ".join(known)))
    try:
        a.batches = [int(b) for b in a.batches.split(",")] if a.batches else None
    except ValueError:
        ap.error("--batches takes a comma list of integers, got %r" % a.batches)
    if a.batches and min(a.batches) < 1:
        ap.error("batches must be >= 1")
    finish_common_args(ap, a, ROOT, os.path.join(ROOT, "docs", "bench", "training-peers.md"),
                       "/tmp/training-peers-smoke.md")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    require_torch(a.device)
    env = peers.environment(a.device)
    gpu_type = None
    if "dc" in a.runners:
        a.dc_bin = peers.find_dc_bin(a)
        gpu_type = a.gpu_type or (peers.gpu_type_for(env["gpu"]) if a.device == "cuda" else "h100")
    os.makedirs(a.work, exist_ok=True)
    store_path = os.path.join(a.work, "train-results-%s.json" % re.sub(r"[^a-z0-9]+", "-", env["gpu"].lower())[:60])
    store = peers.load_store(store_path, env, a.fresh)
    print("device: %s; dc GPU type: %s; results: %s" % (env["gpu"], gpu_type or "-", store_path), flush=True)
    for name in a.models:
        for batch in a.batches or DEFAULT_BATCHES[name]:
            try:
                directory = model_dir(name, batch, a.work)
            except Exception as e:  # noqa: BLE001 -- the other models can still run
                print("%s b%d: no model: %s" % (name, batch, e), flush=True)
                continue
            for precision in a.precisions:
                for runner in a.runners:
                    store["runs"][key(name, batch, precision, runner)] = one_runner(
                        runner, a, name, batch, precision, directory, gpu_type)
                    peers.save_store(store_path, store)
                    write_md(a.out_md, env, store)  # after each runner: a run cut off keeps its table
    text = write_md(a.out_md, env, store)
    print("\n" + text + "\nwritten: %s" % a.out_md)


def write_md(path, env, store):
    text = render(env, store["runs"])
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return text


if __name__ == "__main__":
    main()
