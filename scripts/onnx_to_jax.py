"""A small ONNX -> JAX interpreter, so that XLA can run the very graph (and weights) that dc
compiles: the peer benchmark's JAX/XLA row (scripts/bench_peers.py).

    model = onnx_to_jax.load("models/resnet50/model.onnx")
    fn = jax.jit(model.apply)                 # fn(params, *inputs) -> tuple of outputs
    outs = fn(model.params, x)

Tracing walks the nodes once: each ONNX op becomes jax.numpy / lax calls, so jax.jit hands
XLA one whole-model computation. Float initializers are the jitted function's arguments
(`params`), as a JAX deployment passes them; integer initializers and Constant nodes stay
NumPy values, so that shape arithmetic (Reshape's shape, Unsqueeze's axes) is static at
trace time. Convolutions and matrix products ask for Precision.HIGHEST: fp32, not TF32.

Covers the ops of dc's models (ResNet-50, MobileNetV2, BERT-base, examples/): Conv,
BatchNormalization (inference), Relu, Clip, MaxPool, AveragePool, GlobalAveragePool,
Flatten, Gemm, MatMul, elementwise arithmetic, Erf, Sqrt, Pow, ReduceMean, Softmax, Gather,
Reshape, Transpose, (Un)Squeeze, Cast, Constant, and a few more. Anything else raises
UnsupportedOp naming it. Needs jax and onnx.
"""
import numpy as np
import onnx
from onnx import numpy_helper

import jax
import jax.numpy as jnp
from jax import lax

HIGHEST = lax.Precision.HIGHEST


class UnsupportedOp(Exception):
    pass


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _static(*values):
    """True when every value is a NumPy array: compute with NumPy at trace time."""
    return all(isinstance(v, np.ndarray) for v in values)


def _xp(*values):
    return np if _static(*values) else jnp


def _ints(value, what):
    if not isinstance(value, np.ndarray):
        raise UnsupportedOp("%s must be a constant (it is computed at run time)" % what)
    return [int(v) for v in value.reshape(-1)]


def _dtype(onnx_type):
    if hasattr(onnx.helper, "tensor_dtype_to_np_dtype"):  # onnx >= 1.13
        return onnx.helper.tensor_dtype_to_np_dtype(onnx_type)
    return onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[onnx_type]


# --- ops --------------------------------------------------------------------------------

def _conv(ins, a):
    x, w = ins[0], ins[1]
    spatial = w.ndim - 2
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise UnsupportedOp("Conv auto_pad")
    pads = a.get("pads", [0] * 2 * spatial)
    layout = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW"), 3: ("NCDHW", "OIDHW", "NCDHW")}[spatial]
    y = lax.conv_general_dilated(
        x, w,
        window_strides=a.get("strides", [1] * spatial),
        padding=[(pads[i], pads[i + spatial]) for i in range(spatial)],
        rhs_dilation=a.get("dilations", [1] * spatial),
        dimension_numbers=layout,
        feature_group_count=a.get("group", 1),
        precision=HIGHEST)
    if len(ins) > 2 and ins[2] is not None:
        y = y + ins[2].reshape((1, -1) + (1,) * spatial)
    return y


def _channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def _batch_norm(ins, a):
    x, scale, bias, mean, var = ins[:5]
    inv = scale / jnp.sqrt(var + a.get("epsilon", 1e-5))
    return (x - _channel(mean, x.ndim)) * _channel(inv, x.ndim) + _channel(bias, x.ndim)


def _pool_padding(a, spatial):
    if a.get("ceil_mode", 0) or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise UnsupportedOp("pooling with ceil_mode or auto_pad")
    if any(d != 1 for d in a.get("dilations", [1] * spatial)):
        raise UnsupportedOp("pooling with dilations")
    pads = a.get("pads", [0] * 2 * spatial)
    return [(0, 0), (0, 0)] + [(pads[i], pads[i + spatial]) for i in range(spatial)]


def _window(x, a):
    spatial = x.ndim - 2
    kernel = a["kernel_shape"]
    return ((1, 1) + tuple(kernel), (1, 1) + tuple(a.get("strides", [1] * spatial)),
            _pool_padding(a, spatial))


