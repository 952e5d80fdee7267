#!/usr/bin/python3
"""Exports the models dc is tested and demonstrated on, each with one test data set.

    scripts/export_models.py OUTDIR [--models resnet50,mobilenetv2,bert_base] [--batch 1]
                                    [--bert-pooler] [--force]

Writes OUTDIR/<name>/model.onnx and OUTDIR/<name>/test_data_set_0/{input,output}_N.pb
(the layout of ONNX's own test cases) for
  resnet50     torchvision ResNet-50, input "input" [B,3,224,224] -> "output" [B,1000]
  resnet101    torchvision ResNet-101, the same (only when asked for: --models resnet101)
  mobilenetv2  torchvision MobileNetV2, same input and output (also OUTDIR/mobilenet_v2, a link)
  bert_base    a BERT-base encoder written with torch.nn (no transformers package):
               inputs "input_ids", "attention_mask" (int64 [B,128]) -> "last_hidden_state"
               [B,128,768] (and "pooler_output" [B,768] with --bert-pooler)
Opset 13, fixed shapes, constant folding on. Weights are random (no download) but seeded,
and chosen so that activations stay O(1): see onnx_export_util.calibrate_batch_norm and
init_bert.
Expected outputs are PyTorch's, in fp32. A model whose files exist is skipped unless
--force. Needs /usr/bin/python3 (Debian's, with torch, torchvision and onnx).
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_export_util as util  # noqa: E402

SEED = 0
ALL_MODELS = ("resnet50", "mobilenetv2", "bert_base")
# Exported only when asked for (--models resnet101): the tuning DB's reuse test.
EXTRA_MODELS = ("resnet101",)
ALIASES = {"bert": "bert_base", "mobilenet_v2": "mobilenetv2"}
# Second names of an exported directory: OUTDIR/<link> points at OUTDIR/<name>. Issue 30 and
# docs/opencl.md spell MobileNetV2's directory models/mobilenet_v2; both spellings work.
LINKS = {"mobilenetv2": "mobilenet_v2"}


# ---------------------------------------------------------------------------------------
# CNNs: torchvision architectures with seeded random weights.

def build_cnn(name, batch):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    if name == "resnet50":
        model = torchvision.models.resnet50(weights=None)
    elif name == "resnet101":
        model = torchvision.models.resnet101(weights=None)
    elif name == "mobilenetv2":
        model = torchvision.models.mobilenet_v2(weights=None)
    else:
        raise ValueError(name)
    shape = (batch, 3, 224, 224)
    util.randomize_batch_norm(model, gen)
    util.calibrate_batch_norm(model, shape, gen)
    image = torch.randn(shape, generator=torch.Generator().manual_seed(SEED + 1))
    return model, (image,), ["input"], ["output"], True


# ---------------------------------------------------------------------------------------
# BERT-base encoder from torch.nn. Post-LN as in BERT; attention written with explicit
# Linear/matmul/softmax, because nn.MultiheadAttention exports awkwardly.

class BertConfig:
    vocab = 30522
    hidden = 768
    layers = 12
    heads = 12
    intermediate = 3072
    max_positions = 512
    type_vocab = 2
    seq = 128
    eps = 1e-12


class BertEmbeddings(nn.Module):
    def __init__(self, c, batch):
        super().__init__()
        self.word = nn.Embedding(c.vocab, c.hidden)
        self.position = nn.Embedding(c.max_positions, c.hidden)
        self.token_type = nn.Embedding(c.type_vocab, c.hidden)
        self.norm = nn.LayerNorm(c.hidden, eps=c.eps)
        # Constants of the graph: the exporter folds their lookups into one [1,S,H] tensor.
        self.register_buffer("position_ids", torch.arange(c.seq).unsqueeze(0))
        self.register_buffer("token_type_ids", torch.zeros(1, c.seq, dtype=torch.int64))

    def forward(self, input_ids):
        x = self.word(input_ids) + self.position(self.position_ids) + self.token_type(self.token_type_ids)
        return self.norm(x)


class BertLayer(nn.Module):
    def __init__(self, c, batch):
        super().__init__()
        self.b, self.s, self.h, self.nh = batch, c.seq, c.hidden, c.heads
        self.d = c.hidden // c.heads
        self.query = nn.Linear(c.hidden, c.hidden)
        self.key = nn.Linear(c.hidden, c.hidden)
        self.value = nn.Linear(c.hidden, c.hidden)
        self.attn_out = nn.Linear(c.hidden, c.hidden)
        self.attn_norm = nn.LayerNorm(c.hidden, eps=c.eps)
        self.ffn_in = nn.Linear(c.hidden, c.intermediate)
        self.gelu = nn.GELU()  # exact (erf) GELU, as in BERT
        self.ffn_out = nn.Linear(c.intermediate, c.hidden)
        self.ffn_norm = nn.LayerNorm(c.hidden, eps=c.eps)

    def heads(self, x):
        # [B,S,H] -> [B,nh,S,d]; Python-int shapes keep Shape/Gather out of the graph.
        return x.view(self.b, self.s, self.nh, self.d).transpose(1, 2)

    def forward(self, x, mask_add):
        q = self.heads(self.query(x))
        k = self.heads(self.key(x))
        v = self.heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d) + mask_add
        probs = torch.softmax(scores, dim=-1)
        context = torch.matmul(probs, v).transpose(1, 2).reshape(self.b, self.s, self.h)
        x = self.attn_norm(self.attn_out(context) + x)
        return self.ffn_norm(self.ffn_out(self.gelu(self.ffn_in(x))) + x)


class BertEncoder(nn.Module):
    def __init__(self, c, batch, pooler):
        super().__init__()
        self.embeddings = BertEmbeddings(c, batch)
        self.layers = nn.ModuleList([BertLayer(c, batch) for _ in range(c.layers)])
        self.pooler = nn.Linear(c.hidden, c.hidden) if pooler else None

    def forward(self, input_ids, attention_mask):
        # Additive mask over the keys, broadcast over heads and queries: 0 keeps, -10000 drops.
        mask_add = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x, mask_add)
        if self.pooler is None:
            return x
        return x, torch.tanh(self.pooler(x[:, 0]))


def init_bert(model, gen):
    """BERT's N(0, 0.02) init, but with biases and LayerNorm scale/shift random too (around
    0 and 1), so that no parameter is a trivial constant. Query and key weights get 0.05:
    with 0.02 the attention scores are all near 0 and softmax is near-uniform; with 0.05
    their spread is about 2, closer to a trained model's peaked attention."""
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif (".query." in name or ".key." in name) and name.endswith("weight"):
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))


