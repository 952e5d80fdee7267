#!/usr/bin/python3
"""Two tiny ONNX models whose plans seed fuzz_plan (scripts/fuzz.sh, docs/bench/fuzz.md):
small inputs (a plan of one or two modules with a few hundred bytes of weights) mutate far
faster than a whole tiny_cnn plan, and reach the same checks.

  small_gemm: y = Relu(x W + b)            x [1,8], W [8,4]: one module
  small_two:  y = Softmax(x W + b) * s     two modules (the softmax is a reduction)

Usage: make_small_models.py OUT_DIR   (writes OUT_DIR/small_gemm.onnx, OUT_DIR/small_two.onnx)
"""
import os
import sys

import numpy as np
from onnx import TensorProto, checker, helper, numpy_helper


def weight(name, shape, rng):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def save(graph, path):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="make_small_models.py")
    checker.check_model(model)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(15)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    save(helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "small_gemm", [x], [y], [weight("W", [8, 4], rng), weight("b", [4], rng)]),
        os.path.join(out, "small_gemm.onnx"))
    save(helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["h"]),
         helper.make_node("Softmax", ["h"], ["p"], axis=-1),
         helper.make_node("Mul", ["p", "s"], ["y"])],
        "small_two", [x], [y], [weight("W", [8, 4], rng), weight("b", [4], rng), weight("s", [4], rng)]),
        os.path.join(out, "small_two.onnx"))


if __name__ == "__main__":
    main()