def _max_pool(ins, a):
    x = ins[0]
    dims, strides, padding = _window(x, a)
    return lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, padding)


def _average_pool(ins, a):
    x = ins[0]
    dims, strides, padding = _window(x, a)
    total = lax.reduce_window(x, 0.0, lax.add, dims, strides, padding)
    if a.get("count_include_pad", 0):
        return total / float(np.prod(dims))
    ones = jnp.ones((1, 1) + x.shape[2:], x.dtype)
    count = lax.reduce_window(ones, 0.0, lax.add, dims, strides, padding)
    return total / count


def _gemm(ins, a):
    A, B = ins[0], ins[1]
    if a.get("transA", 0):
        A = A.T
    if a.get("transB", 0):
        B = B.T
    y = jnp.matmul(A, B, precision=HIGHEST) * a.get("alpha", 1.0)
    if len(ins) > 2 and ins[2] is not None:
        y = y + a.get("beta", 1.0) * ins[2]
    return y


def _clip(ins, a):
    x = ins[0]
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else a.get("min")
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else a.get("max")
    if lo is not None:
        x = jnp.maximum(x, lo)
    if hi is not None:
        x = jnp.minimum(x, hi)
    return x


def _reshape(ins, a):
    x = ins[0]
    shape = _ints(ins[1], "Reshape's shape")
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return _xp(x).reshape(x, shape)


def _flatten(ins, a):
    x = ins[0]
    axis = a.get("axis", 1) % max(x.ndim, 1)
    return _xp(x).reshape(x, (int(np.prod(x.shape[:axis])), -1))


def _unsqueeze(ins, a):
    x = ins[0]
    axes = _ints(ins[1], "Unsqueeze's axes") if len(ins) > 1 else a["axes"]
    rank = x.ndim + len(axes)
    return _xp(x).expand_dims(x, tuple(sorted(ax % rank for ax in axes)))


def _squeeze(ins, a):
    x = ins[0]
    axes = _ints(ins[1], "Squeeze's axes") if len(ins) > 1 and ins[1] is not None else a.get("axes")
    if axes is None:
        return _xp(x).squeeze(x)
    return _xp(x).squeeze(x, tuple(ax % x.ndim for ax in axes))


def _gather(ins, a):
    data, idx = ins
    axis = a.get("axis", 0)
    if _static(idx):
        idx = np.where(idx < 0, idx + data.shape[axis], idx)
    else:
        idx = jnp.where(idx < 0, idx + data.shape[axis], idx)
    return _xp(data, idx).take(data, idx, axis=axis)


def _reduce_mean(ins, a):
    x = ins[0]
    axes = a.get("axes")
    if axes is None and len(ins) > 1 and ins[1] is not None:
        axes = _ints(ins[1], "ReduceMean's axes")
    axes = tuple(range(x.ndim)) if axes is None else tuple(ax % x.ndim for ax in axes)
    return _xp(x).mean(x, axis=axes, keepdims=bool(a.get("keepdims", 1)))


def _softmax(ins, a):
    return jax.nn.softmax(ins[0], axis=a.get("axis", -1))


def _cast(ins, a):
    x = ins[0]
    dtype = _dtype(a["to"])
    if _static(x):
        return x.astype(dtype)
    if np.dtype(dtype).itemsize == 8 and not jax.config.jax_enable_x64:
        dtype = {np.dtype(np.int64): np.int32, np.dtype(np.float64): np.float32}.get(np.dtype(dtype), dtype)
    return x.astype(dtype)


