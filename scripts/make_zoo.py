#!/usr/bin/python3
"""Exports dc's model zoo: the kinds of models users bring, small enough for the host
emulator, random seeded weights, no downloads.

    scripts/make_zoo.py OUTDIR [--models a,b,...] [--list]

Writes OUTDIR/<name>/model.onnx and OUTDIR/<name>/test_data_set_0/{input,output}_N.pb
(PyTorch's fp32 outputs). A model whose files exist is skipped. Models (opset):
  resnet18          torchvision classifier, 1x3x64x64 (13)
  lraspp_mbv3       torchvision LR-ASPP MobileNetV3 segmentation, 1x3x64x64 (11)
  fpn_resnet18      torchvision detection backbone: ResNet-18 + FPN, 1x3x64x64 (17)
  unet_convt        encoder-decoder with ConvTranspose2d and skip concats, 1x3x32x32 (13)
  style_transfer    fast-neural-style net: reflection pads, InstanceNorm, residual blocks,
                    nearest upsampling, 1x3x32x32 (11)
  audio_frontend    wav2vec2-style 1-D conv feature encoder (GroupNorm, GELU), 1x1x3200 (13)
  encoder_hf        BERT-style encoder as Hugging Face writes it: input_ids, attention_mask,
                    position_ids inputs, extended additive mask (13)
  decoder_hf        GPT-2-style decoder: causal mask sliced from a tril buffer, attention
                    mask input, position ids, gelu_new (17)
  encoder_hf_op18   encoder_hf rewritten to opset 18 (Reduce axes as inputs)
  decoder_hf_op21   decoder_hf rewritten to opset 21 (Reduce axes as inputs)
Needs /usr/bin/python3 (Debian's torch 1.13, torchvision 0.14, onnx 1.12).
"""
import argparse
import copy
import math
import os
import sys
import time

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_export_util as util  # noqa: E402

SEED = 0


def export(module, args, input_names, output_names, opset):
    util.OPSET = opset
    return util.export_onnx(module, args, input_names, output_names, keep_batch_norm=False)


def calibrated(model, shape):
    gen = torch.Generator().manual_seed(SEED)
    util.randomize_batch_norm(model, gen)
    util.calibrate_batch_norm(model, shape, gen)
    return model.eval()


# --- vision ---------------------------------------------------------------------------

def resnet18():
    torch.manual_seed(SEED)
    m = calibrated(torchvision.models.resnet18(weights=None), (1, 3, 64, 64))
    return m, (torch.randn(1, 3, 64, 64),), ["input"], ["output"], 13


class DictToTuple(nn.Module):
    def __init__(self, inner, keys=None):
        super().__init__()
        self.inner, self.keys = inner, keys

    def forward(self, x):
        out = self.inner(x)
        return tuple(out[k] for k in (self.keys or out.keys()))


def lraspp_mbv3():
    torch.manual_seed(SEED)
    m = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                  num_classes=5)
    m = calibrated(m, (1, 3, 64, 64))
    return DictToTuple(m, ["out"]).eval(), (torch.randn(1, 3, 64, 64),), ["input"], ["out"], 11


def fpn_resnet18():
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
    torch.manual_seed(SEED)
    m = resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=5)
    m = calibrated(m, (1, 3, 64, 64))
    return DictToTuple(m).eval(), (torch.randn(1, 3, 64, 64),), ["input"], ["p2", "p3", "p4", "p5", "pool"], 17


