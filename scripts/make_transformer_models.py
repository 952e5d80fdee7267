#!/usr/bin/python3
"""Writes small transformer models in the node forms that torch 2.x's exporter writes for
Hugging Face transformers (dynamo; written here at opset 17, the newest onnx 1.12 checks, with
ReduceMean's axes as an attribute), without PyTorch: dc's fusion benchmarks and pattern
tests (docs/bench/fusion.md, docs/candidates.md).

  llama  RMSNorm as Cast/Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul/Cast/Mul; Q, K, V projections
         without bias, Reshape + Transpose into heads; RoPE rotate-half (Slice/Neg/Concat/Mul/Add
         with cos/sin tables); grouped-query attention (K and V repeated by
         Unsqueeze/Expand/Reshape); torch's SDPA decomposition (sqrt(scale) on Q and on Kt,
         boolean causal + padding mask from an `attention_mask` input turned additive by Where,
         Softmax in fp32 through Casts, the IsNaN/Where guard); SwiGLU MLP.
  gpt2   decomposed LayerNorm; one c_attn GEMM split into Q, K, V; causal Where(mask, s,
         finfo.min) after a Div by sqrt(d); tanh GELU ("gelu_new") spelled out.
  bert   post-LN encoder: Q, K, V with bias; additive padding mask (1 - mask) * min from an
         `attention_mask` input; erf GELU; decomposed LayerNorm.

  llama23  the llama model in opset 23's own ops: RMSNormalization, RotaryEmbedding and
         Attention (is_causal, a boolean padding mask, grouped-query K/V). The first layer
         uses their 3-D forms (q_num_heads/kv_num_heads; interleaved RoPE on half of each head
         with position_ids), the others the 4-D forms (heads split by Reshape + Transpose;
         rotate-half RoPE on the whole head). Its padding hides the last keys, so no query row
         is fully masked (the Attention op has no NaN guard).

  make_transformer_models.py llama --layers 2 --out build/fusion/llama.onnx
"""
import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FMIN = float(np.finfo(np.float32).min)


class Builder:
    def __init__(self, seed):
        self.nodes, self.inits, self.rng, self.k = [], [], np.random.default_rng(seed), 0

    def name(self, p):
        self.k += 1
        return f"{p}_{self.k}"

    def const(self, value, dtype=np.float32, p="c"):
        n = self.name(p)
        self.inits.append(numpy_helper.from_array(np.array(value, dtype), n))
        return n

    def weight(self, shape, scale, mean=0.0, p="w"):
        v = (self.rng.random(shape, dtype=np.float32) - 0.5) * 2 * scale + mean
        return self.const(v.astype(np.float32), p=p)

    def op(self, op, inputs, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out + "_n", **attrs))
        return out

    def ops(self, op, inputs, n_out, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=outs[0] + "_n", **attrs))
        return outs


def rms_norm(b, x, d):
    c = b.op("Cast", [x], to=TensorProto.FLOAT)
    var = b.op("ReduceMean", [b.op("Pow", [c, b.const(2.0)])], axes=[-1], keepdims=1)
    r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [var, b.const(1e-6)])])])
    n = b.op("Cast", [b.op("Mul", [c, r])], to=TensorProto.FLOAT)
    return b.op("Mul", [b.weight([d], 0.1, 1.0), n])


def layer_norm(b, x, d):
    m = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
    dd = b.op("Sub", [x, m])
    var = b.op("ReduceMean", [b.op("Pow", [dd, b.const(2.0)])], axes=[-1], keepdims=1)
    n = b.op("Div", [dd, b.op("Sqrt", [b.op("Add", [var, b.const(1e-5)])])])
    return b.op("Add", [b.op("Mul", [n, b.weight([d], 0.1, 1.0)]), b.weight([d], 0.1)])


def linear(b, x, n_in, n_out, bias):
    y = b.op("MatMul", [x, b.weight([n_in, n_out], 1.0 / np.sqrt(n_in))])
    return b.op("Add", [y, b.weight([n_out], 0.02)]) if bias else y


def heads(b, x, a, heads, hd, perm=(0, 2, 1, 3)):
    r = b.op("Reshape", [x, b.const([a.batch, a.seq, heads, hd], np.int64)])
    return b.op("Transpose", [r], perm=list(perm))


