"""Arrays in and out of a plan: numpy arrays, torch tensors (CPU: the host path; CUDA on the
plan's device: the zero-copy path) and other DLPack producers on the CPU."""
import sys

import numpy as np

# dc's dtype names (common/ir/dtype.cpp) and numpy's.
NUMPY_DTYPES = {
    "f32": np.float32, "f16": np.float16, "f64": np.float64,
    "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "bool": np.bool_,
}
_DC_BY_NUMPY = {np.dtype(v): k for k, v in NUMPY_DTYPES.items()}

# The public names of .inputs/.outputs dtypes: numpy's ("float32"), bfloat16 as torch says it.
PUBLIC_NAMES = {k: np.dtype(v).name for k, v in NUMPY_DTYPES.items()}
PUBLIC_NAMES["bf16"] = "bfloat16"

HOST, TORCH_CPU, TORCH_CUDA = "numpy", "torch", "torch-cuda"


def _torch():
    return sys.modules.get("torch")  # only if the caller already uses torch


def is_torch_tensor(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def torch_dtypes():
    import torch
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
            "f64": torch.float64, "i64": torch.int64, "i32": torch.int32, "i16": torch.int16,
            "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool}


def dc_dtype_of(x):
    """dc's name of an array's dtype, or its own name where dc has none."""
    if is_torch_tensor(x):
        for k, v in torch_dtypes().items():
            if x.dtype == v:
                return k
        return str(x.dtype).replace("torch.", "")
    return _DC_BY_NUMPY.get(x.dtype, x.dtype.name)


def kind_of(x):
    if is_torch_tensor(x):
        return TORCH_CUDA if x.device.type == "cuda" else TORCH_CPU
    return HOST


def to_host_array(x, name):
    """A C-contiguous array (numpy, or a torch tensor kept as is) of any input on the host."""
    if is_torch_tensor(x):
        return x.detach().cpu().contiguous()
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x)
    if hasattr(x, "__dlpack__"):
        dev = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (1, 0)
        if dev[0] != 1:  # not kDLCPU
            from .errors import InputError
            raise InputError(f"input '{name}': a DLPack tensor on device type {dev[0]} can only be "
                             "bound as a torch CUDA tensor (or copy it to the host first)")
        return np.ascontiguousarray(np.from_dlpack(x))
    from .errors import InputError
    raise InputError(f"input '{name}': expected a numpy array, a torch tensor or a DLPack tensor, "
                     f"got {type(x).__name__}")


def host_bytes_view(a):
    """A buffer-protocol view of a host array's bytes (torch tensors through numpy)."""
    if is_torch_tensor(a):
        if a.dtype == torch_dtypes()["bf16"]:  # numpy has no bfloat16: its bits as int16
            import torch
            a = a.view(torch.int16)
        return a.numpy()
    return a


def empty_host(dc_dtype, shape, kind, name):
    """An output array of the kind that came in, to receive a plan's output bytes."""
    if kind in (TORCH_CPU, TORCH_CUDA):
        import torch
        return torch.empty(shape, dtype=torch_dtypes()[dc_dtype])
    if dc_dtype not in NUMPY_DTYPES:
        from .errors import Error
        raise Error(f"output '{name}' has dtype {dc_dtype}, which numpy does not have: pass torch "
                    "tensors to get it")
    return np.empty(shape, dtype=NUMPY_DTYPES[dc_dtype])


def random_input(dc_dtype, shape, seed):
    """dc-run's seeded inputs: floats uniform in [-1, 1), integers and bools 0 or 1."""
    rng = np.random.default_rng(seed)
    if dc_dtype in ("f32", "f16", "f64"):
        return rng.uniform(-1, 1, size=shape).astype(NUMPY_DTYPES[dc_dtype])
    if dc_dtype == "bf16":
        import torch
        return torch.from_numpy(rng.uniform(-1, 1, size=shape).astype(np.float32)).to(torch.bfloat16)
    return rng.integers(0, 2, size=shape).astype(NUMPY_DTYPES[dc_dtype])
