#!/usr/bin/python3
"""Foundation benchmarks: import + simplify time and reference-executor run time per model.

    scripts/bench_foundation.py [--models DIR] [--runs N] [--out docs/bench/foundation.md]

Times come from dc-coordinator's own in-process timers (inspect --json for import/simplify,
verify's printed reference-run time), median of N runs, on this machine. The table is
printed and, with --out, written as Markdown with the machine and date."""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess

from bench_util import cpu_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COORD = os.path.join(ROOT, "build/bin/dc-coordinator")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    names = [("tiny_cnn", os.path.join(ROOT, "examples/tiny_cnn")),
             ("tiny_transformer", os.path.join(ROOT, "examples/tiny_transformer"))]
    names += [(m, os.path.join(args.models, m)) for m in ("resnet50", "mobilenetv2", "bert_base")]
    for name, d in names:
        model = os.path.join(d, "model.onnx")
        if not os.path.exists(model):
            print(f"skip {name}: {model} missing (scripts/export_models.py {args.models})")
            continue
        imp, simp, run = [], [], []
        for _ in range(args.runs):
            js = json.loads(subprocess.run([COORD, "inspect", model, "--json"], check=True,
                                           capture_output=True, text=True).stdout)
            imp.append(js["import_seconds"])
            simp.append(js["simplify_seconds"])
            v = subprocess.run([COORD, "verify", model, "--data", os.path.join(d, "test_data_set_0")],
                               capture_output=True, text=True)
            m = re.search(r"reference run ([0-9.]+) s", v.stdout)
            if v.returncode != 0 or not m:
                raise SystemExit(f"verify failed on {name}:\n{v.stdout}\n{v.stderr}")
            run.append(float(m.group(1)))
        rows.append((name, js["nodes"]["imported"], js["nodes"]["simplified"], js["flops"],
                     statistics.median(imp), statistics.median(simp), statistics.median(run)))
        print(f"{name:18s} import {rows[-1][4]:.3f} s  simplify {rows[-1][5]:.3f} s  run {rows[-1][6]:.3f} s")

    lines = [
        "# Foundation benchmarks: import, simplify, reference executor",
        "",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores; {datetime.date.today()}; Release build.",
        f"Median of {args.runs} runs of `scripts/bench_foundation.py` (dc's in-process timers);",
        f"load average at start: {os.getloadavg()[0]:.1f}.",
        "",
        "| model | nodes imported → simplified | GFLOP | import s | simplify s | import+simplify s | reference run s | GFLOP/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, ni, ns, fl, i, s, r in rows:
        lines.append(f"| {name} | {ni} → {ns} | {fl/1e9:.2f} | {i:.3f} | {s:.3f} | {i+s:.3f} | {r:.4f} | {fl/1e9/max(r, 1e-4):.1f} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