def _constant(ins, a):
    if "value" in a:
        return numpy_helper.to_array(a["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            return np.array(a[key], dtype=dtype)
    raise UnsupportedOp("Constant without value")


def _binary(name):
    def op(ins, a):
        x, y = ins
        m = _xp(x, y)
        if name == "Div" and _static(x, y) and np.issubdtype(x.dtype, np.integer):
            return (x // y).astype(x.dtype)
        return getattr(m, {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide",
                           "Pow": "power"}[name])(x, y)
    return op


def _concat(ins, a):
    return _xp(*ins).concatenate(ins, axis=a["axis"])


def _shape(ins, a):
    return np.array(ins[0].shape, dtype=np.int64)


def _slice(ins, a):
    x = ins[0]
    starts, ends = _ints(ins[1], "Slice's starts"), _ints(ins[2], "Slice's ends")
    axes = _ints(ins[3], "Slice's axes") if len(ins) > 3 and ins[3] is not None else range(len(starts))
    steps = _ints(ins[4], "Slice's steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        index[ax % x.ndim] = slice(s, e, st)
    return x[tuple(index)]


UNARY = {
    "Relu": lambda x: jnp.maximum(x, 0),
    "Sqrt": jnp.sqrt,
    "Erf": jax.scipy.special.erf,
    "Tanh": jnp.tanh,
    "Sigmoid": jax.nn.sigmoid,
    "Exp": jnp.exp,
    "Neg": jnp.negative,
    "Identity": lambda x: x,
    "Dropout": lambda x: x,  # inference
}

OPS = {
    "Conv": _conv,
    "BatchNormalization": _batch_norm,
    "MaxPool": _max_pool,
    "AveragePool": _average_pool,
    "GlobalAveragePool": lambda ins, a: jnp.mean(ins[0], axis=tuple(range(2, ins[0].ndim)), keepdims=True),
    "Flatten": _flatten,
    "Gemm": _gemm,
    "MatMul": lambda ins, a: jnp.matmul(ins[0], ins[1], precision=HIGHEST),
    "Clip": _clip,
    "Reshape": _reshape,
    "Transpose": lambda ins, a: _xp(ins[0]).transpose(ins[0], a.get("perm")),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Gather": _gather,
    "ReduceMean": _reduce_mean,
    "Softmax": _softmax,
    "Cast": _cast,
    "Constant": _constant,
    "Concat": _concat,
    "Shape": _shape,
    "Slice": _slice,
}
for _name in ("Add", "Sub", "Mul", "Div", "Pow"):
    OPS[_name] = _binary(_name)


def _run_node(node, ins):
    a = _attrs(node)
    if node.op_type in UNARY:
        x = ins[0]
        if _static(x) and node.op_type in ("Identity", "Neg"):
            return (x if node.op_type == "Identity" else -x,)
        return (UNARY[node.op_type](x),)
    op = OPS.get(node.op_type)
    if op is None:
        raise UnsupportedOp("ONNX op %s (node %s) is not supported by onnx_to_jax" % (node.op_type, node.name))
    return (op(ins, a),)


# --- the model --------------------------------------------------------------------------

class JaxModel:
    """An ONNX graph as a pure function apply(params, *inputs) -> tuple of outputs."""

    def __init__(self, graph):
        self.graph = graph
        self.params = {}   # float initializers: jitted arguments
        self.static = {}   # integer initializers: trace-time constants
        for t in graph.initializer:
            array = numpy_helper.to_array(t)
            if np.issubdtype(array.dtype, np.floating):
                self.params[t.name] = jnp.asarray(array)
            else:
                self.static[t.name] = array
        initializers = {t.name for t in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in initializers]
        self.output_names = [o.name for o in graph.output]
        self.check_supported()

    def check_supported(self):
        missing = sorted({n.op_type for n in self.graph.node if n.op_type not in OPS and n.op_type not in UNARY})
        if missing:
            raise UnsupportedOp("ONNX op(s) %s not supported by onnx_to_jax" % ", ".join(missing))

    def apply(self, params, *inputs):
        if len(inputs) != len(self.input_names):
            raise ValueError("expected %d inputs (%s), got %d" % (
                len(self.input_names), ", ".join(self.input_names), len(inputs)))
        env = dict(self.static)
        env.update(params)
        env.update(zip(self.input_names, inputs))
        for node in self.graph.node:
            ins = [env[name] if name else None for name in node.input]
            for name, value in zip(node.output, _run_node(node, ins)):
                env[name] = value
        return tuple(jnp.asarray(env[name]) for name in self.output_names)

    def to_device(self, device):
        """Moves the parameters onto `device` once, so that runs do not copy them."""
        self.params = jax.device_put(self.params, device)
        return self


def load(path):
    """Reads an ONNX file (weights included) into a JaxModel."""
    return JaxModel(onnx.load(path).graph)

