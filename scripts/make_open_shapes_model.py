#!/usr/bin/python3
"""Writes tests/data/open_shapes/model.onnx: one Hugging Face-style self-attention block
whose Reshape and Range operands come from Shape -> Gather -> Cast -> Div chains, which
ONNX 1.12's shape inference (even with data propagation) leaves without static shapes.
dc's import must still find every shape without running MatMul/Softmax (tests/unit/test_static_shapes.cpp).
Deterministic: the weights come from a seeded generator."""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

SEQ, WIDTH, HEADS = 8, 16, 2


def block(layer, x, y):
    """One attention block reading `x`, writing `y`; its tensors are prefixed for layers > 0."""
    nodes, inits = build_block()
    if layer == 0 and x == "x" and y == "y":
        return nodes, inits
    rename = lambda n: x if n == "x" else y if n == "y" else f"l{layer}_{n}"
    for t in inits:
        t.name = rename(t.name)
    for n in nodes:
        n.input[:] = [rename(i) for i in n.input]
        n.output[:] = [rename(o) for o in n.output]
    return nodes, inits


def build(layers=1):
    nodes, inits = [], []
    for layer in range(layers):
        n, i = block(layer, "x" if layer == 0 else f"h{layer}", "y" if layer == layers - 1 else f"h{layer + 1}")
        nodes += n
        inits += i
    graph = helper.make_graph(
        nodes, "open_shapes_attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", "width"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def build_block():
    rng = np.random.default_rng(17)
    inits = [
        numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) * 0.2, n)
        for n in ("wq", "wk", "wv", "wo")
    ] + [
        numpy_helper.from_array(rng.standard_normal((SEQ, WIDTH)).astype(np.float32), "pos_table"),
        numpy_helper.from_array(np.array(0, np.int64), "i0"),
        numpy_helper.from_array(np.array(1, np.int64), "i1"),
        numpy_helper.from_array(np.array(2, np.int64), "i2"),
        numpy_helper.from_array(np.array(float(HEADS), np.float32), "heads_f"),
        numpy_helper.from_array(np.array([HEADS], np.int64), "heads"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    N = helper.make_node
    nodes = [
        # position ids = Range(0, seq, 1) read from the input's shape
        N("Shape", ["x"], ["x_shape"]),
        N("Gather", ["x_shape", "i1"], ["seq"], axis=0),
        N("Range", ["i0", "seq", "i1"], ["pos_ids"]),
        N("Gather", ["pos_table", "pos_ids"], ["pos_emb"], axis=0),
        N("Add", ["x", "pos_emb"], ["h"]),
        # head_dim = int(float(width) / heads): a float round trip data propagation cannot follow
        N("Shape", ["h"], ["h_shape"]),
        N("Gather", ["h_shape", "i2"], ["width"], axis=0),
        N("Cast", ["width"], ["width_f"], to=TensorProto.FLOAT),
        N("Div", ["width_f", "heads_f"], ["head_dim_f"]),
        N("Cast", ["head_dim_f"], ["head_dim"], to=TensorProto.INT64),
        N("Unsqueeze", ["head_dim", "axis0"], ["head_dim_1"]),
        N("Gather", ["h_shape", "i0"], ["batch"], axis=0),
        N("Unsqueeze", ["batch", "axis0"], ["batch_1"]),
        N("Gather", ["h_shape", "i1"], ["seq2"], axis=0),
        N("Unsqueeze", ["seq2", "axis0"], ["seq_1"]),
        N("Concat", ["batch_1", "seq_1", "heads", "head_dim_1"], ["split_shape"], axis=0),
        N("Sqrt", ["head_dim_f"], ["scale"]),
    ]
    for p in ("q", "k", "v"):
        nodes += [
            N("MatMul", ["h", "w" + p], [p + "_flat"]),
            N("Reshape", [p + "_flat", "split_shape"], [p + "_heads"]),
            N("Transpose", [p + "_heads"], [p + "_t"], perm=[0, 2, 1, 3]),
        ]
    nodes += [
        N("Transpose", ["k_t"], ["k_tt"], perm=[0, 1, 3, 2]),
        N("MatMul", ["q_t", "k_tt"], ["scores_raw"]),
        N("Div", ["scores_raw", "scale"], ["scores"]),
        N("Softmax", ["scores"], ["probs"], axis=-1),
        N("MatMul", ["probs", "v_t"], ["ctx_t"]),
        N("Transpose", ["ctx_t"], ["ctx"], perm=[0, 2, 1, 3]),
        # merge heads with a shape read from a tensor whose shape ONNX left open
        N("Shape", ["ctx"], ["ctx_shape"]),
        N("Slice", ["ctx_shape", "axis0", "two"], ["ctx_bs"]),
        N("Concat", ["ctx_bs", "minus1"], ["merge_shape"], axis=0),
        N("Reshape", ["ctx", "merge_shape"], ["ctx_merged"]),
        N("MatMul", ["ctx_merged", "wo"], ["attn"]),
        N("Add", ["attn", "h"], ["y"]),
    ]
    return nodes, inits


def open_tensors(model):
    inferred = shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    known = {v.name for v in list(inferred.graph.value_info) + list(inferred.graph.output)
             if v.type.tensor_type.HasField("shape")
             and all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)}
    return [o for n in model.graph.node for o in n.output if o not in known]


def main():
    global SEQ, WIDTH, HEADS
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--width", type=int, default=WIDTH)
    ap.add_argument("--heads", type=int, default=HEADS)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--out", help="default: tests/data/open_shapes/model.onnx")
    args = ap.parse_args()
    SEQ, WIDTH, HEADS = args.seq, args.width, args.heads
    model = build(args.layers)
    missing = open_tensors(model)
    # The point of the model: ONNX must leave the attention's shapes open.
    if not ("y" in missing and any(m.endswith("scores") for m in missing)):
        sys.exit(f"ONNX inferred shapes this model is meant to leave open; open: {missing}")
    out = args.out or os.path.join(os.path.dirname(__file__), "..", "tests", "data", "open_shapes", "model.onnx")
    onnx.save(model, out)
    print(f"wrote {out}: {len(model.graph.node)} nodes, {len(missing)} without a static shape from ONNX")


if __name__ == "__main__":
    main()
