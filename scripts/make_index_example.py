#!/usr/bin/python3
"""Writes examples/tiny_index: one small graph through the index and search ops of issue 14
(Einsum in two transformer forms, TopK, OneHot, ScatterElements, GatherND, ScatterND with
duplicate indices and reduction add), with inputs from a fixed seed and the expected
outputs computed independently by PyTorch (einsum, topk, one_hot, scatter, advanced
indexing, index_put_ with accumulate) in float64.

usage: scripts/make_index_example.py [OUT_DIR]   (default examples/tiny_index)
"""
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto as T, helper as h, numpy_helper as nh

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples", "tiny_index")
rng = np.random.default_rng(1)
W = rng.uniform(-.5, .5, (8, 6)).astype(np.float32)
gidx = np.array([[0, 1], [1, 3], [0, -4]], dtype=np.int64)
sidx = np.array([[1, 2], [0, 0], [1, 2]], dtype=np.int64)  # (1, 2) twice: added in order
consts = {"W": W, "k": np.array([2], dtype=np.int64), "depth": np.array(4, dtype=np.int64),
          "onoff": np.array([0, 1], dtype=np.float32), "two": np.array(2, dtype=np.float32),
          "axes2": np.array([2], dtype=np.int64), "gidx": gidx, "sidx": sidx}
nodes = [h.make_node("Einsum", ["x", "W"], ["q"], equation="bnd,dh->bnh"),
         h.make_node("GatherND", ["q", "gidx"], ["g"]),
         h.make_node("ScatterND", ["q", "sidx", "g"], ["y1"], reduction="add"),
         h.make_node("Einsum", ["q", "q"], ["s"], equation="bid,bjd->bij"),
         h.make_node("TopK", ["s", "k"], ["tv", "ti"]),
         h.make_node("OneHot", ["ti", "depth", "onoff"], ["oh"]),
         h.make_node("ReduceSum", ["oh", "axes2"], ["mask"], keepdims=0),
         h.make_node("Mul", ["tv", "two"], ["tv2"]),
         h.make_node("ScatterElements", ["s", "ti", "tv2"], ["sc"], axis=2),
         h.make_node("Add", ["sc", "mask"], ["y0"])]
g = h.make_graph(nodes, "tiny_index", [h.make_tensor_value_info("x", T.FLOAT, [2, 4, 8])],
                 [h.make_tensor_value_info("y0", T.FLOAT, [2, 4, 4]),
                  h.make_tensor_value_info("y1", T.FLOAT, [2, 4, 6]),
                  h.make_tensor_value_info("ti", T.INT64, [2, 4, 2])],
                 [nh.from_array(v, k) for k, v in consts.items()])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 16)], producer_name="make_index_example.py")
m.ir_version = 8
onnx.checker.check_model(m)
x = rng.uniform(-1, 1, (2, 4, 8)).astype(np.float32)

# The same computation in PyTorch, float64.
q = torch.einsum("bnd,dh->bnh", torch.tensor(x).double(), torch.tensor(W).double())
s = torch.einsum("bid,bjd->bij", q, q)
tv, ti = torch.topk(s, 2, dim=-1)
mask = F.one_hot(ti, 4).double().sum(2)
y0 = s.scatter(2, ti, tv * 2) + mask
gi = torch.tensor(gidx) % torch.tensor([2, 4])
gv = q[gi[:, 0], gi[:, 1]]
y1 = q.clone()
y1.index_put_((torch.tensor(sidx[:, 0]), torch.tensor(sidx[:, 1])), gv, accumulate=True)

os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
onnx.save(m, os.path.join(out, "model.onnx"))
outs = [("x", x, "input_0.pb"), ("y0", y0.float().numpy(), "output_0.pb"),
        ("y1", y1.float().numpy(), "output_1.pb"), ("ti", ti.numpy().astype(np.int64), "output_2.pb")]
for name, arr, f in outs:
    with open(os.path.join(out, "test_data_set_0", f), "wb") as fh:
        fh.write(nh.from_array(arr, name).SerializeToString())
print(f"wrote {out}: mean |y0| {float(y0.abs().mean()):.6f}, mean |y1| {float(y1.abs().mean()):.6f}")