def merge_heads(b, o, a, d):
    t = b.op("Transpose", [o], perm=[0, 2, 1, 3])
    return b.op("Reshape", [t, b.const([a.batch, a.seq, d], np.int64)])


def rope(b, x, cos, sin, hd):
    half = hd // 2
    x1 = b.op("Slice", [x, b.const([0], np.int64), b.const([half], np.int64), b.const([-1], np.int64)])
    x2 = b.op("Slice", [x, b.const([half], np.int64), b.const([hd], np.int64), b.const([-1], np.int64)])
    rot = b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1)
    return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [rot, sin])])


def repeat_kv(b, x, a, kv, rep, hd):
    u = b.op("Unsqueeze", [x, b.const([2], np.int64)])
    e = b.op("Expand", [u, b.const([a.batch, kv, rep, a.seq, hd], np.int64)])
    return b.op("Reshape", [e, b.const([a.batch, kv * rep, a.seq, hd], np.int64)])


def llama(b, a):
    d, h, kv, hd = a.width, a.heads, a.kv_heads, a.width // a.heads
    x = b.op("Gather", [b.weight([a.vocab, d], 0.5), "input_ids"], axis=0)
    # Boolean causal & padding mask, made additive by Where, as SDPA's decomposition does.
    causal = b.const(np.tril(np.ones((a.seq, a.seq), bool)).reshape(1, 1, a.seq, a.seq), bool)
    pad = b.op("Cast", [b.op("Unsqueeze", ["attention_mask", b.const([1, 2], np.int64)])], to=TensorProto.BOOL)
    allowed = b.op("And", [causal, pad])
    mask = b.op("Where", [allowed, b.const(0.0), b.const(-np.inf)])
    pos = np.arange(a.seq, dtype=np.float32)[:, None]
    inv = 1.0 / (10000 ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    ang = np.concatenate([pos * inv, pos * inv], axis=-1).reshape(1, 1, a.seq, hd)
    cos, sin = b.const(np.cos(ang)), b.const(np.sin(ang))
    sq_scale = b.const(np.sqrt(1.0 / np.sqrt(hd)))
    for _ in range(a.layers):
        y = rms_norm(b, x, d)
        q = rope(b, heads(b, linear(b, y, d, h * hd, False), a, h, hd), cos, sin, hd)
        k = rope(b, heads(b, linear(b, y, d, kv * hd, False), a, kv, hd), cos, sin, hd)
        v = heads(b, linear(b, y, d, kv * hd, False), a, kv, hd)
        k, v = repeat_kv(b, k, a, kv, h // kv, hd), repeat_kv(b, v, a, kv, h // kv, hd)
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        s = b.op("MatMul", [b.op("Mul", [q, sq_scale]), b.op("Mul", [kt, sq_scale])])
        s = b.op("Cast", [b.op("Add", [s, mask])], to=TensorProto.FLOAT)
        p = b.op("Softmax", [s], axis=-1)
        p = b.op("Where", [b.op("IsNaN", [p]), b.const(0.0), p])
        p = b.op("Cast", [p], to=TensorProto.FLOAT)
        o = merge_heads(b, b.op("MatMul", [p, v]), a, d)
        x = b.op("Add", [x, linear(b, o, d, d, False)])
        y = rms_norm(b, x, d)
        gate, up = linear(b, y, d, a.ffn, False), linear(b, y, d, a.ffn, False)
        act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate])]), up])
        x = b.op("Add", [x, linear(b, act, a.ffn, d, False)])
    return b.op("MatMul", [rms_norm(b, x, d), b.weight([d, a.vocab], 1.0 / np.sqrt(d))])


def rope_tables(b, a, rotary):
    pos = np.arange(a.seq, dtype=np.float32)[:, None]
    ang = pos * (1.0 / (10000 ** (np.arange(0, rotary, 2, dtype=np.float32) / rotary)))
    return b.const(np.cos(ang)), b.const(np.sin(ang))


