#!/usr/bin/env python3
"""Exports small Hugging Face transformers models with torch 2.x's default ONNX exporter
(issue 26: whole models as people export them today), for tests/data/hf_torch2.

Run with the venv of scripts/make_torch2_venv.sh (pinned torch, transformers, onnx,
onnxscript from PyPI):

    ~/.cache/dc/torch2-venv/bin/python scripts/export_hf_models.py tests/data/hf_torch2 [MODEL...]

Models (the base model classes, random init from a fixed seed plus seeded noise on every
parameter so that no bias is zero and no norm weight is one, eval mode, no KV cache):
  bert     BertModel (no pooler): post-LN encoder, padding mask from `attention_mask`
  gpt2     GPT2Model: merged c_attn, causal mask, tanh GELU
  llama    LlamaModel: grouped-query attention (4 heads, 2 KV heads), RoPE, RMSNorm, SwiGLU
  mistral  MistralModel: as llama with sliding_window 6 < sequence 16
  t5       T5Model: relative position bias, RMSNorm-style T5 LayerNorm, encoder and decoder
           (the decoder with self- and cross-attention); `decoder_input_ids` of length 8
  bart     BartModel: learned positions, post-LN, encoder and decoder with cross-attention

With --dynamic the sequence axes are dynamic (torch.export.Dim, files MODEL_dyn1.onnx,
MODEL_dyn2.onnx): the graph computes masks, positions and views from Shape nodes, and dc
plans it with --shape input_ids=1,16 (and the other inputs likewise).

Each MODEL is written at 1 and 2 layers (T5, BART: 1+1 and 2+2 encoder+decoder layers), so
that a plan's per-layer figures are the difference, as MODEL1.onnx, MODEL2.onnx, and the test
data of the 2-layer model in MODEL2-data/ (input_K.pb in the graph's input order, output_0.pb
from torch's forward in fp32). Widths: hidden 64, 4 heads of 16, sequence 16, batch 1,
vocabulary 256. `attention_mask` hides the last 3 positions (right padding, so that every
causal query row still sees a key).

The export call is torch.onnx.export(module, args, path, input_names=..., output_names=...,
external_data=False) with every other argument at its default (torch >= 2.9: dynamo=True,
the onnxscript optimizer on, the default opset); `external_data=False` only keeps the
weights in the .onnx file. The nodes' metadata_props (the exporter's provenance: stack
traces, module paths) are dropped afterwards to keep the files small; nothing else changes. The script records the version, opset and op histogram of each
file in MANIFEST.json.
"""
import argparse
import collections
import datetime
import json
import os
import sys
import warnings

import numpy as np
import onnx
import torch
import transformers
from onnx import numpy_helper

SEQ = 16
DEC_SEQ = 8
VOCAB = 256
PAD = 3  # masked positions at the end of attention_mask
SEED = 26


def config(name, layers):
    t = transformers
    common = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4)
    if name == "bert":
        return t.BertModel, t.BertConfig(num_hidden_layers=layers, intermediate_size=128,
                                         max_position_embeddings=64, **common), {"add_pooling_layer": False}
    if name == "gpt2":
        return t.GPT2Model, t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_head=4, n_layer=layers, n_positions=64,
                                         use_cache=False), {}
    if name == "llama":
        return t.LlamaModel, t.LlamaConfig(num_hidden_layers=layers, intermediate_size=128, num_key_value_heads=2,
                                           max_position_embeddings=64, use_cache=False, **common), {}
    if name == "mistral":
        return t.MistralModel, t.MistralConfig(num_hidden_layers=layers, intermediate_size=128,
                                               num_key_value_heads=2, max_position_embeddings=64,
                                               sliding_window=6, use_cache=False, **common), {}
    if name == "t5":
        return t.T5Model, t.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_heads=4,
                                     num_layers=layers, num_decoder_layers=layers,
                                     relative_attention_num_buckets=8, relative_attention_max_distance=32,
                                     dropout_rate=0.0, use_cache=False, decoder_start_token_id=0), {}
    if name == "bart":
        return t.BartModel, t.BartConfig(vocab_size=VOCAB, d_model=64, encoder_layers=layers, decoder_layers=layers,
                                         encoder_attention_heads=4, decoder_attention_heads=4,
                                         encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                                         dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                                         use_cache=False), {}
    raise ValueError(name)


ENC_DEC = {"t5", "bart"}
MODELS = ["bert", "gpt2", "llama", "mistral", "t5", "bart"]


class Wrapper(torch.nn.Module):
    """Returns last_hidden_state alone (no ModelOutput, no cache)."""

    def __init__(self, model, enc_dec):
        super().__init__()
        self.model = model
        self.enc_dec = enc_dec

    def forward(self, input_ids, attention_mask, decoder_input_ids=None):
        if self.enc_dec:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             decoder_input_ids=decoder_input_ids, use_cache=False, return_dict=True)
        else:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return out.last_hidden_state


