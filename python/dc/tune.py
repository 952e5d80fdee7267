"""dc.tune: `dc-coordinator tune` from Python. It runs the coordinator executable itself (the
one pipeline, progress on the terminal as on the command line) and reads the files it
writes: OUT/<gpu>/summary.txt and selection.json (docs/tune.md)."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import _locate
from .errors import TuneError, UnsupportedOpsError


@dataclass
class GpuTuneResult:
    """One GPU type's outcome (its summary.txt and selection.json)."""
    gpu: str
    plan_dir: str = None            # OUT/<gpu>, None if nothing was selected
    emulated: bool = False
    clusters: list = field(default_factory=list)   # selection.json's chosen clusters
    candidates: int = 0             # candidate clusters of the model
    workloads: int = 0              # distinct workloads among them
    variants_measured: int = 0      # variants with a successful result in the DB
    variants_failed: int = 0        # failed variants, excluded from the selection
    jobs: int = 0                   # jobs this run sent (0: everything was in the DB)
    estimated_total_us: float = None
    measured_total_us: float = None
    reference_fallbacks: int = 0
    summary: str = ""


@dataclass
class TuneResult:
    """What dc.tune did: `plans` maps each GPU type with a plan to its folder."""
    out: str
    db: str
    gpus: dict
    output: str = ""                # what the coordinator printed when not on a terminal

    @property
    def plans(self):
        return {g: r.plan_dir for g, r in self.gpus.items() if r.plan_dir}

    def __getitem__(self, gpu):
        return self.gpus[gpu]


def _count(pattern, text, default=0):
    m = re.search(pattern, text, re.M)
    return int(m.group(1)) if m else default


def _failed_variants(summary):
    m = re.search(r"^in the DB\s+\d+ variants ok; failed, excluded: (.*)$", summary, re.M)
    if not m or m.group(1).strip() == "none":
        return 0
    return sum(int(n) for n in re.findall(r"(\d+) \S+", m.group(1)))


def _read_gpu(out, gpu):
    r = GpuTuneResult(gpu=gpu)
    d = Path(out) / gpu
    summary = d / "summary.txt"
    if summary.is_file():
        r.summary = summary.read_text(encoding="utf-8")
        r.emulated = "EMULATED" in r.summary.splitlines()[0] if r.summary else False
        r.candidates = _count(r"^clusters\s+(\d+) candidates", r.summary)
        r.workloads = _count(r"candidates, (\d+) distinct workloads", r.summary)
        r.variants_measured = _count(r"^in the DB\s+(\d+) variants ok", r.summary)
        r.variants_failed = _failed_variants(r.summary)
        r.jobs = _count(r"^this run\s+(\d+) jobs sent", r.summary)
    selection = d / "selection.json"
    if selection.is_file():
        s = json.loads(selection.read_text(encoding="utf-8"))
        r.clusters = s.get("clusters", [])
        r.estimated_total_us = s.get("estimated_total_us")
        r.measured_total_us = s.get("measured_total_us")
        r.reference_fallbacks = s.get("reference_fallbacks", 0)
        r.emulated = s.get("source") == "emulated" or r.emulated
    if (d / "plan.json").is_file():
        r.plan_dir = str(d)
    return r


def _error_from(output, returncode):
    lines = [l for l in output.splitlines() if l.startswith("error:")]
    message = lines[-1][len("error:"):].strip() if lines else (
        f"dc-coordinator tune exited with status {returncode}")
    m = re.search(r"unsupported ops?: (.*)$", message)
    if m:
        ops = re.findall(r"([\w.:]+) \(\d+ nodes?", m.group(1))
        return UnsupportedOpsError(f"dc does not support {', '.join(ops)}: {message}", ops,
                                   output, returncode)
    return TuneError(message, output, returncode)


_HELP = {}


def _supports_flag(coordinator, flag):
    if coordinator not in _HELP:
        p = subprocess.run([coordinator, "tune", "--help"], capture_output=True, text=True)
        _HELP[coordinator] = p.stdout + p.stderr
    return re.search(re.escape(flag) + r"(?![\w-])", _HELP[coordinator]) is not None


