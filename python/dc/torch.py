"""dc.torch.compile: a torch module exported to ONNX, tuned by dc, run through a plan.

    import dc.torch
    fast = dc.torch.compile(model, (x,))        # tunes (or reuses the cached plan)
    y = fast(x)                                 # torch tensors in and out

Where torch.compile exists (PyTorch 2.x), `torch.compile(model, backend="dc")` goes through
the same path (registered on import)."""
import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

import torch

from . import _locate
from .errors import Error
from .session import Session
from .tune import tune

_EMULATED_DEFAULT_GPU = "h100"


def default_db():
    """The per-user tuning DB shared by every compilation: $XDG_CACHE_HOME/dc/tuning.db."""
    return str(_locate.cache_dir() / "tuning.db")


def local_gpu_types():
    """The GPU types (common/gpu/gpus.yaml names) of this machine's devices, as dc-worker
    --list-devices sees them; [] without a GPU or driver."""
    try:
        p = subprocess.run([_locate.executable("dc-worker"), "--list-devices"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if p.returncode != 0:
        return []
    types = []
    for line in p.stdout.splitlines():
        m = re.match(r"\s*(\d+): (\S+)", line)
        if m and m.group(2) not in types:
            types.append(m.group(2))
    return types


def _flatten(out):
    if isinstance(out, torch.Tensor):
        return [out], "tensor"
    if isinstance(out, (list, tuple)) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out), type(out).__name__
    raise Error("dc.torch.compile: the module must return a tensor or a tuple/list of tensors, "
                f"not {type(out).__name__}")


class CompiledModule:
    """A callable standing in for the module: torch tensors in, torch tensors out. One plan
    per input shape signature; a new shape is exported and tuned once more (the tuning DB
    makes the layers it already knows free)."""

    def __init__(self, module, precision, gpus, db, emulate, config, workers, device, progress):
        self.module = module
        self.precision = precision
        self.emulate = emulate
        self.gpus = gpus
        self.db = db
        self.config = config
        self.workers = workers
        self.device = device
        self.progress = progress
        self._plans = {}  # shape signature -> (Session, output structure)

    @staticmethod
    def _signature(args):
        return tuple((tuple(a.shape), str(a.dtype)) for a in args)

    def prepare(self, args):
        """Exports, tunes and loads the plan for these inputs' shapes (if not done yet)."""
        key = self._signature(args)
        if key not in self._plans:
            self._plans[key] = self._build(args)
        return self._plans[key]

    def _build(self, args):
        with torch.no_grad():
            _, structure = _flatten(self.module(*args))
        with tempfile.TemporaryDirectory(prefix="dc-torch-") as tmp:
            onnx_path = os.path.join(tmp, "model.onnx")
            names = [f"input_{i}" for i in range(len(args))]
            with torch.no_grad():
                # torch's default exporter and opset (torch 2.x: dynamo, opset 18+, which the
                # importer adapts; torch 1.13: TorchScript, opset 14), not a forced opset.
                torch.onnx.export(self.module, tuple(args), onnx_path, input_names=names)
            data = Path(onnx_path).read_bytes()
            digest = hashlib.sha256(data + f"|{self.precision}|{','.join(self.gpus)}|"
                                    f"{self.emulate}".encode()).hexdigest()[:16]
            out = _locate.cache_dir() / "plans" / digest
            gpu = self.gpus[0]
            if not (out / gpu / "plan.json").is_file():
                tune(onnx_path, gpus=self.gpus, precision=self.precision, db=self.db,
                     out=str(out), workers=self.workers, emulate=self.emulate,
                     config=self.config, progress=self.progress)
        if not (out / gpu / "plan.json").is_file():
            raise Error(f"dc.torch.compile: tuning wrote no plan for {gpu} (see {out}/{gpu}/summary.txt)")
        session = Session(out / gpu, device="emulate" if self.emulate else self.device)
        return session, structure

    def __call__(self, *args):
        args = [a if isinstance(a, torch.Tensor) else torch.as_tensor(a) for a in args]
        session, structure = self.prepare(args)
        outs = session.run([a.detach() for a in args])
        values = list(outs.values())
        if structure == "tensor":
            return values[0]
        return tuple(values) if structure == "tuple" else values

    forward = __call__


def compile(module, example_inputs, precision="fp32", gpus=None, db=None, emulate=None, *,
            config=None, workers=None, progress=None):
    """Exports `module` to ONNX on `example_inputs`, tunes it with dc and returns a callable
    that runs the plan on torch tensors.

    gpus: GPU types to tune for (default: the local GPU's type, or h100 when emulating; the
    plan of the first one runs); emulate: emulated workers and the host emulator (default:
    when this machine has no GPU); db: the tuning DB (default: a per-user cache file,
    $XDG_CACHE_HOME/dc/tuning.db); config: a tuning YAML; workers, progress: as dc.tune.
    Ops dc does not support raise dc.UnsupportedOpsError naming them."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    local = [] if emulate else local_gpu_types()
    if emulate is None:
        emulate = not local
    if gpus is None:
        gpus = [_EMULATED_DEFAULT_GPU] if emulate else local[:1]
    if isinstance(gpus, str):
        gpus = [gpus]
    if not gpus:
        raise Error("dc.torch.compile: no GPU found to tune for; pass emulate=True")
    device = "cuda:0"
    for a in example_inputs:
        if isinstance(a, torch.Tensor) and a.device.type == "cuda":
            device = f"cuda:{a.device.index or 0}"
    compiled = CompiledModule(module, precision, list(gpus), db or default_db(), emulate, config,
                              workers, device, progress)
    _ensure_cache_dir(compiled.db)
    compiled.prepare(list(example_inputs))
    return compiled


def _ensure_cache_dir(db):
    Path(db).parent.mkdir(parents=True, exist_ok=True)
    (_locate.cache_dir() / "plans").mkdir(parents=True, exist_ok=True)


def _register_backend():
    """torch.compile(model, backend="dc") on PyTorch 2.x: the FX graph dynamo hands over is a
    module like any other."""
    if not hasattr(torch, "compile"):
        return False
    try:
        from torch._dynamo import register_backend
    except ImportError:
        return False

    def dc_backend(gm, example_inputs, **options):
        compiled = compile(gm, example_inputs, **options)
        return lambda *args: compiled(*args)

    try:
        register_backend(compiler_fn=dc_backend, name="dc")
    except Exception:  # already registered (module reloaded)
        pass
    return True


BACKEND_REGISTERED = _register_backend()
