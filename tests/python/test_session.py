"""dc.Session on the host emulator: tiny_cnn's plan against its ONNX test data, numpy and
torch inputs, every error path, and errors that must not take the interpreter down."""
import shutil
import warnings

import numpy as np
import pytest

import dc
from conftest import EXAMPLES, load_test_data, rel_l2, run_python

DATA = EXAMPLES / "tiny_cnn" / "test_data_set_0"
TOL = 1e-4  # dc-run --data's default rtol: fp32 plans against PyTorch's outputs


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emulator-cache")


@pytest.fixture(scope="module")
def session(tiny_cnn_plan, kernel_cache):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the emulator runs any plan: no warning expected
        s = dc.Session(tiny_cnn_plan, device="emulate", cache_dir=kernel_cache)
    yield s
    s.close()


def test_describes_the_plan(session):
    assert [(t.name, t.shape, t.dtype) for t in session.inputs] == [("input", (1, 3, 32, 32), "float32")]
    assert [(t.name, t.shape, t.dtype) for t in session.outputs] == [("output", (1, 10), "float32")]
    assert session.gpu_type == "h100"
    assert session.precision == "fp32"
    assert session.emulated and session.device == "emulate"
    assert "emulator" in session.device_description
    assert "tiny_cnn" in repr(session)


def test_numpy_matches_the_test_data(session):
    (x,), (y,) = load_test_data(DATA)
    out = session.run({"input": x})
    assert list(out) == ["output"]
    o = out["output"]
    assert isinstance(o, np.ndarray) and o.dtype == np.float32 and o.shape == (1, 10)
    assert rel_l2(o, y) < TOL
    # positional form, and a non-contiguous input (copied, not misread)
    xt = np.ascontiguousarray(np.swapaxes(x, 2, 3)).swapaxes(2, 3)
    assert not xt.flags.c_contiguous
    np.testing.assert_array_equal(session.run([xt])["output"], o)


def test_outputs_follow_the_inputs(session):
    """Fresh seeded inputs: a wrong binding (stale input, wrong buffer) changes the result."""
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    b = rng.uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    ya, yb = session.run({"input": a})["output"], session.run({"input": b})["output"]
    assert rel_l2(ya, yb) > 1e-3
    np.testing.assert_array_equal(session.run({"input": a})["output"], ya)


def test_torch_in_torch_out(session):
    torch = pytest.importorskip("torch")
    (x,), (y,) = load_test_data(DATA)
    out = session.run({"input": torch.from_numpy(x.copy())})
    o = out["output"]
    assert isinstance(o, torch.Tensor) and o.dtype == torch.float32 and tuple(o.shape) == (1, 10)
    assert rel_l2(o.numpy(), y) < TOL
    # a tensor that needs grad and is a strided view goes through too
    xt = torch.from_numpy(x.copy()).requires_grad_(True).transpose(2, 3).contiguous().transpose(2, 3)
    assert rel_l2(session.run([xt])["output"].numpy(), y) < TOL


def test_dlpack_cpu_producer(session):
    torch = pytest.importorskip("torch")

    class OnlyDLPack:  # a third-party array known only by the DLPack protocol
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    (x,), (y,) = load_test_data(DATA)
    o = session.run({"input": OnlyDLPack(torch.from_numpy(x.copy()))})["output"]
    assert isinstance(o, np.ndarray) and rel_l2(o, y) < TOL


@pytest.mark.parametrize("feeds, message", [
    (lambda x: {"image": x}, "unknown input 'image': the plan's inputs are 'input'"),
    (lambda x: {}, "missing input 'input' (f32 1x3x32x32)"),
    (lambda x: {"input": x[:, :, :31]}, "input 'input' takes f32 1x3x32x32, got f32 1x3x31x32"),
    (lambda x: {"input": x.astype(np.float64)}, "input 'input' takes f32 1x3x32x32, got f64 1x3x32x32"),
    (lambda x: {"input": x.astype(np.float16)}, "got f16 1x3x32x32"),
    (lambda x: {"input": x[0]}, "got f32 3x32x32"),
    (lambda x: [x, x], "the plan has 1 input(s) (input), 2 given"),
    (lambda x: {"input": "not an array"}, "expected a numpy array, a torch tensor or a DLPack tensor"),
])
def test_input_errors(session, feeds, message):
    x = np.ones((1, 3, 32, 32), np.float32)
    with pytest.raises(dc.InputError) as e:
        session.run(feeds(x))
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)  # also catchable as a ValueError


def test_torch_dtype_error(session):
    torch = pytest.importorskip("torch")
    with pytest.raises(dc.InputError, match="takes f32 1x3x32x32, got i64 1x3x32x32"):
        session.run({"input": torch.ones((1, 3, 32, 32), dtype=torch.int64)})


