"""dc: a fusion-aware deep-learning compiler and autotuner (docs/python.md).

    sess = dc.Session("plans/h100", device="cuda:0")      # or device="emulate"
    out = sess.run({"input": x})                          # numpy in, numpy out
    train = dc.TrainingSession("trained/h100")            # plan|tune --train --out
    loss = train.step({"input": x, "labels": y})
    result = dc.tune("model.onnx", gpus=["h100"], out="plans/")
    fast = dc.torch.compile(module, (x,))                 # import dc.torch first
"""
from .errors import (Error, InputError, LoadError, PlanWarning, RunError, TuneError,
                     UnsupportedError, UnsupportedOpsError)
from .session import BenchmarkResult, Session, TensorInfo
from .training import TrainingSession
from .tune import GpuTuneResult, TuneResult, tune

__version__ = "0.1.0"

__all__ = ["Session", "TrainingSession", "TensorInfo", "BenchmarkResult", "tune", "TuneResult", "GpuTuneResult",
           "Error", "LoadError", "InputError", "RunError", "UnsupportedError", "TuneError",
           "UnsupportedOpsError", "PlanWarning"]
