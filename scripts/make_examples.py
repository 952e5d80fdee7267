#!/usr/bin/python3
"""Regenerates the tiny committed example models in examples/ (deterministic: fixed seeds).

    scripts/make_examples.py [EXAMPLES_DIR]      (default: examples/ of this repository)

  tiny_cnn          input "input" [1,3,32,32] -> "output" [1,10]: Conv+BN+Relu stem, a
                    residual block (Add), a depthwise conv, MaxPool, AveragePool, a 1x1 conv,
                    GlobalAveragePool, Flatten, Gemm. BatchNormalization nodes are kept.
  tiny_transformer  "hidden_states" [1,16,64] f32 and "attention_mask" [1,16] i64 ->
                    "output" [1,16,64]: one post-LN BERT encoder block (4 heads, FFN 256),
                    the same module as export_models.py's bert_base layers; LayerNorm
                    decomposed by the exporter, exact (erf) GELU, additive mask, Softmax.

Each gets model.onnx and test_data_set_0/{input,output}_N.pb with PyTorch's fp32 outputs,
and is checked with the ONNX checker and static shape inference. Prints op counts for
examples/README.md. Needs /usr/bin/python3 (Debian's, with torch and onnx).
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import onnx_export_util as util  # noqa: E402
from export_models import BertLayer  # noqa: E402

SEED = 1234


class TinyCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.res = nn.Sequential(
            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16))
        self.depthwise = nn.Sequential(
            nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.maxpool = nn.MaxPool2d(2)                                 # 32 -> 16
        self.pointwise = nn.Sequential(nn.Conv2d(16, 32, 1), nn.ReLU())
        # count_include_pad=False: with the default, the exporter adds a zero Pad node.
        self.avgpool = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)  # 16 -> 8
        self.gap = nn.AdaptiveAvgPool2d(1)                             # -> GlobalAveragePool
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(self.res(x) + x)
        x = self.maxpool(self.depthwise(x))
        x = self.avgpool(self.pointwise(x))
        return self.fc(torch.flatten(self.gap(x), 1))


class TinyConfig:
    hidden = 64
    heads = 4
    intermediate = 256
    seq = 16
    eps = 1e-5


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = BertLayer(TinyConfig(), batch=1)

    def forward(self, hidden_states, attention_mask):
        mask_add = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        return self.layer(hidden_states, mask_add)


def build_tiny_cnn():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = TinyCnn()
    util.randomize_batch_norm(model, gen)
    util.calibrate_batch_norm(model, (1, 3, 32, 32), gen)
    x = torch.randn((1, 3, 32, 32), generator=torch.Generator().manual_seed(SEED + 1))
    return model, (x,), ["input"], ["output"], True


def build_tiny_transformer():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = TinyTransformer()
    # Weights N(0, 1/fan_in) keep every activation O(1) at this small width (BERT's 0.02
    # would make the attention near-uniform); LayerNorm scale/shift random around 1 and 0.
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.bias") or name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[1]))
    data = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn((1, TinyConfig.seq, TinyConfig.hidden), generator=data)
    mask = torch.ones(1, TinyConfig.seq, dtype=torch.int64)
    mask[:, TinyConfig.seq - 4:] = 0  # the last 4 positions are padding
    return model, (x, mask), ["hidden_states", "attention_mask"], ["output"], False


EXAMPLES = (("tiny_cnn", build_tiny_cnn, 200 * 1024), ("tiny_transformer", build_tiny_transformer, 300 * 1024))


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(HERE), "examples")
    os.makedirs(outdir, exist_ok=True)
    for name, build, size_limit in EXAMPLES:
        model, args, in_names, out_names, keep_bn = build()
        model.eval()
        expected = util.torch_outputs(model, args)
        onnx_model = util.export_onnx(model, args, in_names, out_names, keep_bn)
        directory = os.path.join(outdir, name)
        util.write_model_dir(directory, onnx_model, [a.numpy() for a in args], expected)
        util.check_model_file(os.path.join(directory, "model.onnx"))
        size = os.path.getsize(os.path.join(directory, "model.onnx"))
        assert size < size_limit, "%s/model.onnx is %d bytes, over %d" % (name, size, size_limit)
        for n, out in zip(out_names, expected):
            assert np.all(np.isfinite(out)), name
            print("%s: %s %s mean %.4f std %.4f max|x| %.4f" % (
                name, n, list(out.shape), out.mean(), out.std(), np.abs(out).max()))
        print("%s: model.onnx %s (%d nodes, %d initializers), folder %s" % (
            name, util.human_bytes(size), len(onnx_model.graph.node), len(onnx_model.graph.initializer),
            util.human_bytes(util.tree_size(directory))))
        print("%s: ops: %s" % (name, util.format_op_counts(util.op_counts(onnx_model))))


if __name__ == "__main__":
    main()
