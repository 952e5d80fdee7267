"""dc.TrainingSession (docs/training.md, docs/python.md): steps on the host emulator equal
dc-run --train's, state_dict / load_state_dict restore a checkpoint exactly, save() writes a
model that onnx loads with the trained values, and inference plans are refused."""
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import dc
from conftest import BIN_DIR, EXAMPLES

MODEL = EXAMPLES / "tiny_cnn" / "model.onnx"


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "plan"
    p = subprocess.run([str(BIN_DIR / "dc-coordinator"), "plan", str(MODEL), "--gpus", "h100", "--train",
                        "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One emulator compile cache for the module's sessions (40 modules compile once)."""
    return str(tmp_path_factory.mktemp("kernels"))


def batch():
    rng = np.random.default_rng(3)
    return {"input": rng.uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32),
            "labels": np.array([4], dtype=np.int64)}


def test_steps_equal_dc_run(plan_dir, cache, tmp_path):
    feeds = batch()
    data = tmp_path / "batch"
    data.mkdir()
    for i, name in enumerate(("input", "labels")):
        (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(feeds[name], name).SerializeToString())
    p = subprocess.run([str(BIN_DIR / "dc-run"), str(plan_dir), "--train", "--emulate", "--data", str(data),
                        "--steps", "3", "--cache-dir", cache], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    want = [float(x) for x in re.findall(r"^step \d+ loss (\S+)$", p.stdout, re.M)]
    with dc.TrainingSession(plan_dir, device="emulate", cache_dir=cache) as s:
        got = [s.step(feeds) for _ in range(3)]
        assert s.steps == 3
    assert len(want) == 3 and np.allclose(got, want, rtol=1e-6), (got, want)
    assert got[2] < got[0]  # SGD at lr 0.1 on one batch: the loss falls


def test_a_checkpoint_restores_the_state_exactly(plan_dir, cache):
    feeds = batch()
    with dc.TrainingSession(plan_dir, device="emulate", cache_dir=cache) as s:
        s.step(feeds)
        checkpoint = s.state_dict()
        assert "train.step" in checkpoint and checkpoint["train.step"].reshape(-1)[0] == 1
        second = s.step(feeds)
        moved = s.state_dict()
        assert any(not np.array_equal(moved[k], checkpoint[k]) for k in checkpoint)
        s.load_state_dict(checkpoint)
        restored = s.state_dict()
        assert all(np.array_equal(restored[k], checkpoint[k]) for k in checkpoint)
        assert s.step(feeds) == second
        with pytest.raises(dc.InputError, match="is missing"):
            s.load_state_dict({"train.step": checkpoint["train.step"]})
        with pytest.raises(dc.InputError, match="not a state tensor"):
            s.load_state_dict({"nope": np.zeros(1, np.float32)}, strict=False)


def test_save_writes_the_trained_weights(plan_dir, cache, tmp_path):
    with dc.TrainingSession(plan_dir, device="emulate", cache_dir=cache) as s:
        s.step(batch())
        state = s.state_dict()
        replaced = s.save(tmp_path / "trained.onnx")
    saved = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / "trained.onnx")).graph.initializer}
    source = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(MODEL)).graph.initializer}
    assert replaced == sum(1 for k in source if k in state) and replaced > 0
    assert set(saved) == set(source)
    for k in saved:
        assert np.array_equal(saved[k], state[k] if k in state else source[k]), k


def test_inference_plans_and_run_are_refused(plan_dir, cache, tiny_cnn_plan):
    with pytest.raises(dc.InputError, match="computes inference"):
        dc.TrainingSession(tiny_cnn_plan, device="emulate", cache_dir=cache)
    with dc.TrainingSession(plan_dir, device="emulate", cache_dir=cache) as s:
        with pytest.raises(dc.InputError, match="use step"):
            s.run(batch())


def test_fp16_mixed_precision_state_and_skipped_steps(cache, tmp_path):
    """An fp16 AMP plan (docs/training.md "Mixed precision"): the session's losses are
    dc-run's, and its state_dict holds the loss scaling: the scale halved once per step that
    dc-run says it skipped, and the step counter counting only the steps taken."""
    out = tmp_path / "plan16"
    p = subprocess.run([str(BIN_DIR / "dc-coordinator"), "plan", str(MODEL), "--gpus", "h100", "--train",
                        "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--precision", "fp16",
                        "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    feeds = batch()
    data = tmp_path / "batch"
    data.mkdir()
    for i, name in enumerate(("input", "labels")):
        (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(feeds[name], name).SerializeToString())
    p = subprocess.run([str(BIN_DIR / "dc-run"), str(out), "--train", "--emulate", "--data", str(data),
                        "--steps", "3", "--cache-dir", cache], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = re.findall(r"^step \d+ loss (\S+)(.*)$", p.stdout, re.M)
    skipped = sum("(skipped: overflow" in note for _, note in lines)
    with dc.TrainingSession(out, device="emulate", cache_dir=cache) as s:
        got = [s.step(feeds) for _ in range(3)]
        state = s.state_dict()
    assert np.allclose(got, [float(x) for x, _ in lines], rtol=1e-6), (got, lines)
    assert float(np.asarray(state["train.loss_scale"]).reshape(-1)[0]) == 65536.0 / 2 ** skipped
    assert int(np.asarray(state["train.step"]).reshape(-1)[0]) == 3 - skipped
    assert state["fc.weight"].dtype == np.float32  # the master weights
