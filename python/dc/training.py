"""dc.TrainingSession: a training plan (`dc-coordinator plan|tune MODEL --train --out DIR`)
run step by step through libdcrt (docs/training.md, docs/python.md)."""
import json
import os

import numpy as np

from . import arrays
from .errors import InputError
from .session import Session, _call


class TrainingSession(Session):
    """Loads the training plan in `plan_dir` on `device` ("cuda:N", "opencl:N" or "emulate").
    Its inputs are the model's inputs followed by the labels. The weights, optimizer state,
    BatchNorm statistics and step counter stay on the device and are updated in place, step
    after step."""

    def __init__(self, plan_dir, device="cuda:0", cache_dir=None):
        super().__init__(plan_dir, device, cache_dir)
        if not _call(self._plan.is_training):
            raise InputError(f"{self.plan_dir} computes inference, not a training step (write it with "
                             "`dc-coordinator plan|tune MODEL --train --out DIR`); use dc.Session")
        self._states = _call(self._plan.states)
        with open(os.path.join(self.plan_dir, "plan.json"), encoding="utf-8") as f:
            self.training = json.load(f)["training"]
        self.steps = 0

    def __repr__(self):
        return (f"dc.TrainingSession({self.plan_dir!r}, device={self.device!r}: {self.model_name}, "
                f"{self.training['loss']} loss, {self.training['optimizer']}, {self.steps} step(s))")

    def run(self, feeds):
        raise InputError("a training plan runs training steps: use step(inputs), which also carries the "
                         "updated state to the next step")

    def step(self, feeds):
        """One training step on `feeds` ({name: array} or the arrays in input order: the
        model's inputs, then the labels). Returns the loss (a float)."""
        with self._lock:
            plan = self._live()
            for i, x in enumerate(self._feeds_by_index(feeds)):
                self._bind(i, x)
                self._bound[i] = True
            self._sync_torch()
            _call(plan.train_step)
            t = self._out[0]
            loss = arrays.empty_host(t["dtype"], tuple(t["shape"]), arrays.HOST, t["name"])
            _call(plan.get_output, 0, arrays.host_bytes_view(loss))
            self.steps += 1
            return float(np.asarray(loss, dtype=np.float64).reshape(-1)[0])

    def state_dict(self):
        """{name: numpy array}: a copy of every state tensor as it is now on the device."""
        with self._lock:
            plan = self._live()
            out = {}
            for i, t in enumerate(self._states):
                a = arrays.empty_host(t["dtype"], tuple(t["shape"]), arrays.HOST, t["name"])
                _call(plan.get_state, i, arrays.host_bytes_view(a))
                out[t["name"]] = a
            return out

    def load_state_dict(self, state, strict=True):
        """Writes state tensors back to the device (a checkpoint from state_dict). `strict`:
        every state tensor must be given, and nothing else."""
        names = [t["name"] for t in self._states]
        unknown = [k for k in state if k not in names]
        missing = [n for n in names if n not in state]
        if unknown:
            raise InputError(f"'{unknown[0]}' is not a state tensor of the plan")
        if strict and missing:
            raise InputError(f"state '{missing[0]}' is missing (strict=False loads a part)")
        with self._lock:
            plan = self._live()
            for i, t in enumerate(self._states):
                if t["name"] not in state:
                    continue
                a = arrays.to_host_array(state[t["name"]], t["name"])
                if a.size == int(np.prod(t["shape"])) and a.ndim <= 1 >= len(t["shape"]):
                    a = a.reshape(tuple(t["shape"]))  # a scalar (the step counter) may come as [1]
                if arrays.dc_dtype_of(a) != t["dtype"] or tuple(a.shape) != tuple(t["shape"]):
                    raise InputError(f"state '{t['name']}' takes {t['dtype']} {tuple(t['shape'])}, got "
                                     f"{arrays.dc_dtype_of(a)} {tuple(a.shape)}")
                _call(plan.set_state, i, arrays.host_bytes_view(np.ascontiguousarray(a)))

    def save(self, path, source_model=None):
        """Writes the source model (plan.json's training.source_model, or `source_model`)
        with its initializers replaced by the trained values: what `dc-run --train
        --save-weights` writes. Returns how many initializers were replaced."""
        import onnx
        from onnx import numpy_helper
        source = os.fspath(source_model or self.training["source_model"])
        model = onnx.load(source)
        state = self.state_dict()
        replaced = 0
        for init in model.graph.initializer:
            if init.name in state:
                old = numpy_helper.to_array(init)
                new = state[init.name]
                if old.shape != new.shape or old.dtype != new.dtype:
                    raise InputError(f"initializer '{init.name}' of {source} is {old.dtype} {old.shape}, the "
                                     f"trained value {new.dtype} {new.shape}")
                init.CopyFrom(numpy_helper.from_array(new, init.name))
                replaced += 1
        if not replaced:
            raise InputError(f"no initializer of {source} is a state tensor of the plan")
        onnx.save(model, os.fspath(path))
        return replaced
