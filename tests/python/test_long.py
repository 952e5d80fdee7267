"""Acceptance checks on real models (ctest -L long; models from scripts/export_models.py in
models/, the exported_models fixture): Session reproduces `dc-run --emulate --data` on a
tuned ResNet-50 plan, and dc.torch.compile of a torchvision model on emulated workers agrees
with the module within tolerance."""
import os
import re
import subprocess
from pathlib import Path

import pytest

import dc
from conftest import BIN_DIR, QUICK, SOURCE_DIR, load_test_data, rel_l2

MODELS = Path(os.environ.get("DC_MODELS_DIR", SOURCE_DIR / "models"))
TOL = 1e-4  # fp32 plans, dc-run --data's default rtol


def test_session_reproduces_dc_run_on_resnet50(tmp_path):
    model = MODELS / "resnet50" / "model.onnx"
    data = MODELS / "resnet50" / "test_data_set_0"
    if not model.is_file():
        pytest.fail(f"{model} missing: run scripts/export_models.py {MODELS} (ctest's "
                    "export_models fixture does)")
    out = tmp_path / "out"
    r = dc.tune(str(model), gpus=["a100"], db=str(tmp_path / "t.db"), out=str(out), workers=2,
                emulate=True, config=str(QUICK))
    plan = r.plans["a100"]
    assert r["a100"].reference_fallbacks == 0 and len(r["a100"].clusters) > 0

    run = subprocess.run([str(BIN_DIR / "dc-run"), plan, "--emulate", "--data", str(data),
                          "--cache-dir", str(tmp_path / "kcache")],
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0 and "dc-run: PASS" in run.stdout, run.stdout + run.stderr
    m = re.search(r"^\s+(\S+)\s+\S+\s+([0-9.e+-]+)\s+([0-9.e+-]+)\s+PASS", run.stdout, re.M)
    assert m, run.stdout
    dc_run_max_abs, dc_run_rel_l2 = float(m.group(2)), float(m.group(3))

    (x,), (y,) = load_test_data(data)
    with dc.Session(plan, device="emulate", cache_dir=tmp_path / "kcache") as s:
        o = s.run({s.inputs[0].name: x})[s.outputs[0].name]
    # the same plan, kernels and inputs: the errors dc-run printed (3 significant digits)
    assert f"{rel_l2(o, y):.3e}" == f"{dc_run_rel_l2:.3e}"
    assert f"{float(abs(o.astype('f8') - y).max()):.3e}" == f"{dc_run_max_abs:.3e}"
    assert rel_l2(o, y) < TOL


def test_torch_compile_torchvision_resnet18():
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    import dc.torch
    torch.manual_seed(0)
    m = torchvision.models.resnet18(num_classes=100).eval()
    x = torch.randn(1, 3, 224, 224)
    f = dc.torch.compile(m, (x,), config=str(QUICK), workers=2, emulate=True, gpus=["a100"])
    with torch.no_grad():
        x2 = torch.randn(1, 3, 224, 224)
        assert rel_l2(f(x2).numpy(), m(x2).numpy()) < TOL
