#!/usr/bin/python3
"""Whole models on this machine's CPU: dc's plan on PoCL's OpenCL CPU device (pocl-cpu) against
ONNX Runtime's CPU provider and PyTorch (eager) on the CPU, with the same number of threads,
in one run (docs/bench/opencl.md, "Whole models").

    scripts/bench_opencl_models.py [--models resnet50,mobilenetv2,bert_base] [--models-dir models]
        [--plans DIR] [--dc-bin build/bin] [--runs N] [--threads T] [--config FILE] [--out-md FILE]

For each model (the exports of scripts/export_models.py, with their test_data_set_0):
  - dc: the plan DIR/<model>/pocl-cpu (tuned with `dc-coordinator tune --gpus pocl-cpu
    --local-workers 1 --out DIR/<model>` first when missing, with --config), run by
    `dc-run PLAN --data test_data_set_0 --bench N`: it must say PASS; the median latency;
  - ONNX Runtime (PyPI onnxruntime, installed by scripts/install-deps.sh into /opt/dc/ort):
    the same model.onnx and inputs, CPUExecutionProvider, intra-op threads T, all graph
    optimisations; N timed runs after 5 warm-up runs, median;
  - PyTorch (Debian's torch, eager, no_grad): the same architecture and weights as the export
    (scripts/export_models.py's builders, seeded), torch.set_num_threads(T), the test data's
    inputs; its outputs are checked against the test data too; median of N runs.
T defaults to PoCL's compute units (dc-worker's inventory), so all three use the same cores.
"""
import argparse
import glob
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
ORT_DIR = "/opt/dc/ort"

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

GPU = "pocl-cpu"


def run(cmd, timeout=7200):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (os.path.basename(cmd[0]), p.returncode, (p.stdout + p.stderr)[-2000:]))
    return p.stdout


def compute_units(dc_bin):
    out = run([os.path.join(dc_bin, "dc-worker"), "--opencl", "0", "--list-devices"])
    m = re.search(r"pocl-cpu \((.*); ([0-9.]+) GFLOP/s", out)
    if not m:
        raise RuntimeError("dc-worker --opencl 0 --list-devices shows no pocl-cpu: %r" % out)
    cus = run(["clinfo", "--raw"]) if os.path.exists("/usr/bin/clinfo") else ""
    c = re.search(r"CL_DEVICE_MAX_COMPUTE_UNITS\s+(\d+)", cus)
    device = ", ".join(f.strip() for f in m.group(1).split(",")[:3])  # name, API, version
    return device, int(c.group(1)) if c else os.cpu_count()


def load_data(data_dir, model_path):
    model = onnx.load(model_path, load_external_data=False)
    init = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    inputs, outputs = {}, []
    for k, name in enumerate(names):
        t = onnx.TensorProto()
        with open(os.path.join(data_dir, "input_%d.pb" % k), "rb") as f:
            t.ParseFromString(f.read())
        inputs[name] = numpy_helper.to_array(t)
    for path in sorted(glob.glob(os.path.join(data_dir, "output_*.pb"))):
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        outputs.append(numpy_helper.to_array(t))
    return inputs, outputs


def timed(fn, runs, warmup=5):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples), min(samples)


