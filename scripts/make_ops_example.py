#!/usr/bin/python3
"""Writes examples/tiny_ops: one small graph through the ops of issue 14 (activations, math,
InstanceNormalization, LRN, DepthToSpace, SpaceToDepth, Trilu, LpNormalization), with
inputs from a fixed seed and the expected output computed independently by PyTorch
(conv2d, selu, instance_norm, elu, local_response_norm, pixel_shuffle, tril, softplus,
normalize) in float64.

usage: scripts/make_ops_example.py [OUT_DIR]   (default examples/tiny_ops)
"""
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto as T, helper as h, numpy_helper as nh

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples", "tiny_ops")
rng = np.random.default_rng(0)
w = {"s": rng.uniform(0.5, 1.5, 8), "b": rng.uniform(-.5, .5, 8), "slope": rng.uniform(0.1, 0.3, (2, 1, 1)),
     "w": rng.uniform(-.3, .3, (8, 8, 3, 3))}
w = {k: v.astype(np.float32) for k, v in w.items()}
nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         h.make_node("Selu", ["c"], ["c1"]),
         h.make_node("InstanceNormalization", ["c1", "s", "b"], ["i"], epsilon=1e-4),
         h.make_node("Elu", ["i"], ["e"], alpha=0.7),
         h.make_node("LRN", ["e"], ["l"], size=3, alpha=0.01, beta=0.7, bias=1.5),
         h.make_node("DepthToSpace", ["l"], ["d"], blocksize=2, mode="CRD"),
         h.make_node("PRelu", ["d", "slope"], ["p"]),
         h.make_node("Trilu", ["p"], ["t"], upper=0),
         h.make_node("Softplus", ["t"], ["m"]),
         h.make_node("SpaceToDepth", ["m"], ["sd"], blocksize=2),
         h.make_node("LpNormalization", ["sd"], ["lp"], axis=1, p=2),
         h.make_node("Round", ["lp"], ["r0"]),
         h.make_node("Add", ["lp", "r0"], ["y0"]),
         h.make_node("Sin", ["y0"], ["y"])]
g = h.make_graph(nodes, "tiny_ops", [h.make_tensor_value_info("x", T.FLOAT, [1, 8, 6, 6])],
                 [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 6, 6])],
                 [nh.from_array(v, k) for k, v in w.items()])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 14)], producer_name="make_ops_example.py")
m.ir_version = 8
onnx.checker.check_model(m)
x = rng.uniform(-2, 2, (1, 8, 6, 6)).astype(np.float32)

# The same computation in PyTorch, float64.
t = {k: torch.tensor(v).double() for k, v in w.items()}
v = F.selu(F.conv2d(torch.tensor(x).double(), t["w"], padding=1))
v = F.elu(F.instance_norm(v, weight=t["s"], bias=t["b"], eps=1e-4), alpha=0.7)
v = F.pixel_shuffle(F.local_response_norm(v, size=3, alpha=0.01, beta=0.7, k=1.5), 2)  # = CRD
v = F.softplus(torch.tril(torch.where(v < 0, t["slope"] * v, v)))
n, c, hh, ww = v.shape
v = v.reshape(n, c, hh // 2, 2, ww // 2, 2).permute(0, 3, 5, 1, 2, 4).reshape(n, c * 4, hh // 2, ww // 2)
v = v / torch.sqrt((v * v).sum(1, keepdim=True))
y = torch.sin(v + torch.round(v)).float().numpy()

os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
onnx.save(m, os.path.join(out, "model.onnx"))
for name, arr, f in [("x", x, "input_0.pb"), ("y", y, "output_0.pb")]:
    with open(os.path.join(out, "test_data_set_0", f), "wb") as fh:
        fh.write(nh.from_array(arr, name).SerializeToString())
print(f"wrote {out}: output mean |y| {float(np.abs(y).mean()):.6f}")
