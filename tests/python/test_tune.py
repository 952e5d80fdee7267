"""dc.tune with the real local farm of emulated dc-worker processes: the result object
against the files the coordinator wrote, a rerun served by the DB, ModelProto input, errors,
and nothing left behind (no process, no temp folder)."""
import json
import os

import numpy as np
import pytest

import dc
from conftest import EXAMPLES, QUICK, descendants, load_test_data, rel_l2

MODEL = EXAMPLES / "tiny_cnn" / "model.onnx"


def test_tune_tiny_cnn(tmp_path, private_cache):
    db, out = tmp_path / "t.db", tmp_path / "plans"
    r = dc.tune(str(MODEL), gpus=["h100"], db=str(db), out=str(out), workers=1, emulate=True,
                config=str(QUICK))
    assert r.plans == {"h100": str(out / "h100")}
    g = r["h100"]
    assert g.emulated
    sel = json.loads((out / "h100" / "selection.json").read_text())
    assert g.clusters == sel["clusters"] and len(g.clusters) > 0
    assert g.measured_total_us == pytest.approx(sel["measured_total_us"])
    assert g.estimated_total_us == pytest.approx(sel["estimated_total_us"])
    assert g.measured_total_us > 0 and g.estimated_total_us > 0
    assert g.variants_measured > 0 and g.variants_failed == 0
    assert g.candidates >= len(g.clusters) and g.workloads > 0 and g.jobs > 0
    assert "h100" in g.summary and db.is_file()
    # what the coordinator started is gone, and no temp folder is left
    assert descendants(os.getpid()) == []
    assert list(private_cache.iterdir()) == []

    # the plan runs and reproduces the test data
    (x,), (y,) = load_test_data(EXAMPLES / "tiny_cnn" / "test_data_set_0")
    with dc.Session(r.plans["h100"], device="emulate") as s:
        assert rel_l2(s.run({"input": x})["output"], y) < 1e-4

    # again on the same DB, from an onnx.ModelProto: nothing measured, same selection
    onnx = pytest.importorskip("onnx")
    r2 = dc.tune(onnx.load(str(MODEL)), gpus="h100", db=str(db), out=str(tmp_path / "again"),
                 workers=1, emulate=True, config=str(QUICK))
    assert r2["h100"].jobs < g.jobs and r2["h100"].variants_measured == g.variants_measured
    assert [c["kernel"] for c in r2["h100"].clusters] == [c["kernel"] for c in g.clusters]
    assert descendants(os.getpid()) == [] and list(private_cache.iterdir()) == []


def test_tune_errors(tmp_path):
    with pytest.raises(dc.TuneError, match="missing.onnx' does not exist"):
        dc.tune(str(tmp_path / "missing.onnx"), db=str(tmp_path / "t.db"),
                out=str(tmp_path / "o"), emulate=True)
    with pytest.raises(dc.TuneError, match="at least one GPU type"):
        dc.tune(str(MODEL), gpus=[], out=str(tmp_path / "o"))
    with pytest.raises(TypeError, match="ONNX file path or an onnx.ModelProto"):
        dc.tune(42)
    with pytest.raises(dc.TuneError, match="unknown GPU 'no-such-gpu'; known: .*h100"):
        dc.tune(str(MODEL), gpus=["no-such-gpu"], db=str(tmp_path / "t.db"),
                out=str(tmp_path / "o"), emulate=True)
    assert descendants(os.getpid()) == []


def test_unsupported_ops_are_named(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph(
        [helper.make_node("Det", ["x"], ["d"], name="det0"),
         helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Det", ["r"], ["e"], name="det1")],
        "dets", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("e", TensorProto.FLOAT, [])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(dc.UnsupportedOpsError) as e:
        dc.tune(model, db=str(tmp_path / "t.db"), out=str(tmp_path / "o"), emulate=True)
    assert e.value.ops == ["Det"]
    assert "Det (2 nodes, first 'det0')" in str(e.value)
