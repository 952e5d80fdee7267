#!/usr/bin/python3
"""Writes models at the opsets ONNX 1.12 (Debian's) cannot check by itself, each in the old
ONNX zoo layout (model.onnx + test_data_set_0/input_N.pb, output_N.pb), with expected
outputs computed here in numpy from the ops' definitions:

    scripts/make_opset_models.py OUTDIR

  opset1_cnn   opset 1 as the old zoo wrote it (initializers listed as graph inputs,
               BatchNormalization consumed_inputs/is_test, Reshape's shape attribute,
               Gemm/Add broadcast=1 with axis): imported through ONNX's version converter
  opset18      Reduce axes as inputs, Split num_outputs with an uneven last chunk
  opset21      the same at opset 21, plus Gelu (opset 20)
Needs /usr/bin/python3 (Debian's, with onnx and numpy); deterministic, well under a second.
"""
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def save_case(outdir, name, model, inputs, outputs):
    d = os.path.join(outdir, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for kind, values in (("input", inputs), ("output", outputs)):
        for i, (tname, v) in enumerate(values):
            with open(os.path.join(data, f"{kind}_{i}.pb"), "wb") as f:
                f.write(nh.from_array(v, tname).SerializeToString())


def vi(name, arr_or_shape):
    shape = list(arr_or_shape.shape) if hasattr(arr_or_shape, "shape") else arr_or_shape
    return h.make_tensor_value_info(name, T.FLOAT, shape)


def conv2d(x, w, b, pad):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, hh, ww = x.shape
    k = w.shape[2]
    out = np.zeros((n, w.shape[0], hh - k + 1, ww - k + 1), np.float64)
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            patch = x[:, :, i:i + k, j:j + k]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return out + b.reshape(1, -1, 1, 1)


def opset1_cnn(rng):
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    scale = (rng.random(4) + 0.5).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    mean = rng.standard_normal(4).astype(np.float32)
    var = (rng.random(4) + 0.5).astype(np.float32)
    chan = rng.standard_normal(4).astype(np.float32)  # Add broadcast=1 axis=1: a per-channel term
    fw = (rng.standard_normal((10, 64)) * 0.2).astype(np.float32)
    fb = rng.standard_normal(10).astype(np.float32)
    inits = dict(W=w, B=b, s=scale, b=bias, m=mean, v=var, chan=chan, FW=fw, FB=fb)
    nodes = [
        h.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        h.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], is_test=1,
                    consumed_inputs=[0, 0, 0, 1, 1], epsilon=1e-5),
        h.make_node("Add", ["bn", "chan"], ["bc"], broadcast=1, axis=1),
        h.make_node("Relu", ["bc"], ["r"]),
        h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Reshape", ["p"], ["f"], shape=[1, 64]),
        h.make_node("Gemm", ["f", "FW", "FB"], ["g"], transB=1, broadcast=1),
        h.make_node("Softmax", ["g"], ["y"]),
    ]
    graph = h.make_graph(nodes, "opset1_cnn", [vi("x", x)] + [vi(k, a) for k, a in inits.items()],
                         [vi("y", [1, 10])], [nh.from_array(a, k) for k, a in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 1)])
    model.ir_version = 3

    c = conv2d(x.astype(np.float64), w, b, 1)
    bn = (c - mean.reshape(1, -1, 1, 1)) / np.sqrt(var.reshape(1, -1, 1, 1) + 1e-5)
    bn = bn * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)
    r = np.maximum(bn + chan.reshape(1, -1, 1, 1), 0)
    p = r.reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5))
    g = p.reshape(1, 64) @ fw.T.astype(np.float64) + fb
    e = np.exp(g - g.max(axis=1, keepdims=True))
    y = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return model, [("x", x)], [("y", y)]


def newer(rng, opset):
    x = rng.standard_normal((2, 7, 5)).astype(np.float32)
    const = lambda name, v: h.make_node("Constant", [], [name], value=nh.from_array(np.array(v, np.int64), name))
    nodes = [
        const("ax2", [2]),
        const("ax1", [1]),
        h.make_node("ReduceMean", ["x", "ax2"], ["mean"], keepdims=1),
        h.make_node("Sub", ["x", "mean"], ["centred"]),
        h.make_node("Split", ["centred"], ["s0", "s1", "s2", "s3"], axis=1, num_outputs=4),
        h.make_node("ReduceMax", ["s0", "ax1"], ["m0"], keepdims=0),
        h.make_node("Add", ["s2", "s1"], ["y1"]),
    ]
    centred = x - x.mean(axis=2, keepdims=True)
    s = [centred[:, 0:2], centred[:, 2:4], centred[:, 4:6], centred[:, 6:7]]  # ceil(7/4) = 2
    m0 = s[0].max(axis=1)
    outputs = [("y1", s[2] + s[1]), ("s3", s[3])]
    if opset >= 20:
        nodes.append(h.make_node("Gelu", ["m0"], ["y0"]))
        erf = np.vectorize(math.erf)
        outputs.insert(0, ("y0", (0.5 * m0 * (1 + erf(m0 / math.sqrt(2)))).astype(np.float32)))
    else:
        nodes.append(h.make_node("Relu", ["m0"], ["y0"]))
        outputs.insert(0, ("y0", np.maximum(m0, 0)))
    graph = h.make_graph(nodes, f"opset{opset}", [vi("x", x)], [vi(n, v) for n, v in outputs])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 18 else 10  # what onnx 1.16 writes for opset 21
    return model, [("x", x)], [(n, v.astype(np.float32)) for n, v in outputs]


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    outdir = sys.argv[1]
    rng = np.random.default_rng(1)
    save_case(outdir, "opset1_cnn", *opset1_cnn(rng))
    onnx.checker.check_model(onnx.load(os.path.join(outdir, "opset1_cnn", "model.onnx")))
    save_case(outdir, "opset18", *newer(rng, 18))
    save_case(outdir, "opset21", *newer(rng, 21))
    print(f"wrote opset1_cnn, opset18, opset21 to {outdir}")


if __name__ == "__main__":
    main()
