"""Fixtures of the Python package's tests (docs/python.md "Tests"). ctest runs them with
DC_SOURCE_DIR, DC_BIN_DIR and PYTHONPATH=build/python set; by hand:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("DC_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BIN_DIR = Path(os.environ.get("DC_BIN_DIR", SOURCE_DIR / "build" / "bin"))
EXAMPLES = SOURCE_DIR / "examples"
QUICK = EXAMPLES / "tune-quick.yaml"
os.environ.setdefault("DC_BIN_DIR", str(BIN_DIR))


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test gets its own per-user cache and temp folder, so that tests neither share
    state nor touch the user's ~/.cache/dc, and leftovers can be seen."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def tune_cli(model, out, gpus="h100", extra=()):
    """`dc-coordinator tune --emulate` with one emulated local worker: plans for the Session
    tests. dc.tune itself is tested in test_tune.py."""
    cmd = [str(BIN_DIR / "dc-coordinator"), "tune", str(model), "--gpus", gpus, "--emulate",
           "--local-workers", "1", "--config", str(QUICK), "--out", str(out),
           "--db", str(Path(out).parent / "tuning.db"), "--quiet", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return Path(out)


@pytest.fixture(scope="session")
def tiny_cnn_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_cnn") / "out"
    return tune_cli(EXAMPLES / "tiny_cnn" / "model.onnx", out) / "h100"


def load_test_data(folder):
    """input_N.pb and output_N.pb of an ONNX test-data folder, as numpy arrays."""
    import onnx
    from onnx import numpy_helper

    def read(prefix):
        files = sorted(Path(folder).glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        return [numpy_helper.to_array(onnx.load_tensor(str(f))) for f in files]

    return read("input"), read("output")


def rel_l2(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def descendants(pid):
    """Live processes descended from `pid` (from /proc)."""
    children = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        state = stat.rsplit(")", 1)[1].split()[0]
        if state != "Z":
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def run_python(code, **env):
    """`code` in a fresh interpreter (for what must not crash it)."""
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                          timeout=600)