class UNet(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        block = lambda i, o: nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        self.e1, self.e2, self.e3 = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.u2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.d2 = block(4 * c, 2 * c)
        self.u1 = nn.ConvTranspose2d(2 * c, c, 3, stride=2, padding=1, output_padding=1)
        self.d1 = block(2 * c, c)
        self.head = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(F.max_pool2d(a, 2))
        c = self.e3(F.max_pool2d(b, 2))
        d = self.d2(torch.cat([self.u2(c), b], 1))
        return self.head(self.d1(torch.cat([self.u1(d), a], 1)))


def unet_convt():
    torch.manual_seed(SEED)
    m = calibrated(UNet(), (1, 3, 32, 32))
    return m, (torch.randn(1, 3, 32, 32),), ["input"], ["mask"], 13


class ConvLayer(nn.Module):
    def __init__(self, i, o, k, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        self.pad = nn.ReflectionPad2d(k // 2)
        self.conv = nn.Conv2d(i, o, k, stride)

    def forward(self, x):
        if self.upsample:
            x = F.interpolate(x, scale_factor=self.upsample, mode="nearest")
        return self.conv(self.pad(x))


class StyleNet(nn.Module):
    """pytorch/examples fast_neural_style TransformerNet, narrower."""

    def __init__(self, c=8):
        super().__init__()
        norm = lambda n: nn.InstanceNorm2d(n, affine=True)
        self.down = nn.Sequential(ConvLayer(3, c, 9, 1), norm(c), nn.ReLU(),
                                  ConvLayer(c, 2 * c, 3, 2), norm(2 * c), nn.ReLU())
        self.res = nn.ModuleList([nn.Sequential(ConvLayer(2 * c, 2 * c, 3, 1), norm(2 * c), nn.ReLU(),
                                                ConvLayer(2 * c, 2 * c, 3, 1), norm(2 * c)) for _ in range(2)])
        self.up = nn.Sequential(ConvLayer(2 * c, c, 3, 1, upsample=2), norm(c), nn.ReLU(), ConvLayer(c, 3, 9, 1))

    def forward(self, x):
        y = self.down(x)
        for r in self.res:
            y = y + r(y)
        return self.up(y)


def style_transfer():
    torch.manual_seed(SEED)
    m = StyleNet().eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.InstanceNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.normal_(0, 0.1)
    return m, (torch.randn(1, 3, 32, 32),), ["image"], ["stylized"], 11


class AudioFrontEnd(nn.Module):
    """wav2vec2's feature encoder (conv_feature_layers with group norm on the first layer),
    narrower: raw audio [B, 1, T] -> features [B, T', C]."""

    def __init__(self, c=32):
        super().__init__()
        spec = [(c, 10, 5), (c, 3, 2), (c, 3, 2), (c, 2, 2)]
        layers, cin = [], 1
        for i, (cout, k, s) in enumerate(spec):
            layers.append(nn.Conv1d(cin, cout, k, s, bias=False))
            if i == 0:
                layers.append(nn.GroupNorm(cout, cout, affine=True))
            layers.append(nn.GELU())
            cin = cout
        self.conv = nn.Sequential(*layers)
        self.proj = nn.Linear(c, 2 * c)
        self.norm = nn.LayerNorm(c)

    def forward(self, wav):
        x = self.conv(wav).transpose(1, 2)
        return self.proj(self.norm(x))


def audio_frontend():
    torch.manual_seed(SEED)
    return AudioFrontEnd().eval(), (torch.randn(1, 1, 3200),), ["waveform"], ["features"], 13


# --- transformers, the way Hugging Face writes them ------------------------------------

class SelfAttention(nn.Module):
    def __init__(self, d, heads, causal=False, max_pos=64):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.causal = causal
        if causal:  # GPT-2: a registered lower-triangular buffer, sliced to the sequence
            self.register_buffer("bias", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool))
                                 .view(1, 1, max_pos, max_pos), persistent=False)

    def split(self, x):
        b, t, _ = x.size()
        return x.view(b, t, self.h, self.dh).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh)
        if self.causal:
            t = x.size(1)
            causal = self.bias[:, :, :t, :t]
            scores = torch.where(causal, scores, torch.tensor(torch.finfo(scores.dtype).min))
        scores = scores + mask
        probs = F.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return self.out(ctx.view(ctx.size(0), ctx.size(1), -1))


class Block(nn.Module):
    def __init__(self, d, heads, causal):
        super().__init__()
        self.attn, self.causal = SelfAttention(d, heads, causal), causal
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def gelu(self, x):
        if self.causal:  # GPT-2's gelu_new
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
        return F.gelu(x)

    def forward(self, x, mask):
        if self.causal:  # pre-norm (GPT-2)
            x = x + self.attn(self.ln1(x), mask)
            return x + self.fc2(self.gelu(self.fc1(self.ln2(x))))
        x = self.ln1(x + self.attn(x, mask))  # post-norm (BERT)
        return self.ln2(x + self.fc2(self.gelu(self.fc1(x))))


