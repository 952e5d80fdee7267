"""Helpers shared by export_models.py and make_examples.py: export a torch module to a
fixed-shape ONNX file, write its test data set, and check that the file is one dc can
import (ONNX checker passes, shape inference gives every tensor a static shape).

Needs Debian's interpreter (/usr/bin/python3), which has torch, onnx and numpy.
"""
import collections
import inspect
import io
import os
import shutil
import warnings

import numpy as np
import onnx
import onnx.shape_inference
import torch
import torch.nn as nn
from onnx import numpy_helper

OPSET = 13


def export_onnx(module, args, input_names, output_names, keep_batch_norm):
    """Exports `module` (in eval mode) at OPSET with fixed shapes; returns the ModelProto.

    keep_batch_norm: export with TrainingMode.PRESERVE, which for a module in eval mode
    writes inference-mode BatchNormalization nodes instead of folding them into the
    preceding Conv (what TrainingMode.EVAL does); dc's own BN folding pass then has work.
    """
    module.eval()
    mode = torch.onnx.TrainingMode.PRESERVE if keep_batch_norm else torch.onnx.TrainingMode.EVAL
    # torch >= 2.9 (the GPU machines' 2.11) exports through torch.export by default, at opset
    # 18 with other graphs (ReduceMean for the pooling, no BatchNormalization kept): the
    # TorchScript exporter keeps the models the same as Debian's torch 1.13 writes them.
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # PRESERVE warns that constant folding may change training parameters; the module
        # is in eval mode, so there are none to change.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, args, buffer,
            opset_version=OPSET,
            do_constant_folding=True,
            training=mode,
            input_names=list(input_names),
            output_names=list(output_names),
            **legacy,
        )
    return onnx.load_from_string(buffer.getvalue())


def randomize_batch_norm(model, gen):
    """Scale and shift of every BN layer random around 1 and 0, so that folding them into
    the convolution changes the weights for real."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.copy_(torch.empty_like(m.weight).uniform_(0.5, 1.5, generator=gen))
                m.bias.copy_(torch.empty_like(m.bias).normal_(0.0, 0.1, generator=gen))


def calibrate_batch_norm(model, input_shape, gen, batches=3, batch_size=4):
    """Sets every BN layer's running mean and variance to the statistics of its input on
    random N(0,1) images, as training would. With torchvision's Kaiming init and running
    stats of 0/1, ResNet-50's activations grow block after block (logits with std ~25);
    with calibrated stats each BN output is about N(bias, weight^2) and the logits stay O(1),
    while the running stats are far from 0/1, so that BN folding has real work."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn((batch_size,) + tuple(input_shape[1:]), generator=gen))
    for m in bns:
        m.momentum = 0.1  # back to the default: the export writes it as an attribute
    model.eval()


def torch_outputs(module, args):
    """The module's fp32 outputs for `args` as a list of numpy arrays."""
    with torch.no_grad():
        out = module(*args)
    if isinstance(out, torch.Tensor):
        out = (out,)
    return [t.detach().cpu().numpy() for t in out]


def write_model_dir(directory, model, inputs, outputs):
    """Writes directory/model.onnx and directory/test_data_set_0/{input,output}_N.pb.

    inputs/outputs: lists of numpy arrays in graph input/output order; each .pb carries the
    name of the graph tensor it feeds or checks. Writes into a sibling temp folder and
    renames it into place, so an interrupted run never leaves a half model behind.
    """
    graph_inputs = [i.name for i in model.graph.input
                    if i.name not in {t.name for t in model.graph.initializer}]
    graph_outputs = [o.name for o in model.graph.output]
    assert len(graph_inputs) == len(inputs), (graph_inputs, len(inputs))
    assert len(graph_outputs) == len(outputs), (graph_outputs, len(outputs))

    tmp = directory.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "test_data_set_0"))
    onnx.save_model(model, os.path.join(tmp, "model.onnx"))
    for kind, names, arrays in (("input", graph_inputs, inputs), ("output", graph_outputs, outputs)):
        for n, (name, array) in enumerate(zip(names, arrays)):
            tensor = numpy_helper.from_array(np.ascontiguousarray(array), name)
            path = os.path.join(tmp, "test_data_set_0", "%s_%d.pb" % (kind, n))
            with open(path, "wb") as f:
                f.write(tensor.SerializeToString())
    shutil.rmtree(directory, ignore_errors=True)
    os.rename(tmp, directory)


def model_dir_complete(directory):
    """True when a previous run left model.onnx and at least one input and output .pb."""
    data = os.path.join(directory, "test_data_set_0")
    return (os.path.isfile(os.path.join(directory, "model.onnx"))
            and os.path.isfile(os.path.join(data, "input_0.pb"))
            and os.path.isfile(os.path.join(data, "output_0.pb")))


def check_model_file(path):
    """Runs the ONNX checker (full, with shape inference) on the file and checks that
    shape inference gives every node output a fully static shape. Returns the inferred
    ModelProto; raises AssertionError naming the first tensors without one."""
    onnx.checker.check_model(path, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(path), check_type=True, strict_mode=True)
    g = inferred.graph
    known = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        known[vi.name] = vi
    for t in g.initializer:
        known.setdefault(t.name, True)
    missing = []
    for node in g.node:
        for name in node.output:
            if not name:
                continue
            vi = known.get(name)
            if vi is True:
                continue
            if vi is None or not _static(vi):
                missing.append("%s (output of %s %s)" % (name, node.op_type, node.name))
    for vi in g.input:
        if not _static(vi):
            missing.append("graph input " + vi.name)
    assert not missing, "tensors without a static inferred shape: " + ", ".join(missing[:10])
    return inferred


def _static(value_info):
    t = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type") or not t.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in t.shape.dim)


def op_counts(model):
    """Counter of op types over the main graph, most frequent first."""
    return collections.Counter(n.op_type for n in model.graph.node)


def format_op_counts(counts):
    return ", ".join("%s %d" % (op, c) for op, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def tree_size(directory):
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def human_bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0
