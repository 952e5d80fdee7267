"""The CUDA path of dc.Session (ctest -L gpu): torch CUDA tensors bound without a host copy
(into the plan's own device buffers, device to device), checked against the numpy path and
the test data; benchmark(); a plan of another GPU type warns. Where no CUDA driver or device
exists every test skips with the reason; with DC_REQUIRE_GPU=1 they fail instead (a GPU CI
runner must not pass by skipping)."""
import os
import subprocess
import warnings

import numpy as np
import pytest

import dc
from conftest import BIN_DIR, EXAMPLES, load_test_data, rel_l2, tune_cli

DATA = EXAMPLES / "tiny_cnn" / "test_data_set_0"
TOL = 1e-4


def _local_gpu():
    """(gpu type, None) of device 0, or (None, why not)."""
    p = subprocess.run([str(BIN_DIR / "dc-worker"), "--list-devices", "--device", "0"],
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        parts = line.split()
        if p.returncode == 0 and len(parts) >= 2 and parts[0] == "0:":
            return parts[1], None
    return None, (p.stdout + p.stderr).strip().splitlines()[0] if (p.stdout + p.stderr).strip() \
        else f"dc-worker --list-devices exited {p.returncode}"


GPU, WHY = _local_gpu()


@pytest.fixture(scope="module", autouse=True)
def need_gpu():
    if GPU is None:
        if os.environ.get("DC_REQUIRE_GPU") == "1":
            pytest.fail(f"DC_REQUIRE_GPU=1 but no usable CUDA device: {WHY}")
        pytest.skip(f"no CUDA device: {WHY}")


@pytest.fixture(scope="module")
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        if os.environ.get("DC_REQUIRE_GPU") == "1":
            pytest.fail("DC_REQUIRE_GPU=1 but this torch has no CUDA (a CPU-only build?)")
        pytest.skip(f"torch {torch.__version__} cannot use the GPU (CPU-only build)")
    return torch


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    # Tuned for this GPU's type with the emulated in-process farm (quick); the kernels are
    # compiled for the device itself at load.
    return tune_cli(EXAMPLES / "tiny_cnn" / "model.onnx", tmp_path_factory.mktemp("gpu") / "out",
                    gpus=GPU) / GPU


@pytest.fixture(scope="module")
def session(plan, tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the plan's own GPU type: no warning
        s = dc.Session(plan, device="cuda:0", cache_dir=tmp_path_factory.mktemp("kcache"))
    yield s
    s.close()


def test_numpy_on_the_gpu(session):
    assert not session.emulated and session.gpu_type == GPU
    assert "cuda:0" in session.device_description
    (x,), (y,) = load_test_data(DATA)
    assert rel_l2(session.run({"input": x})["output"], y) < TOL


def test_cuda_tensors_zero_copy(session, torch_cuda):
    torch = torch_cuda
    (x,), (y,) = load_test_data(DATA)
    host = session.run({"input": x})["output"]
    xc = torch.from_numpy(x).cuda(0)
    out = session.run({"input": xc})["output"]
    assert out.is_cuda and out.device.index == 0 and out.dtype == torch.float32
    np.testing.assert_array_equal(out.cpu().numpy(), host)  # same kernels, same inputs
    assert rel_l2(out.cpu().numpy(), y) < TOL
    # the input went into the plan's own device buffer: a view of it holds the tensor
    import torch.utils.dlpack
    view = torch.utils.dlpack.from_dlpack(session._plan.input_device_view(0, 0))
    assert view.is_cuda and torch.equal(view, xc)
    # a strided CUDA view is copied correctly too, and fresh inputs change the outputs
    x2 = torch.randn(1, 3, 32, 32, device="cuda:0")
    xt = x2.transpose(2, 3).contiguous().transpose(2, 3)
    o2 = session.run([xt])["output"]
    np.testing.assert_array_equal(o2.cpu().numpy(),
                                  session.run([x2.cpu().numpy()])["output"])
    assert rel_l2(o2.cpu().numpy(), host) > 1e-3
    # the returned tensor is a copy: the next run does not change it
    keep = out.clone()
    session.run({"input": x2})
    assert torch.equal(out, keep)


def test_cuda_tensor_errors(session, torch_cuda):
    torch = torch_cuda
    with pytest.raises(dc.InputError, match="takes f32 1x3x32x32, got f16 1x3x32x32"):
        session.run({"input": torch.ones((1, 3, 32, 32), dtype=torch.float16, device="cuda:0")})
    if torch.cuda.device_count() > 1:
        with pytest.raises(dc.InputError, match="is on cuda:1, but the plan runs on cuda:0"):
            session.run({"input": torch.ones((1, 3, 32, 32), device="cuda:1")})


def test_benchmark(session):
    b = session.benchmark(30, warmup=5)
    assert b.runs == 30 and b.warmup == 5 and len(b.samples_us) == 30
    assert 0 < b.min_ms <= b.median_ms <= b.p99_ms
    assert b.min_ms <= b.mean_ms <= max(b.samples_us) / 1000


def test_emulated_session_takes_cuda_tensors(plan, torch_cuda):
    torch = torch_cuda
    (x,), (y,) = load_test_data(DATA)
    with dc.Session(plan, device="emulate") as s:
        out = s.run({"input": torch.from_numpy(x).cuda(0)})["output"]
    assert out.is_cuda and rel_l2(out.cpu().numpy(), y) < TOL


def test_plan_for_another_gpu_type_warns(tmp_path):
    other = "t4" if GPU != "t4" else "a100"
    plan = tune_cli(EXAMPLES / "tiny_cnn" / "model.onnx", tmp_path / "out", gpus=other) / other
    with pytest.warns(dc.PlanWarning, match=other):
        s = dc.Session(plan, device="cuda:0", cache_dir=tmp_path / "kcache")
    (x,), (y,) = load_test_data(DATA)
    assert rel_l2(s.run({"input": x})["output"], y) < TOL
    s.close()