class HFModel(nn.Module):
    def __init__(self, causal, vocab=100, d=32, heads=4, layers=2, max_pos=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_pos, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList([Block(d, heads, causal) for _ in range(layers)])
        self.causal = causal

    def forward(self, input_ids, attention_mask, position_ids):
        x = self.tok(input_ids) + self.pos(position_ids)
        if not self.causal:
            x = self.ln(x)
        # get_extended_attention_mask: [B, T] -> [B, 1, 1, T], 0 where attended, dtype-min not
        ext = attention_mask[:, None, None, :].to(x.dtype)
        ext = (1.0 - ext) * torch.finfo(x.dtype).min
        for b in self.blocks:
            x = b(x, ext)
        return self.ln(x) if self.causal else x


def hf_inputs(t=16, vocab=100):
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, vocab, (1, t), generator=g)
    mask = torch.ones(1, t, dtype=torch.int64)
    mask[0, t - 3:] = 0  # padding at the end
    pos = torch.arange(t, dtype=torch.int64).unsqueeze(0)
    return ids, mask, pos


def encoder_hf():
    torch.manual_seed(SEED)
    return (HFModel(causal=False).eval(), hf_inputs(), ["input_ids", "attention_mask", "position_ids"],
            ["last_hidden_state"], 13)


def decoder_hf():
    torch.manual_seed(SEED)
    return (HFModel(causal=True).eval(), hf_inputs(), ["input_ids", "attention_mask", "position_ids"],
            ["hidden_states"], 17)


# --- opset 18+ by rewriting ------------------------------------------------------------

REDUCE_18 = {"ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
             "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}


def rewrite_opset(model, opset):
    """The opset-18 form of a model exported at 13..17: Reduce axes attributes become
    constant inputs (the only change torch's exports of these models meet)."""
    m = copy.deepcopy(model)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    m.ir_version = max(m.ir_version, 8 if opset <= 18 else 10)
    for i, n in enumerate(m.graph.node):
        if n.op_type in REDUCE_18:
            axes = [a for a in n.attribute if a.name == "axes"]
            if axes:
                name = f"{n.name or n.op_type}_{i}_axes"
                m.graph.initializer.append(numpy_helper.from_array(np.array(axes[0].ints, np.int64), name))
                n.input.append(name)
                n.attribute.remove(axes[0])
    return m


MODELS = {
    "resnet18": resnet18, "lraspp_mbv3": lraspp_mbv3, "fpn_resnet18": fpn_resnet18,
    "unet_convt": unet_convt, "style_transfer": style_transfer, "audio_frontend": audio_frontend,
    "encoder_hf": encoder_hf, "decoder_hf": decoder_hf,
}
REWRITTEN = {"encoder_hf_op18": ("encoder_hf", 18), "decoder_hf_op21": ("decoder_hf", 21)}
ALL = list(MODELS) + list(REWRITTEN)


def make(name, outdir):
    d = os.path.join(outdir, name)
    if util.model_dir_complete(d):
        return "exists"
    src, opset = REWRITTEN.get(name, (name, None))
    module, args, ins, outs, export_opset = MODELS[src]()
    model = export(module, args, ins, outs, export_opset)
    if opset is not None:
        model = rewrite_opset(model, opset)
    util.write_model_dir(d, model, [a.numpy() for a in args], util.torch_outputs(module, args))
    return f"opset {opset or export_opset}: {util.format_op_counts(util.op_counts(model))}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--models", default=",".join(ALL))
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    a = ap.parse_args()
    if a.list:
        print("\n".join(ALL))
        return
    names = [n for n in a.models.split(",") if n]
    bad = [n for n in names if n not in ALL]
    if bad:
        raise SystemExit(f"unknown zoo model(s) {bad}; known: {', '.join(ALL)}")
    torch.set_num_threads(1)
    for n in names:
        t0 = time.time()
        print(f"{n}: {make(n, a.outdir)} ({time.time() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
