#!/usr/bin/python3
"""Writes a GPT-style decoder stack straight in ONNX, with random weights as external data,
at any width, depth and sequence length: synthetic large models for dc's scale tests and
benchmarks (docs/bench/scale.md). No PyTorch: torch's exporter cannot write models past
2 GB on this machine.

The graph has what Hugging Face exports have: token and position embeddings with position
ids from Range over the input's Shape, decomposed LayerNorm (ReduceMean/Sub/Pow/Sqrt/Div),
per-projection Shape -> Gather -> Unsqueeze -> Concat chains feeding the attention
Reshapes, head size as an integer Div of a Gathered dim, a causal mask, erf GELU, tied
nothing. Opset 13, static input shape [batch, seq].

Weights are written to one raw file next to the model (MODEL.data by default), each tensor
at a 4096-byte aligned offset, generated and written in chunks: memory stays small however
large the model. The .onnx file holds only the graph and small constants.

  make_decoder_model.py --layers 20 --width 2048 --seq 256 --out build/scale/d1b/model.onnx
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ALIGN = 4096
CHUNK = 1 << 22  # elements generated and written at a time


class Writer:
    """Appends tensors to the external data file and describes them as initializers."""

    def __init__(self, data_path, seed):
        self.path = data_path
        self.file = open(data_path, "wb")
        self.offset = 0
        self.rng = np.random.default_rng(seed)
        self.inits = []
        self.bytes = 0

    def weight(self, name, shape, scale, mean=0.0):
        """A float32 tensor of uniform values in [mean - scale, mean + scale)."""
        n = int(np.prod(shape))
        pad = -self.offset % ALIGN
        if pad:
            self.file.write(b"\0" * pad)
            self.offset += pad
        start = self.offset
        for at in range(0, n, CHUNK):
            m = min(CHUNK, n - at)
            x = self.rng.random(m, dtype=np.float32)
            x -= 0.5
            x *= 2 * scale
            if mean:
                x += mean
            x.tofile(self.file)
        self.offset += 4 * n
        self.bytes += 4 * n
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", os.path.basename(self.path)), ("offset", str(start)), ("length", str(4 * n))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.inits.append(t)
        return name

    def const(self, name, value, dtype):
        self.inits.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    def close(self):
        self.file.close()


def build(args, w):
    N = helper.make_node
    nodes = []
    W, H, S, B = args.width, args.heads, args.seq, args.batch
    hd = W // H
    ffn = args.ffn or 4 * W
    c = lambda name, value, dtype=np.int64: w.const(name, value, dtype)
    i0, i1, ax0 = c("i0", 0), c("i1", 1), c("axes0", [0])
    heads, neg1 = c("heads", [H]), c("minus1", [-1])
    eps, two_f, half, one_f = (c("eps", 1e-5, np.float32), c("two_f", 2.0, np.float32),
                               c("half", 0.5, np.float32), c("one_f", 1.0, np.float32))
    sqrt2, width_c = c("sqrt2", np.sqrt(2.0), np.float32), c("width", [W])
    mask = np.triu(np.full((S, S), -1e4, np.float32), 1).reshape(1, 1, S, S)
    w.inits.append(numpy_helper.from_array(mask, "causal_mask"))

    def layer_norm(x, p):
        g = w.weight(p + "_gamma", [W], 0.1, mean=1.0)
        b = w.weight(p + "_beta", [W], 0.1)
        nodes.extend([
            N("ReduceMean", [x], [p + "_mean"], axes=[-1]),
            N("Sub", [x, p + "_mean"], [p + "_d"]),
            N("Pow", [p + "_d", two_f], [p + "_d2"]),
            N("ReduceMean", [p + "_d2"], [p + "_var"], axes=[-1]),
            N("Add", [p + "_var", eps], [p + "_ve"]),
            N("Sqrt", [p + "_ve"], [p + "_std"]),
            N("Div", [p + "_d", p + "_std"], [p + "_n"]),
            N("Mul", [p + "_n", g], [p + "_s"]),
            N("Add", [p + "_s", b], [p + "_out"]),
        ])
        return p + "_out"

    def linear(x, p, n_in, n_out):
        wt = w.weight(p + "_w", [n_in, n_out], 1.0 / np.sqrt(n_in))
        bias = w.weight(p + "_b", [n_out], 0.02)
        nodes.extend([N("MatMul", [x, wt], [p + "_mm"]), N("Add", [p + "_mm", bias], [p + "_out"])])
        return p + "_out"

    def split_heads(x, p, perm):
        # view(batch, seq, heads, width // heads), each dim read from x's shape (as HF does)
        nodes.extend([
            N("Shape", [x], [p + "_shape"]),
            N("Gather", [p + "_shape", i0], [p + "_b"], axis=0),
            N("Gather", [p + "_shape", i1], [p + "_s"], axis=0),
            N("Gather", [p + "_shape", c(p + "_i2", 2)], [p + "_w"], axis=0),
            N("Div", [p + "_w", c(p + "_h", H)], [p + "_hd"]),
            N("Unsqueeze", [p + "_b", ax0], [p + "_b1"]),
            N("Unsqueeze", [p + "_s", ax0], [p + "_s1"]),
            N("Unsqueeze", [p + "_hd", ax0], [p + "_hd1"]),
            N("Concat", [p + "_b1", p + "_s1", heads, p + "_hd1"], [p + "_view"], axis=0),
            N("Reshape", [x, p + "_view"], [p + "_heads"]),
            N("Transpose", [p + "_heads"], [p + "_t"], perm=perm),
        ])
        return p + "_t"

    # Embeddings: token table and positions Range(0, seq) from the input's shape.
    wte = w.weight("wte", [args.vocab, W], 0.02)
    wpe = w.weight("wpe", [S, W], 0.02)
    nodes.extend([
        N("Gather", [wte, "input_ids"], ["tok_emb"], axis=0),
        N("Shape", ["input_ids"], ["ids_shape"]),
        N("Gather", ["ids_shape", i1], ["seq_len"], axis=0),
        N("Range", [i0, "seq_len", i1], ["pos_range"]),
        N("Unsqueeze", ["pos_range", ax0], ["position_ids"]),
        N("Gather", [wpe, "position_ids"], ["pos_emb"], axis=0),
        N("Add", ["tok_emb", "pos_emb"], ["h0"]),
    ])
    x = "h0"
    for layer in range(args.layers):
        p = f"l{layer}"
        a = layer_norm(x, p + "_ln1")
        q = split_heads(linear(a, p + "_q", W, W), p + "_qh", [0, 2, 1, 3])
        k = split_heads(linear(a, p + "_k", W, W), p + "_kh", [0, 2, 3, 1])
        v = split_heads(linear(a, p + "_v", W, W), p + "_vh", [0, 2, 1, 3])
        nodes.extend([
            N("MatMul", [q, k], [p + "_qk"]),
            N("Div", [p + "_qk", c(p + "_scale", np.sqrt(hd), np.float32)], [p + "_scores"]),
            N("Add", [p + "_scores", "causal_mask"], [p + "_masked"]),
            N("Softmax", [p + "_masked"], [p + "_probs"], axis=-1),
            N("MatMul", [p + "_probs", v], [p + "_ctx_t"]),
            N("Transpose", [p + "_ctx_t"], [p + "_ctx"], perm=[0, 2, 1, 3]),
            # merge heads: view(ctx.shape[:2] + (width,))
            N("Shape", [p + "_ctx"], [p + "_ctx_shape"]),
            N("Slice", [p + "_ctx_shape", c(p + "_s0", [0]), c(p + "_s2", [2])], [p + "_bs"]),
            N("Concat", [p + "_bs", width_c], [p + "_merge"], axis=0),
            N("Reshape", [p + "_ctx", p + "_merge"], [p + "_attn_in"]),
        ])
        o = linear(p + "_attn_in", p + "_o", W, W)
        nodes.append(N("Add", [x, o], [p + "_res1"]))
        m = layer_norm(p + "_res1", p + "_ln2")
        up = linear(m, p + "_up", W, ffn)
        nodes.extend([  # erf GELU as torch exports it
            N("Div", [up, sqrt2], [p + "_g_div"]),
            N("Erf", [p + "_g_div"], [p + "_g_erf"]),
            N("Add", [p + "_g_erf", one_f], [p + "_g_add"]),
            N("Mul", [up, p + "_g_add"], [p + "_g_mul"]),
            N("Mul", [p + "_g_mul", half], [p + "_gelu"]),
        ])
        down = linear(p + "_gelu", p + "_down", ffn, W)
        nodes.append(N("Add", [p + "_res1", down], [p + "_out"]))
        x = p + "_out"
    f = layer_norm(x, "ln_f")
    head = w.weight("lm_head", [W, args.vocab], 1.0 / np.sqrt(W))
    nodes.append(N("MatMul", [f, head], ["logits"]))

    graph = helper.make_graph(
        nodes, f"decoder_{args.layers}x{W}",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [B, S])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, S, args.vocab])], w.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="dc make_decoder_model.py")
    model.ir_version = 7
    return model


def params(args):
    W, ffn = args.width, args.ffn or 4 * args.width
    per_layer = 4 * W * W + 4 * W + 2 * W * ffn + ffn + W + 4 * W
    return args.layers * per_layer + 2 * args.vocab * W + args.seq * W + 2 * W


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--heads", type=int, default=0, help="default: width / 64, at least 1")
    ap.add_argument("--ffn", type=int, default=0, help="MLP width (default 4 x width)")
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--data", help="external data file name (default: MODEL.data, next to the model)")
    ap.add_argument("--out", required=True, help="the .onnx file to write")
    ap.add_argument("--check", action="store_true", help="run onnx.checker on the result")
    args = ap.parse_args()
    args.heads = args.heads or max(1, args.width // 64)
    if args.width % args.heads:
        sys.exit(f"--width {args.width} is not a multiple of --heads {args.heads}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    data = os.path.join(out_dir, args.data or os.path.basename(args.out) + ".data")
    w = Writer(data, args.seed)
    model = build(args, w)
    w.close()
    with open(args.out, "wb") as f:
        f.write(model.SerializeToString())
    if args.check:
        onnx.checker.check_model(args.out)
    print(f"wrote {args.out}: {len(model.graph.node)} nodes, {params(args) / 1e9:.3f} billion parameters, "
          f"{w.bytes / 2**30:.2f} GiB of external data in {os.path.basename(data)}")


if __name__ == "__main__":
    main()