def build_bert(batch, pooler):
    c = BertConfig()
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = BertEncoder(c, batch, pooler)
    init_bert(model, gen)
    data = torch.Generator().manual_seed(SEED + 1)
    input_ids = torch.randint(0, c.vocab, (batch, c.seq), generator=data, dtype=torch.int64)
    attention_mask = torch.ones(batch, c.seq, dtype=torch.int64)
    attention_mask[:, c.seq - 20:] = 0  # the last 20 positions are padding
    outputs = ["last_hidden_state"] + (["pooler_output"] if pooler else [])
    return model, (input_ids, attention_mask), ["input_ids", "attention_mask"], outputs, False


# ---------------------------------------------------------------------------------------

def link_second_name(name, outdir):
    """OUTDIR/<second name> -> <name> (relative, so the folder can move); an existing
    directory or file of that name is left alone."""
    second = LINKS.get(name)
    if second is None:
        return
    link = os.path.join(outdir, second)
    if os.path.islink(link) and os.readlink(link) == name:
        return
    if os.path.lexists(link):
        print("%-12s %s exists and is not a link to %s: left alone" % (name, link, name), flush=True)
        return
    os.symlink(name, link)
    print("%-12s also reachable as %s" % (name, link), flush=True)


def export_one(name, outdir, batch, bert_pooler, force):
    directory = os.path.join(outdir, name)
    link_second_name(name, outdir)
    if util.model_dir_complete(directory) and not force:
        print("%-12s exists, skipped (--force to redo): %s" % (name, directory), flush=True)
        return
    start = time.time()
    print("%-12s building ..." % name, flush=True)
    if name == "bert_base":
        model, args, in_names, out_names, keep_bn = build_bert(batch, bert_pooler)
    else:
        model, args, in_names, out_names, keep_bn = build_cnn(name, batch)
    model.eval()
    expected = util.torch_outputs(model, args)
    for n, out in zip(out_names, expected):
        if not np.all(np.isfinite(out)):
            raise SystemExit("%s: output %s is not finite" % (name, n))
        print("%-12s   %s %s: mean %.4f std %.4f max|x| %.4f" % (
            name, n, list(out.shape), out.mean(), out.std(), np.abs(out).max()), flush=True)
    t_build = time.time() - start

    print("%-12s exporting ONNX opset %d ..." % (name, util.OPSET), flush=True)
    onnx_model = util.export_onnx(model, args, in_names, out_names, keep_bn)
    t_export = time.time() - start - t_build
    util.write_model_dir(directory, onnx_model, [a.numpy() for a in args], expected)

    path = os.path.join(directory, "model.onnx")
    util.check_model_file(path)
    t_total = time.time() - start
    counts = util.op_counts(onnx_model)
    print("%-12s model.onnx %s, %d nodes, %d initializers; build+calibrate %.1f s, export %.1f s,"
          " total %.1f s" % (name, util.human_bytes(os.path.getsize(path)), len(onnx_model.graph.node),
                             len(onnx_model.graph.initializer), t_build, t_export, t_total), flush=True)
    print("%-12s   ops: %s" % (name, util.format_op_counts(counts)), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir")
    parser.add_argument("--models", default=",".join(ALL_MODELS),
                        help="comma-separated subset of %s (bert = bert_base, mobilenet_v2 = mobilenetv2)" % ", ".join(ALL_MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--bert-pooler", action="store_true",
                        help="also output BERT's pooled [CLS] vector (Gather/Gemm/Tanh)")
    parser.add_argument("--force", action="store_true", help="re-export models whose files exist")
    a = parser.parse_args()
    if a.batch < 1:
        parser.error("--batch must be >= 1")
    names = [ALIASES.get(m.strip(), m.strip()) for m in a.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in ALL_MODELS + EXTRA_MODELS]
    if unknown:
        parser.error("unknown model(s) %s; known: %s" % (", ".join(unknown), ", ".join(ALL_MODELS + EXTRA_MODELS)))
    os.makedirs(a.outdir, exist_ok=True)
    start = time.time()
    for name in names:
        export_one(name, a.outdir, a.batch, a.bert_pooler, a.force)
    print("done in %.1f s: %s" % (time.time() - start, os.path.abspath(a.outdir)))


if __name__ == "__main__":
    main()