def inputs(name):
    g = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(4, VOCAB, (1, SEQ), generator=g)
    mask = torch.ones((1, SEQ), dtype=torch.int64)
    mask[0, -PAD:] = 0
    args = [ids, mask]
    names = ["input_ids", "attention_mask"]
    if name in ENC_DEC:
        args.append(torch.randint(4, VOCAB, (1, DEC_SEQ), generator=g))
        names.append("decoder_input_ids")
    return tuple(args), names


def write_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def dynamic_shapes(names):
    """The sequence axes dynamic (torch.export.Dim), batch fixed at 1: what a user exporting
    for variable-length inputs writes. The graph then computes the masks, positions and
    views from Shape nodes; dc plans it with --shape NAME=1,16."""
    seq = torch.export.Dim("seq", min=2, max=64)
    dec = torch.export.Dim("dec_seq", min=2, max=64)
    return {n: {1: dec if n == "decoder_input_ids" else seq} for n in names}


def export(name, layers, out_dir, dynamic=False):
    torch.manual_seed(SEED)
    cls, cfg, kwargs = config(name, layers)
    model = cls(cfg, **kwargs).eval()
    # transformers' init leaves biases at 0 and norm weights at 1, which the exporter's
    # optimizer then folds away (a Gemm without its bias, one weight shared by every norm):
    # graphs a trained checkpoint never gives. Every parameter gets seeded noise on top.
    g = torch.Generator().manual_seed(SEED + 2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    module = Wrapper(model, name in ENC_DEC).eval()
    args, names = inputs(name)
    stem = f"{name}_dyn" if dynamic else name
    path = os.path.join(out_dir, f"{stem}{layers}.onnx")
    extra = {"dynamic_shapes": dynamic_shapes(names)} if dynamic else {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = module(*args)
        torch.onnx.export(module, args, path, input_names=names, output_names=["last_hidden_state"],
                          external_data=False, **extra)
    m = onnx.load(path)
    # The exporter's per-node provenance (stack traces, module paths, the FX node: about 40%
    # of the file) is dropped; the graph, its value_info and initializers stay as written.
    for node in m.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    if layers == 2:
        data = os.path.join(out_dir, f"{stem}{layers}-data")
        os.makedirs(data, exist_ok=True)
        graph_inputs = [i.name for i in m.graph.input]
        feeds = dict(zip(names, args))
        for k, n in enumerate(graph_inputs):
            write_tensor(os.path.join(data, f"input_{k}.pb"), feeds[n].numpy(), n)
        write_tensor(os.path.join(data, "output_0.pb"), expected.numpy().astype(np.float32), m.graph.output[0].name)
    ops = collections.Counter(n.op_type for n in m.graph.node)
    return {
        "file": os.path.basename(path),
        "bytes": os.path.getsize(path),
        "ir_version": m.ir_version,
        "opsets": {o.domain or "ai.onnx": o.version for o in m.opset_import},
        "nodes": len(m.graph.node),
        "inputs": [i.name for i in m.graph.input],
        "ops": dict(sorted(ops.items())),
        "config": {k: v for k, v in cfg.to_diff_dict().items() if isinstance(v, (int, float, str, bool))},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("models", nargs="*", help=f"any of {', '.join(MODELS)} (default: all)")
    ap.add_argument("--dynamic", action="store_true",
                    help="sequence axes dynamic (files MODEL_dynN.onnx); default: static shapes")
    a = ap.parse_intermixed_args()
    for name in a.models:
        if name not in MODELS:
            ap.error(f"unknown model {name}: one of {', '.join(MODELS)}")
    a.models = a.models or MODELS
    os.makedirs(a.out_dir, exist_ok=True)
    manifest_path = os.path.join(a.out_dir, "MANIFEST.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {"models": {}}
    import onnxscript
    manifest["versions"] = {"python": sys.version.split()[0], "torch": torch.__version__,
                            "transformers": transformers.__version__, "onnx": onnx.__version__,
                            "onnxscript": onnxscript.__version__}
    manifest["date"] = datetime.date.today().isoformat()
    manifest["export_call"] = ("torch.onnx.export(module, args, path, input_names=..., "
                               "output_names=['last_hidden_state'], external_data=False)")
    for name in a.models:
        for layers in (1, 2):
            info = export(name, layers, a.out_dir, a.dynamic)
            manifest["models"][info["file"][:-len(".onnx")]] = info
            print(f"{info['file']}: {info['nodes']} nodes, {info['bytes']} bytes, opsets {info['opsets']}", flush=True)
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
