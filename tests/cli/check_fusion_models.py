#!/usr/bin/env python3
"""Transformers in the node forms torch 2.x's exporter writes (scripts/make_transformer_models.py:
LLaMA with GQA, RoPE, SDPA's decomposition and SwiGLU; the same LLaMA in opset 23's
Attention, RMSNormalization and RotaryEmbedding ops; GPT-2; a BERT encoder), small:

  counts   `verify` against the numpy oracle's output, then the fp16 h100 estimate-only
           plan of 1 and 2 layers: per layer at most 7 kernels, exactly 1 attention kernel,
           no copy-only step (docs/bench/fusion.md's goals), and for the LLaMAs one gate/up
           GEMM computing silu(gate)*up in its epilogue (a gemm cluster with one MatMul, the
           two Slices and the Sigmoid: docs/codegen.md "GLU epilogue");
  run      `plan --out` and `dc-run --emulate --data` in fp32 and fp16: every chosen kernel
           (attention with its operand cones and the IsNaN guard over fully masked rows,
           RMSNorm, the merged projections, the SwiGLU epilogue) on the host emulator against
           the oracle.

usage: check_fusion_models.py counts|run DC_COORDINATOR DC_RUN SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

SMALL = ["--width", "64", "--heads", "4", "--kv-heads", "2", "--seq", "16"]
MOVES = {"transpose", "reshape", "slice", "expand", "concat", "unsqueeze", "squeeze", "flatten",
         "split", "tile", "gather", "identity", "cast"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def counts(plan):
    gpu = plan["gpus"][0]
    out = {"kernels": 0, "attention": 0, "copy_only": 0, "glu_epilogue": 0}
    for c in gpu["chosen"]:
        cand = plan["candidates"][c]
        if cand.get("free_view"):
            continue
        out["kernels"] += 1
        out["attention"] += cand["kind"] == "attention"
        ops = cand["pattern"].split("+")
        out["copy_only"] += all(op in MOVES for op in ops)
        out["glu_epilogue"] += (cand["kind"] == "gemm" and ops.count("matmul") == 1 and
                                ops.count("slice") == 2 and "sigmoid" in ops)
    return out


def main():
    mode, coord, dcrun, src = sys.argv[1:5]
    make = [sys.executable, os.path.join(src, "scripts", "make_transformer_models.py")]
    with tempfile.TemporaryDirectory(prefix="dc-fusion-") as tmp:
        for model in ("llama", "llama23", "gpt2", "bert"):
            paths = {}
            for layers in (1, 2):
                paths[layers] = os.path.join(tmp, f"{model}{layers}.onnx")
                data = ["--data", os.path.join(tmp, f"{model}-data")] if layers == 2 else []
                run(make + [model, "--layers", str(layers), "--out", paths[layers]] + SMALL + data)
            data = os.path.join(tmp, f"{model}-data")
            if mode == "counts":
                run([coord, "verify", paths[2], "--data", data])
                c = [counts(json.loads(run([coord, "plan", paths[n], "--gpus", "h100", "--precision", "fp16",
                                            "--json"]))) for n in (1, 2)]
                per_layer = {k: c[1][k] - c[0][k] for k in c[0]}
                print(model, "per layer:", per_layer)
                if per_layer["kernels"] > 7:
                    fail(f"{model}: {per_layer['kernels']} kernels per layer (at most 7)")
                if per_layer["attention"] != 1:
                    fail(f"{model}: {per_layer['attention']} attention kernels per layer (1)")
                if per_layer["copy_only"] != 0:
                    fail(f"{model}: {per_layer['copy_only']} copy-only steps per layer")
                if model.startswith("llama") and per_layer["glu_epilogue"] != 1:
                    fail(f"{model}: {per_layer['glu_epilogue']} gate/up GEMMs with the SwiGLU epilogue per layer (1)")
            else:
                for precision in ("fp32", "fp16"):
                    out = os.path.join(tmp, f"{model}-{precision}")
                    run([coord, "plan", paths[2], "--gpus", "h100", "--precision", precision, "--out", out])
                    print(model, precision, run([dcrun, out, "--emulate", "--data", data]).strip().splitlines()[-1])
    print("PASS")


if __name__ == "__main__":
    main()
