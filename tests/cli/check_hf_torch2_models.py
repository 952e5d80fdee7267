#!/usr/bin/env python3
"""Hugging Face transformers models exported by torch 2.x's default exporter (issue 26),
cached in tests/data/hf_torch2 (README.md there: torch 2.15.0, transformers 5.24.0, opset 20):
BERT, GPT-2, LLaMA (GQA), Mistral (sliding window), T5 and BART, at 1 and 2 layers; Mistral
and T5 also exported with dynamic sequence axes, planned with --shape.

  counts   per model: `verify` of the 2-layer model against torch's output; the fp16 h100
           estimate-only plans of 1 and 2 layers: the per-layer figures (2-layer minus
           1-layer: kernels, free views, attention kernels, copy-only steps) equal the
           measured ones in EXPECTED, and the issue's goals hold where EXPECTED says they
           are met (every attention in one kernel, no copy-only step, at most 7 kernels a
           layer for the decoder-only and encoder-only models); the 2-layer model's
           kernels and copy-only steps equal EXPECTED's; `plan --explain` reports every
           attention site matched and names a reason for each copy-only step.
  run      per model: `plan --out` of the 2-layer model in fp32 and fp16 and `dc-run
           --emulate --data` against torch's output (every chosen kernel on the host
           emulator, within the precision's whole-model tolerance).
  tune     per model: an emulated quick tune of the 2-layer model in fp16
           (examples/tune-quick.yaml with top-k 1) on a local farm of 2 emulated h100
           workers: every job comes back ok, the tuned plan has as many clusters (kernels and
           views) as the estimate-only one, and `dc-run --emulate --data` passes on it.

usage: check_hf_torch2_models.py counts|run|tune DC_COORDINATOR DC_RUN SOURCE_DIR [MODEL...]
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from plan_kernel_counts import counts  # noqa: E402  one definition of a plan's kernel counts


# Per layer (T5, BART: one encoder layer plus one decoder layer, which has self- and
# cross-attention: 3 attention sites) in the fp16 h100 estimate-only plan, measured on
# 2026-11-28 (docs/bench/fusion.md). `sites`: attention sites per layer; `goal7`: the
# issue's "at most 7 kernels a layer" applies (decoder-only and encoder-only models);
# `model_kernels`, `model_copy_only`: the whole 2-layer model's.
EXPECTED = {
    "bert": {"kernels": 7, "views": 0, "attention": 1, "copy_only": 0, "sites": 1, "goal7": True,
             "model_kernels": 16, "model_copy_only": 0},
    "gpt2": {"kernels": 7, "views": 4, "attention": 1, "copy_only": 0, "sites": 1, "goal7": True,
             "model_kernels": 16, "model_copy_only": 0},
    "llama": {"kernels": 7, "views": 0, "attention": 1, "copy_only": 0, "sites": 1, "goal7": True,
              "model_kernels": 16, "model_copy_only": 0},
    "mistral": {"kernels": 7, "views": 0, "attention": 1, "copy_only": 0, "sites": 1, "goal7": True,
                "model_kernels": 16, "model_copy_only": 0},
    "t5": {"kernels": 18, "views": 0, "attention": 3, "copy_only": 0, "sites": 3, "goal7": False,
           "model_kernels": 42, "model_copy_only": 0},
    "bart": {"kernels": 18, "views": 0, "attention": 3, "copy_only": 0, "sites": 3, "goal7": False,
             "model_kernels": 42, "model_copy_only": 0},
}
# The same Mistral and T5 exported with dynamic sequence axes (export_hf_models.py --dynamic):
# the graph computes the sliding-window and causal masks, the positions and T5's relative
# position bias (bucketing with Log, Min, Where) from Shape nodes. Planned with --shape, they
# must give the static exports' figures. Not tuned (the tune mode runs the six above).
SHAPES = {
    "mistral_dyn": ["input_ids=1,16", "attention_mask=1,16"],
    "t5_dyn": ["input_ids=1,16", "attention_mask=1,16", "decoder_input_ids=1,8"],
}
EXPECTED["mistral_dyn"] = EXPECTED["mistral"]
EXPECTED["t5_dyn"] = EXPECTED["t5"]
TUNED = ["bert", "gpt2", "llama", "mistral", "t5", "bart"]


def shape_flags(model):
    return [f for s in SHAPES.get(model, []) for f in ("--shape", s)]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(cmd, timeout=600, env=None):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        fail(f"{' '.join(cmd)} ran past {timeout} s")
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def check_counts(coord, data, model):
    two = os.path.join(data, f"{model}2.onnx")
    out = run([coord, "verify", two, "--data", os.path.join(data, f"{model}2-data")] + shape_flags(model))
    if "verify: PASS" not in out:
        fail(f"{model}: verify did not pass:\n{out[-2000:]}")
    c = [counts(json.loads(run([coord, "plan", os.path.join(data, f"{model}{n}.onnx"), "--gpus", "h100",
                                "--precision", "fp16", "--json"] + shape_flags(model)))) for n in (1, 2)]
    per_layer = {k: c[1][k] - c[0][k] for k in c[0]}
    print(f"{model}: per layer {per_layer['kernels']} kernels, {per_layer['views']} views, "
          f"{per_layer['attention']} attention, {per_layer['copy_only']} copy-only, "
          f"{per_layer['estimated_us']:.1f} us; 2 layers {c[1]['kernels']} kernels, "
          f"{c[1]['estimated_us']:.1f} us (fp16 h100 estimate)")
    want = EXPECTED[model]
    for key in ("kernels", "views", "attention", "copy_only"):
        if per_layer[key] != want[key]:
            fail(f"{model}: {per_layer[key]} {key} per layer, expected {want[key]}")
    # The goals, restated so that a change of EXPECTED cannot quietly give them up.
    if per_layer["attention"] != want["sites"]:
        fail(f"{model}: {per_layer['attention']} attention kernels for {want['sites']} attention sites")
    if per_layer["copy_only"] != 0:
        fail(f"{model}: {per_layer['copy_only']} copy-only steps per layer")
    if want["goal7"] and per_layer["kernels"] > 7:
        fail(f"{model}: {per_layer['kernels']} kernels per layer (at most 7)")
    if c[1]["kernels"] != want["model_kernels"] or c[1]["copy_only"] != want["model_copy_only"]:
        fail(f"{model}: 2 layers in {c[1]['kernels']} kernels with {c[1]['copy_only']} copy-only steps, expected "
             f"{want['model_kernels']} and {want['model_copy_only']}")
    explain = run([coord, "plan", two, "--gpus", "h100", "--precision", "fp16", "--explain"] + shape_flags(model))
    if "every attention site matched" not in explain:
        fail(f"{model}: plan --explain does not report every attention site matched:\n{explain[-2000:]}")
    reasons = re.findall(r"copy-only step .*", explain)
    if len(reasons) != want["model_copy_only"] or any("model output" not in r for r in reasons):
        fail(f"{model}: plan --explain's copy-only lines {reasons}, expected {want['model_copy_only']} "
             "naming a model output")


def check_run(coord, dcrun, data, model, tmp):
    for precision in ("fp32", "fp16"):
        out = os.path.join(tmp, f"{model}-{precision}")
        run([coord, "plan", os.path.join(data, f"{model}2.onnx"), "--gpus", "h100", "--precision", precision,
             "--out", out] + shape_flags(model))
        text = run([dcrun, out, "--emulate", "--data", os.path.join(data, f"{model}2-data")])
        if not re.search(r"\bPASS\b", text) or re.search(r"\bFAIL\b", text):
            fail(f"{model}: dc-run --emulate --data of the {precision} plan did not pass:\n{text[-2000:]}")
        print(model, precision, "plan:", text.strip().splitlines()[-1])


def check_tune(coord, dcrun, src, data, model, tmp):
    onnx_path = os.path.join(data, f"{model}2.onnx")
    planned = counts(json.loads(run([coord, "plan", onnx_path, "--gpus", "h100", "--precision", "fp16", "--json"])))
    out = os.path.join(tmp, f"{model}-tuned")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
    run([coord, "tune", onnx_path, "--gpus", "h100", "--emulate", "--local-workers", "2",
         "--config", os.path.join(src, "examples", "tune-quick.yaml"), "--precision", "fp16", "--top-k", "1",
         "--no-reference", "--no-cross-check", "--db", os.path.join(tmp, f"{model}.db"), "--out", out],
        timeout=1500, env=env)
    summary_path = os.path.join(out, "h100", "summary.txt")
    if not os.path.exists(os.path.join(out, "h100", "plan.json")) or not os.path.exists(summary_path):
        fail(f"{model}: tune wrote no plan under {out}")
    summary = open(summary_path).read()
    jobs = re.search(r"this run\s+(\d+) jobs sent.*?, (\d+) results: (\d+) ok\s*$", summary, re.M)
    if not jobs or not (int(jobs.group(1)) == int(jobs.group(2)) == int(jobs.group(3)) > 0):
        fail(f"{model}: not every tune job came back ok:\n{summary[:1500]}")
    # summary.txt's total counts the chosen clusters, free views included.
    total = re.search(r"^\s*total\s.*\s(\d+) kernels\s*$", summary, re.M)
    if not total or int(total.group(1)) != planned["kernels"] + planned["views"]:
        fail(f"{model}: the tuned plan has {total.group(1) if total else '?'} clusters, the estimate-only plan "
             f"{planned['kernels']} kernels and {planned['views']} views:\n{summary[:3000]}")
    result = run([dcrun, os.path.join(out, "h100"), "--emulate", "--data", os.path.join(data, f"{model}2-data")],
                 env=env)
    if not re.search(r"\bPASS\b", result) or re.search(r"\bFAIL\b", result):
        fail(f"{model}: dc-run --emulate --data on the tuned plan did not pass:\n{result[-2000:]}")
    print(f"{model}: tune {jobs.group(1)} jobs, all ok, {total.group(1)} clusters; tuned fp16 plan:",
          result.strip().splitlines()[-1])


def main():
    if len(sys.argv) < 5 or sys.argv[1] not in ("counts", "run", "tune"):
        fail(__doc__)
    mode, coord, dcrun, src = sys.argv[1:5]
    models = sys.argv[5:] or (TUNED if mode == "tune" else list(EXPECTED))
    data = os.path.join(src, "tests", "data", "hf_torch2")
    for model in models:
        for f in (f"{model}1.onnx", f"{model}2.onnx", f"{model}2-data/output_0.pb"):
            if not os.path.exists(os.path.join(data, f)):
                fail(f"missing cached export {os.path.join(data, f)} (scripts/export_hf_models.py)")
    with tempfile.TemporaryDirectory(prefix="dc-hf-torch2-") as tmp:
        for model in models:
            if mode == "counts":
                check_counts(coord, data, model)
            elif mode == "run":
                check_run(coord, dcrun, data, model, tmp)
            else:
                check_tune(coord, dcrun, src, data, model, tmp)
    print("PASS")


if __name__ == "__main__":
    main()