def llama23(b, a):
    d, h, kv, hd = a.width, a.heads, a.kv_heads, a.width // a.heads
    x = b.op("Gather", [b.weight([a.vocab, d], 0.5), "input_ids"], axis=0)
    pad = b.op("Cast", [b.op("Unsqueeze", ["attention_mask", b.const([1, 2], np.int64)])], to=TensorProto.BOOL)
    positions = b.const(np.tile(np.arange(a.seq), (a.batch, 1)), np.int64)
    cos, sin = rope_tables(b, a, hd)
    cos_half, sin_half = rope_tables(b, a, hd // 2)

    def norm(t):
        return b.op("RMSNormalization", [t, b.weight([d], 0.1, 1.0)], axis=-1, epsilon=1e-6)

    for layer in range(a.layers):
        y = norm(x)
        q, k, v = linear(b, y, d, h * hd, False), linear(b, y, d, kv * hd, False), linear(b, y, d, kv * hd, False)
        if layer == 0:  # 3-D forms
            q = b.op("RotaryEmbedding", [q, cos_half, sin_half, positions], interleaved=1,
                     rotary_embedding_dim=hd // 2, num_heads=h)
            k = b.op("RotaryEmbedding", [k, cos_half, sin_half, positions], interleaved=1,
                     rotary_embedding_dim=hd // 2, num_heads=kv)
            o = b.op("Attention", [q, k, v, pad], is_causal=1, q_num_heads=h, kv_num_heads=kv)
        else:  # 4-D forms
            q = b.op("RotaryEmbedding", [heads(b, q, a, h, hd), cos, sin, positions])
            k = b.op("RotaryEmbedding", [heads(b, k, a, kv, hd), cos, sin, positions])
            o = merge_heads(b, b.op("Attention", [q, k, heads(b, v, a, kv, hd), pad], is_causal=1), a, d)
        x = b.op("Add", [x, linear(b, o, d, d, False)])
        y = norm(x)
        gate, up = linear(b, y, d, a.ffn, False), linear(b, y, d, a.ffn, False)
        act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate])]), up])
        x = b.op("Add", [x, linear(b, act, a.ffn, d, False)])
    return b.op("MatMul", [norm(x), b.weight([d, a.vocab], 1.0 / np.sqrt(d))])


def gpt2(b, a):
    d, h, hd = a.width, a.heads, a.width // a.heads
    x = b.op("Add", [b.op("Gather", [b.weight([a.vocab, d], 0.5), "input_ids"], axis=0),
                     b.weight([1, a.seq, d], 0.1)])
    causal = b.const(np.tril(np.ones((a.seq, a.seq), bool)).reshape(1, 1, a.seq, a.seq), bool)
    for _ in range(a.layers):
        qkv = linear(b, layer_norm(b, x, d), d, 3 * d, True)
        q, k, v = b.ops("Split", [qkv], 3, axis=2)
        q, k, v = heads(b, q, a, h, hd), heads(b, k, a, h, hd, (0, 2, 3, 1)), heads(b, v, a, h, hd)
        s = b.op("Div", [b.op("MatMul", [q, k]), b.const(np.sqrt(hd))])
        s = b.op("Where", [causal, s, b.const(FMIN)])
        o = merge_heads(b, b.op("MatMul", [b.op("Softmax", [s], axis=-1), v]), a, d)
        x = b.op("Add", [x, linear(b, o, d, d, True)])
        u = linear(b, layer_norm(b, x, d), d, a.ffn, True)
        cube = b.op("Mul", [b.op("Pow", [u, b.const(3.0)]), b.const(0.044715)])
        t = b.op("Tanh", [b.op("Mul", [b.op("Add", [u, cube]), b.const(np.sqrt(2 / np.pi))])])
        gelu = b.op("Mul", [b.op("Mul", [u, b.const(0.5)]), b.op("Add", [t, b.const(1.0)])])
        x = b.op("Add", [x, linear(b, gelu, a.ffn, d, True)])
    return b.op("MatMul", [layer_norm(b, x, d), b.weight([d, a.vocab], 1.0 / np.sqrt(d))])