def _run(cmd, progress):
    """Runs the coordinator and returns (exit status, everything it printed). With progress
    its output also goes to our terminal as it comes; on a terminal the coordinator gets a
    pseudo-terminal, so it draws its progress bar as on the command line. Ctrl-C stops it
    (SIGINT: it shuts its own workers down) and waits for it."""
    use_pty = progress and sys.stderr.isatty()
    if use_pty:
        import pty
        import termios
        import tty
        master, slave = pty.openpty()
        tty.setraw(slave)  # no \n -> \r\n there: our own terminal translates once
        try:  # the coordinator sizes its bar to the terminal's width
            import fcntl
            fcntl.ioctl(slave, termios.TIOCSWINSZ, fcntl.ioctl(sys.stderr.fileno(), termios.TIOCGWINSZ, b"\0" * 8))
        except OSError:
            pass
        proc = subprocess.Popen(cmd, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
        os.close(slave)
        fd = master
    else:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        fd = proc.stdout.fileno()
    chunks = []

    def pump():
        while True:
            try:
                b = os.read(fd, 65536)
            except OSError:  # a pty's master reads EIO once the child has gone
                break
            if not b:
                break
            chunks.append(b)
            if progress:
                sink = sys.stderr if use_pty else sys.stdout
                sink.write(b.decode(errors="replace"))
                sink.flush()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    try:
        rc = proc.wait()
    except BaseException:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        t.join(timeout=10)
        if use_pty:
            os.close(master)
        else:
            proc.stdout.close()
    return rc, b"".join(chunks).decode(errors="replace")


def tune(model, gpus=("h100",), precision="fp32", db="dc-tuning.db", out="plans/", workers=None,
         emulate=False, config=None, *, progress=None, extra_args=()):
    """Tunes `model` (an ONNX path or an onnx.ModelProto) as `dc-coordinator tune` does and
    writes a plan per GPU type into `out`/<gpu>. Returns a TuneResult.

    gpus: GPU types ("h100", "a100", ...); precision: the plan's precision (fp32; fp16,
    bf16 and tf32 where the coordinator has --precision); db: the tuning DB (SQLite; what it
    holds is not measured again); workers: None (a local farm: one worker per local GPU, or
    one emulated worker per GPU type), an int (that many local workers), or
    "tcp://ADDR:PORT" (serve remote dc-worker daemons there); emulate: emulated workers
    (times from a timing model, for machines without a GPU); config: a tuning YAML
    (examples/tune.yaml); progress: show the coordinator's progress (default: when stderr
    is a terminal); extra_args: more `dc-coordinator tune` flags."""
    coordinator = _locate.executable("dc-coordinator")
    if isinstance(gpus, str):
        gpus = [g for g in gpus.split(",") if g]
    gpus = list(gpus)
    if not gpus:
        raise TuneError("tune needs at least one GPU type, e.g. gpus=['h100']")
    if progress is None:
        progress = sys.stderr.isatty()
    with tempfile.TemporaryDirectory(prefix="dc-tune-") as tmp:
        if isinstance(model, (str, os.PathLike)):
            model_path = os.fspath(model)
        elif hasattr(model, "SerializeToString"):
            model_path = os.path.join(tmp, (model.graph.name or "model") + ".onnx")
            with open(model_path, "wb") as f:
                f.write(model.SerializeToString())
        else:
            raise TypeError(f"model must be an ONNX file path or an onnx.ModelProto, not "
                            f"{type(model).__name__}")
        cmd = [coordinator, "tune", model_path, "--gpus", ",".join(gpus), "--db", os.fspath(db),
               "--out", os.fspath(out)]
        if precision != "fp32" or _supports_flag(coordinator, "--precision"):
            if not _supports_flag(coordinator, "--precision"):
                raise TuneError(f"precision {precision!r}: this dc-coordinator ({coordinator}) "
                                "has no --precision; it tunes fp32 plans only")
            cmd += ["--precision", precision]
        if isinstance(workers, str):
            cmd += ["--bind", workers]
        elif workers is not None:
            cmd += ["--local-workers", str(int(workers))]
        if emulate:
            cmd.append("--emulate")
        if config:
            cmd += ["--config", os.fspath(config)]
        if not progress:
            cmd.append("--quiet")
        cmd += [str(a) for a in extra_args]
        rc, output = _run(cmd, progress)
    if rc != 0:
        raise _error_from(output, rc)
    return TuneResult(out=os.fspath(out), db=os.fspath(db),
                      gpus={g: _read_gpu(out, g) for g in gpus}, output=output)
