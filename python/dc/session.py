"""dc.Session: a tuned plan (the folder `dc-coordinator tune --out` writes per GPU type)
loaded through libdcrt, run on numpy arrays or torch tensors."""
import json
import math
import os
import re
import threading
import warnings
from collections import namedtuple

import numpy as np

from . import _dcrt
from . import arrays
from .errors import InputError, PlanWarning, from_dcrt

TensorInfo = namedtuple("TensorInfo", "name shape dtype")
TensorInfo.__doc__ = "A plan input or output: name, shape (tuple) and dtype ('float32', ...)."

BenchmarkResult = namedtuple("BenchmarkResult", "median_ms p99_ms min_ms mean_ms runs warmup samples_us")
BenchmarkResult.__doc__ = "dc-run --bench's statistics, and every sample in microseconds."


def _call(fn, *args):
    try:
        return fn(*args)
    except _dcrt.Error as e:
        raise from_dcrt(e) from None


def _parse_device(device):
    """'emulate' -> (True, 0, 'emulate'); 'cuda' / 'cuda:N' / N -> (False, N, 'cuda');
    'opencl' / 'opencl:N' -> (False, N, 'opencl'): OpenCL device N (dc-worker --list-devices),
    which a plan for an OpenCL device type (pocl-cpu, ...) runs on (docs/opencl.md)."""
    if device == "emulate":
        return True, 0, "emulate"
    if isinstance(device, int) and device >= 0:
        return False, device, "cuda"
    m = re.fullmatch(r"(cuda|opencl)(?::(\d+))?", str(device))
    if not m:
        raise ValueError(f"device must be 'cuda', 'cuda:N', 'opencl', 'opencl:N' or 'emulate', not {device!r}")
    return False, int(m.group(2) or 0), m.group(1)


def _shape_text(dc_dtype, shape):
    return f"{dc_dtype} {'x'.join(str(d) for d in shape) if shape else 'scalar'}"