def bert(b, a):
    d, h, hd = a.width, a.heads, a.width // a.heads
    x = b.op("Add", [b.op("Gather", [b.weight([a.vocab, d], 0.5), "input_ids"], axis=0),
                     b.weight([1, a.seq, d], 0.1)])
    x = layer_norm(b, x, d)
    am = b.op("Cast", [b.op("Unsqueeze", ["attention_mask", b.const([1, 2], np.int64)])], to=TensorProto.FLOAT)
    mask = b.op("Mul", [b.op("Sub", [b.const(1.0), am]), b.const(FMIN)])
    for _ in range(a.layers):
        q = heads(b, linear(b, x, d, d, True), a, h, hd)
        k = heads(b, linear(b, x, d, d, True), a, h, hd, (0, 2, 3, 1))
        v = heads(b, linear(b, x, d, d, True), a, h, hd)
        s = b.op("Add", [b.op("Div", [b.op("MatMul", [q, k]), b.const(np.sqrt(hd))]), mask])
        o = merge_heads(b, b.op("MatMul", [b.op("Softmax", [s], axis=-1), v]), a, d)
        x = layer_norm(b, b.op("Add", [linear(b, o, d, d, True), x]), d)
        u = linear(b, x, d, a.ffn, True)
        e = b.op("Erf", [b.op("Div", [u, b.const(np.sqrt(2.0))])])
        gelu = b.op("Mul", [b.op("Mul", [u, b.op("Add", [e, b.const(1.0)])]), b.const(0.5)])
        x = layer_norm(b, b.op("Add", [linear(b, gelu, a.ffn, d, True), x]), d)
    return x


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _slice(x, starts, ends, axes):
    idx = [slice(None)] * x.ndim
    for s, e, a in zip(starts, ends, axes):
        idx[int(a)] = slice(int(s), int(e))
    return x[tuple(idx)]


def _rms_normalization(n, x, scale):
    axes = tuple(range(n.get("axis", -1) % x.ndim, x.ndim))
    return x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + n.get("epsilon", 1e-5)) * scale


def _rotary_embedding(n, x, cos, sin, positions=None):
    """ONNX RotaryEmbedding-23 as its specification reads, on [batch, seq, heads, head]."""
    four = x.ndim == 4
    x = x.transpose(0, 2, 1, 3) if four else x.reshape(x.shape[0], x.shape[1], n["num_heads"], -1)
    rotary = n.get("rotary_embedding_dim", 0) or x.shape[-1]
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    xr, xp = x[..., :rotary], x[..., rotary:]
    interleaved = n.get("interleaved", 0)
    x1, x2 = (xr[..., 0::2], xr[..., 1::2]) if interleaved else np.split(xr, 2, axis=-1)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    yr = np.stack([real, imag], -1).reshape(xr.shape) if interleaved else np.concatenate([real, imag], -1)
    y = np.concatenate([yr, xp], -1)
    return y.transpose(0, 2, 1, 3) if four else y.reshape(y.shape[0], y.shape[1], -1)


def _attention(n, q, k, v, mask=None):
    """ONNX Attention-23 as its specification reads (no KV cache, no softcap)."""
    three = q.ndim == 3
    if three:
        def split(t, heads):
            return t.reshape(t.shape[0], t.shape[1], heads, -1).transpose(0, 2, 1, 3)
        q, k, v = split(q, n["q_num_heads"]), split(k, n["kv_num_heads"]), split(v, n["kv_num_heads"])
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * n.get("scale", 1.0 / np.sqrt(q.shape[-1]))
    bias = np.zeros(s.shape[-2:])
    if n.get("is_causal", 0):
        bias = np.where(np.tril(np.ones(s.shape[-2:], bool)), 0.0, -np.inf)
    if mask is not None:
        bias = bias + (np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask)
    o = _softmax(s + bias, -1) @ v
    return o.transpose(0, 2, 1, 3).reshape(o.shape[0], o.shape[2], -1) if three else o


# numpy for every op the builders write: an oracle independent of dc's reference executor.
OPS = {
    "Add": lambda n, a, b: a + b, "Sub": lambda n, a, b: a - b, "Mul": lambda n, a, b: a * b,
    "Div": lambda n, a, b: a / b, "Pow": lambda n, a, b: np.power(a, b), "Neg": lambda n, a: -a,
    "Sqrt": lambda n, a: np.sqrt(a), "Reciprocal": lambda n, a: 1 / a, "Tanh": lambda n, a: np.tanh(a),
    "Erf": lambda n, a: np.vectorize(math.erf)(a).astype(a.dtype),
    "Sigmoid": lambda n, a: 1 / (1 + np.exp(-a)), "IsNaN": lambda n, a: np.isnan(a),
    "And": lambda n, a, b: np.logical_and(a, b), "Where": lambda n, c, a, b: np.where(c, a, b),
    "MatMul": lambda n, a, b: np.matmul(a, b), "Identity": lambda n, a: a,
    "Gather": lambda n, a, i: np.take(a, i, axis=n["axis"]),
    "Cast": lambda n, a: a.astype({TensorProto.FLOAT: np.float32, TensorProto.BOOL: bool}[n["to"]]),
    "ReduceMean": lambda n, a: a.mean(axis=tuple(n["axes"]), keepdims=True),
    "Reshape": lambda n, a, s: a.reshape(s), "Transpose": lambda n, a: a.transpose(n["perm"]),
    "Unsqueeze": lambda n, a, ax: np.expand_dims(a, tuple(int(v) for v in ax)),
    "Expand": lambda n, a, s: np.broadcast_to(a, s), "Slice": lambda n, a, s, e, ax: _slice(a, s, e, ax),
    "Concat": lambda n, *xs: np.concatenate(xs, axis=n["axis"]),
    "Softmax": lambda n, a: _softmax(a, n["axis"]),
    "RMSNormalization": _rms_normalization, "RotaryEmbedding": _rotary_embedding, "Attention": _attention,
}