def rel_l2(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def bench_dc(a, name, model_dir):
    plan = os.path.join(a.plans, name, GPU)
    if not os.path.exists(os.path.join(plan, "plan.json")):
        print("  tuning %s on %s (no plan in %s) ..." % (name, GPU, plan), flush=True)
        cmd = [os.path.join(a.dc_bin, "dc-coordinator"), "tune", os.path.join(model_dir, "model.onnx"),
               "--gpus", GPU, "--local-workers", "1", "--db", os.path.join(a.plans, "tune.db"),
               "--out", os.path.join(a.plans, name)]
        if a.config:
            cmd += ["--config", a.config]
        run(cmd)
    out = run([os.path.join(a.dc_bin, "dc-run"), plan, "--data", os.path.join(model_dir, "test_data_set_0"),
               "--bench", str(a.runs)])
    if "dc-run: PASS" not in out:
        raise RuntimeError("dc-run did not pass:\n" + out[-2000:])
    m = re.search(r"latency\s+median ([0-9.]+) ms, p99 [0-9.]+ ms, min ([0-9.]+) ms", out)
    err = re.findall(r"([0-9.e+-]+)\s+([0-9.e+-]+)\s+PASS", out)
    return float(m.group(1)), float(m.group(2)), max(float(e[1]) for e in err) if err else float("nan")


def bench_ort(a, model_dir, inputs, outputs):
    sys.path.insert(0, ORT_DIR)
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = a.threads
    o.inter_op_num_threads = 1
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = ort.InferenceSession(os.path.join(model_dir, "model.onnx"), o, providers=["CPUExecutionProvider"])
    got = s.run(None, inputs)
    err = max(rel_l2(g, w) for g, w in zip(got, outputs))
    med, lo = timed(lambda: s.run(None, inputs), a.runs)
    return med, lo, err, ort.__version__


def bench_torch(a, name, inputs, outputs):
    import torch
    import export_models as em
    torch.set_num_threads(a.threads)
    if name == "bert_base":
        model = em.build_bert(1, False)[0]
    else:
        model = em.build_cnn(name, 1)[0]
    model.eval()
    args = [torch.from_numpy(v) for v in inputs.values()]
    with torch.no_grad():
        got = model(*args)
        got = got if isinstance(got, (tuple, list)) else [got]
        err = max(rel_l2(g.numpy(), w) for g, w in zip(got, outputs))
        med, lo = timed(lambda: model(*args), a.runs)
    return med, lo, err, torch.__version__


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,mobilenetv2,bert_base")
    p.add_argument("--models-dir", default=os.path.join(ROOT, "models"))
    p.add_argument("--plans", default=os.path.join(ROOT, "build-bench", "opencl-models"))
    p.add_argument("--dc-bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=None, help="threads for ONNX Runtime and PyTorch "
                   "(default: PoCL's compute units)")
    p.add_argument("--config", default=None, help="tune config for models without a plan")
    p.add_argument("--out-md", default=None, help="write the table there too")
    a = p.parse_args()
    if a.runs < 1:
        p.error("--runs must be at least 1")
    device, cus = compute_units(a.dc_bin)
    a.threads = a.threads or cus
    rows = []
    for name in a.models.split(","):
        model_dir = os.path.join(a.models_dir, name)
        if not os.path.exists(os.path.join(model_dir, "model.onnx")):
            sys.exit("error: no %s/model.onnx (scripts/export_models.py %s)" % (model_dir, a.models_dir))
        inputs, outputs = load_data(os.path.join(model_dir, "test_data_set_0"), os.path.join(model_dir, "model.onnx"))
        print("%s ..." % name, flush=True)
        row = {"name": name, "load": os.getloadavg()[0]}
        for what, fn in (("dc", lambda: bench_dc(a, name, model_dir)),
                         ("ort", lambda: bench_ort(a, model_dir, inputs, outputs)),
                         ("torch", lambda: bench_torch(a, name, inputs, outputs))):
            try:
                row[what] = fn()
                print("  %s: median %.2f ms (min %.2f, rel. L2 error %.1e)" % ((what,) + tuple(row[what][:3])), flush=True)
            except Exception as e:  # a failed column is reported in the table, not the end of the run
                row[what] = None
                row[what + "_error"] = str(e)[-300:]
                print("  %s failed: %s" % (what, e), flush=True)
        rows.append(row)
    versions = {}
    for r in rows:
        for k in ("ort", "torch"):
            if r.get(k):
                versions[k] = r[k][3]

    def ms(v):
        return "%.1f" % v[0] if v else "failed"

    def ratio(peer, dc):
        return "%.2fx" % (peer[0] / dc[0]) if peer and dc else "-"

    lines = ["Measured %s on this machine (%s), %d threads for ONNX Runtime %s and PyTorch %s; dc's plan on "
             "pocl-cpu (%s); median of %d runs (ms); ratio = peer / dc (above 1: dc faster); load = the 1-minute "
             "load average when the model started." % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                                     os.uname().nodename, a.threads, versions.get("ort", "?"),
                                                     versions.get("torch", "?"), device, a.runs),
             "", "| model | dc (PoCL) ms | ONNX Runtime CPU ms | PyTorch CPU ms | ORT / dc | PyTorch / dc | dc check "
             "(rel. L2) | load |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %.1f |" % (
            r["name"], ms(r["dc"]), ms(r["ort"]), ms(r["torch"]), ratio(r["ort"], r["dc"]), ratio(r["torch"], r["dc"]),
            "PASS %.1e" % r["dc"][2] if r["dc"] else "-", r["load"]))
    for r in rows:
        for k in ("dc", "ort", "torch"):
            if r.get(k + "_error"):
                lines.append("\n%s / %s failed: %s" % (r["name"], k, r[k + "_error"]))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out_md:
        with open(a.out_md, "w") as f:
            f.write(text)
    sys.exit(1 if any(r.get(k + "_error") for r in rows for k in ("dc", "ort", "torch")) else 0)


if __name__ == "__main__":
    main()