class Session:
    """Loads the plan in `plan_dir` on `device` ("cuda:0", "cuda:N" or "emulate": the host
    emulator, CPU, correctness only). A plan tuned for another GPU type loads with a
    PlanWarning, as dc-run warns. Errors raise dc.Error subclasses with dc's message."""

    def __init__(self, plan_dir, device="cuda:0", cache_dir=None):
        self.plan_dir = os.fspath(plan_dir)
        self.emulated, self._ordinal, api = _parse_device(device)
        self.device = "emulate" if self.emulated else f"{api}:{self._ordinal}"
        self._opencl = api == "opencl"
        self._lock = threading.Lock()
        self._plan = _call(_dcrt.Plan, self.plan_dir, self.emulated, self._ordinal,
                           os.fspath(cache_dir) if cache_dir else "")
        self._in = _call(self._plan.inputs)
        self._out = _call(self._plan.outputs)
        self._bound = [False] * len(self._in)
        self._torch_cuda_used = False
        meta = self._read_meta()
        self.gpu_type = meta.get("gpu_type", "")
        self.precision = meta.get("precision", "fp32")  # plans before reduced precision: fp32
        self.model_name = meta.get("model_name", "")
        self.device_description = _call(self._plan.device_description)
        self.warnings = _call(self._plan.warnings)
        for w in self.warnings:
            warnings.warn(w, PlanWarning, stacklevel=2)

    def _read_meta(self):
        # libdcrt has validated plan.json; only the fields it does not expose are read here.
        with open(os.path.join(self.plan_dir, "plan.json"), encoding="utf-8") as f:
            plan = json.load(f)
        return {k: plan[k] for k in ("gpu_type", "precision", "model_name") if k in plan}

    @property
    def inputs(self):
        return [TensorInfo(t["name"], t["shape"], arrays.PUBLIC_NAMES.get(t["dtype"], t["dtype"]))
                for t in self._in]

    @property
    def outputs(self):
        return [TensorInfo(t["name"], t["shape"], arrays.PUBLIC_NAMES.get(t["dtype"], t["dtype"]))
                for t in self._out]

    def __repr__(self):
        return (f"dc.Session({self.plan_dir!r}, device={self.device!r}: {self.model_name}, "
                f"{self.gpu_type}, {self.precision})")

    def close(self):
        """Frees the plan's device memory now (else when the session is collected)."""
        with self._lock:
            if self._plan is not None:
                self._plan.close()
                self._plan = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _live(self):
        if self._plan is None:
            raise ValueError("the session is closed")
        return self._plan

    # ---- inputs -------------------------------------------------------------------------
    def _feeds_by_index(self, feeds):
        names = [t["name"] for t in self._in]
        if not isinstance(feeds, dict):
            feeds = list(feeds) if isinstance(feeds, (list, tuple)) else [feeds]
            if len(feeds) != len(names):
                raise InputError(f"the plan has {len(names)} input(s) ({', '.join(names)}), "
                                 f"{len(feeds)} given")
            return list(feeds)
        unknown = [k for k in feeds if k not in names]
        if unknown:
            raise InputError(f"unknown input '{unknown[0]}': the plan's inputs are "
                             + ", ".join(f"'{n}'" for n in names))
        missing = [i for i, n in enumerate(names) if n not in feeds]
        if missing:
            t = self._in[missing[0]]
            raise InputError(f"missing input '{t['name']}' ({_shape_text(t['dtype'], t['shape'])})")
        return [feeds[n] for n in names]

    def _check(self, i, x):
        t = self._in[i]
        got_dtype = arrays.dc_dtype_of(x)
        got_shape = tuple(int(d) for d in x.shape)
        if got_dtype != t["dtype"] or got_shape != tuple(t["shape"]):
            raise InputError(f"input '{t['name']}' takes {_shape_text(t['dtype'], t['shape'])}, "
                             f"got {_shape_text(got_dtype, got_shape)}")

    def _bind(self, i, x):
        t = self._in[i]
        if arrays.kind_of(x) == arrays.TORCH_CUDA and not self.emulated and not self._opencl:
            if x.device.index != self._ordinal:
                raise InputError(f"input '{t['name']}' is on cuda:{x.device.index}, but the plan "
                                 f"runs on {self.device}")
            self._bind_cuda(i, x)
            return
        a = arrays.to_host_array(x, t["name"])
        self._check(i, a)
        _call(self._live().set_input, i, arrays.host_bytes_view(a))

    def _bind_cuda(self, i, x):
        """Zero copy: the tensor is copied device to device into the plan's input buffer."""
        import torch.utils.dlpack
        self._check(i, x)
        dst = torch.utils.dlpack.from_dlpack(_call(self._live().input_device_view, i, self._ordinal))
        dst.copy_(x.detach())
        self._torch_cuda_used = True

    def _sync_torch(self):
        # dc runs on its own non-blocking stream: torch's pending copies into (or out of) the
        # plan's buffers must finish before dc touches them.
        if self._torch_cuda_used:
            import torch
            torch.cuda.synchronize(self._ordinal)

    # ---- running ------------------------------------------------------------------------
    def run(self, feeds):
        """Runs the plan once. `feeds`: {input name: array}, or the arrays in input order.
        Returns {output name: array}, arrays of the kind that came in (numpy arrays, torch
        CPU tensors, or torch CUDA tensors on the plan's device)."""
        with self._lock:
            plan = self._live()
            values = self._feeds_by_index(feeds)
            kinds = {arrays.kind_of(x) for x in values}
            kind = kinds.pop() if len(kinds) == 1 else arrays.HOST
            for i, x in enumerate(values):
                self._bind(i, x)
                self._bound[i] = True
            self._sync_torch()
            _call(plan.run)
            if kind == arrays.TORCH_CUDA and not self.emulated and not self._opencl:
                return self._cuda_outputs(plan)
            out = {}
            for i, t in enumerate(self._out):
                o = arrays.empty_host(t["dtype"], tuple(t["shape"]), kind, t["name"])
                _call(plan.get_output, i, arrays.host_bytes_view(o))
                if kind == arrays.TORCH_CUDA:  # emulated or OpenCL: back to the tensors' device
                    o = o.to(values[0].device)
                out[t["name"]] = o
            return out

    def _cuda_outputs(self, plan):
        import torch.utils.dlpack
        out = {}
        for i, t in enumerate(self._out):
            view = torch.utils.dlpack.from_dlpack(_call(plan.output_device_view, i, self._ordinal))
            out[t["name"]] = view.clone()  # the plan's buffer is overwritten by the next run
        self._torch_cuda_used = True
        return out

    def benchmark(self, n=100, warmup=20):
        """dc-run --bench N: N timed runs after `warmup` untimed ones (GPU only), on the inputs
        bound last or, if none were, on dc-run's seeded random inputs. Returns median, p99,
        min and mean latency in ms and every sample."""
        with self._lock:
            plan = self._live()
            for i, t in enumerate(self._in):
                if not self._bound[i]:
                    r = arrays.random_input(t["dtype"], tuple(t["shape"]), 1 + i)
                    _call(plan.set_input, i, arrays.host_bytes_view(r))
                    self._bound[i] = True
            self._sync_torch()
            us = sorted(_call(plan.time_runs, int(warmup), int(n)))
        def at(q):
            k = int(math.ceil(q * len(us)))
            return us[min(max(k, 1), len(us)) - 1]
        return BenchmarkResult(at(0.5) / 1000, at(0.99) / 1000, us[0] / 1000,
                               float(np.mean(us)) / 1000, len(us), int(warmup), us)