def evaluate(model, feeds):
    """Runs the model's nodes with numpy in float64 where they compute floats."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in values.items()}
    values.update(feeds)
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ins = [values[i] for i in node.input]
        if node.op_type == "Split":
            outs = np.split(ins[0], len(node.output), axis=attrs["axis"])
        else:
            out = OPS[node.op_type](attrs, *ins)
            if node.op_type == "Cast" and out.dtype == np.float32:
                out = out.astype(np.float64)
            outs = [out]
        values.update(zip(node.output, outs))
    return values[model.graph.output[0].name]


def write_data(model, a, folder):
    """input_N.pb / output_0.pb: random token ids, a left padding mask hiding the first 3 keys
    of the first batch row (llama, bert: with the causal mask, llama's first 3 query rows see
    nothing, so the IsNaN/Where guard decides them), the numpy oracle's output in float32."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(a.seed + 1)
    feeds = {"input_ids": rng.integers(0, a.vocab, (a.batch, a.seq)).astype(np.int64)}
    if a.model != "gpt2":
        mask = np.ones((a.batch, a.seq), np.int64)
        if a.model == "llama23":
            mask[0, -3:] = 0  # right padding: with the causal mask, every query row sees a key
        else:
            mask[0, :3] = 0
        feeds["attention_mask"] = mask
    for i, inp in enumerate(model.graph.input):
        t = numpy_helper.from_array(feeds[inp.name], inp.name)
        open(os.path.join(folder, f"input_{i}.pb"), "wb").write(t.SerializeToString())
    with np.errstate(invalid="ignore"):  # the fully masked rows' 0/0, as torch computes them
        out = evaluate(model, feeds).astype(np.float32)
    t = numpy_helper.from_array(out, model.graph.output[0].name)
    open(os.path.join(folder, "output_0.pb"), "wb").write(t.SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=["llama", "llama23", "gpt2", "bert"])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=0, help="default: 4 x width (llama: 8/3 x width)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", help="also write an ONNX test-data folder (inputs and the numpy oracle's output)")
    a = ap.parse_args()
    if a.width % a.heads or a.heads % a.kv_heads or (a.width // a.heads) % 2:
        sys.exit("error: width must divide by heads into an even head size, heads by kv-heads")
    if a.model == "llama23" and (a.width // a.heads) % 4:
        sys.exit("error: llama23 rotates half of each head in pairs: the head size must divide by 4")
    a.ffn = a.ffn or (a.width * 8 // 3 if a.model.startswith("llama") else 4 * a.width)
    b = Builder(a.seed)
    out = {"llama": llama, "llama23": llama23, "gpt2": gpt2, "bert": bert}[a.model](b, a)
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [a.batch, a.seq])]
    if a.model != "gpt2":
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [a.batch, a.seq]))
    b.nodes.append(helper.make_node("Identity", [out], ["output"]))
    out_shape = [a.batch, a.seq, a.width if a.model == "bert" else a.vocab]
    graph = helper.make_graph(b.nodes, a.model, inputs,
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)], b.inits)
    opset = 23 if a.model == "llama23" else 17
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="dc make_transformer_models.py")
    model.ir_version = 10 if opset == 23 else 8
    if opset == 17:  # onnx 1.12's checker knows opsets up to 17
        onnx.checker.check_model(model)
    onnx.save(model, a.out)
    if a.data:
        write_data(model, a, a.data)
    print(f"{a.out}: {a.model}, {a.layers} layers, {len(b.nodes)} nodes")


if __name__ == "__main__":
    main()