def test_benchmark_needs_a_gpu(session):
    with pytest.raises(dc.UnsupportedError, match="the host emulator has no timing"):
        session.benchmark(5)


def test_bad_device_names():
    for bad in ("gpu", "cuda:x", "cpu", -1):
        with pytest.raises(ValueError, match="device must be"):
            dc.Session("/nonexistent", device=bad)


def test_missing_plan(tmp_path):
    with pytest.raises(dc.LoadError, match="does not exist or is not a directory"):
        dc.Session(tmp_path / "nothing", device="emulate")


def _copy(plan, tmp_path):
    d = tmp_path / "plan"
    shutil.copytree(plan, d)
    return d


def test_corrupt_plans(tiny_cnn_plan, tmp_path, kernel_cache):
    d = _copy(tiny_cnn_plan, tmp_path)
    w = (d / "weights.bin").read_bytes()
    (d / "weights.bin").write_bytes(w[: len(w) // 2])
    with pytest.raises(dc.LoadError, match="weights.bin"):
        dc.Session(d, device="emulate", cache_dir=kernel_cache)
    d2 = _copy(tiny_cnn_plan, tmp_path / "2")
    (d2 / "plan.json").write_text((d2 / "plan.json").read_text()[:-100])
    with pytest.raises(dc.LoadError, match="plan.json"):
        dc.Session(d2, device="emulate", cache_dir=kernel_cache)
    d3 = _copy(tiny_cnn_plan, tmp_path / "3")
    k = (d3 / "kernels.cu").read_text()
    (d3 / "kernels.cu").write_text(k.replace("__global__", "__global__ ", 1))
    with pytest.raises(dc.LoadError, match="kernels.cu"):
        dc.Session(d3, device="emulate", cache_dir=kernel_cache)


def test_no_gpu_is_an_error_here(tiny_cnn_plan):
    """Without a driver, device="cuda:0" is dc's load error (the gpu-labelled tests run
    the CUDA path where a GPU exists)."""
    r = run_python("import dc; dc.Session(%r, device='cuda:0')" % str(tiny_cnn_plan))
    if r.returncode == 0:
        pytest.skip("this machine has a GPU")
    assert "dc.LoadError" in r.stderr or "LoadError" in r.stderr, r.stderr
    assert "Fatal Python error" not in r.stderr and r.returncode == 1


def test_closed_session(tiny_cnn_plan, kernel_cache):
    s = dc.Session(tiny_cnn_plan, device="emulate", cache_dir=kernel_cache)
    with s:
        pass
    with pytest.raises(ValueError, match="closed"):
        s.run({"input": np.ones((1, 3, 32, 32), np.float32)})
    s.close()  # twice is fine


def test_errors_never_crash_the_interpreter(tiny_cnn_plan, tmp_path, kernel_cache):
    """Every failure path in a fresh interpreter that must reach its last line."""
    d = _copy(tiny_cnn_plan, tmp_path)
    (d / "weights.bin").write_bytes(b"")
    code = f"""
import gc, numpy as np, dc
def expect(f, *exc):
    try:
        f()
    except exc as e:
        print(type(e).__name__, str(e)[:60])
    else:
        raise SystemExit('no error')
expect(lambda: dc.Session({str(d)!r}, device='emulate'), dc.LoadError)
expect(lambda: dc.Session({str(tmp_path / 'none')!r}, device='emulate'), dc.LoadError)
s = dc.Session({str(tiny_cnn_plan)!r}, device='emulate', cache_dir={str(kernel_cache)!r})
expect(lambda: s.run({{'input': np.ones((1,), np.float32)}}), dc.InputError)
expect(lambda: s.run({{'input': np.ones((1, 3, 32, 32), np.int8)}}), dc.InputError)
expect(lambda: s.run({{}}), dc.InputError)
expect(lambda: s.benchmark(0), dc.UnsupportedError)
expect(lambda: s._plan.get_output(5, bytearray(40)), dc._dcrt.Error)
expect(lambda: s._plan.get_output(0, bytearray(3)), dc._dcrt.Error)
expect(lambda: s._plan.set_input(0, b'x'), dc._dcrt.Error)
expect(lambda: s._plan.set_input(0, None), TypeError)
expect(lambda: s._plan.input_device_view(0, 0), dc._dcrt.Error)
s.close()
expect(lambda: s.run({{}}), ValueError)
del s; gc.collect()
print('alive')
"""
    r = run_python(code)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("alive")
    assert r.stdout.count("Error") >= 11
