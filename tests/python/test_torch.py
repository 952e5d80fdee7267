"""dc.torch.compile of small torch modules on emulated workers, against the modules' own
outputs: plan reuse per shape, a new shape tuned again, the default per-user DB, tuple
outputs, unsupported ops named, nothing left behind."""
import os

import pytest

torch = pytest.importorskip("torch")
import dc  # noqa: E402
import dc.torch  # noqa: E402
from conftest import QUICK, descendants, rel_l2  # noqa: E402

TOL = 1e-4  # fp32 plans: dc-run --data's default


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 8 * 8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(y, 1))


class TwoOut(torch.nn.Module):
    def forward(self, a, b):
        s = a @ b
        return torch.relu(s), torch.sigmoid(s + 1)


def _net():
    torch.manual_seed(3)
    m = Net()
    with torch.no_grad():  # non-trivial BatchNorm statistics, folded by dc
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m.eval()


def test_compile_small_module(tmp_path, private_cache):
    m = _net()
    x = torch.randn(2, 3, 8, 8)
    f = dc.torch.compile(m, (x,), config=str(QUICK), workers=1)
    assert f.emulate == (dc.torch.local_gpu_types() == [])  # no GPU: emulated workers
    cache = tmp_path / "cache" / "dc"
    assert (cache / "tuning.db").is_file()  # the default DB: per user, XDG_CACHE_HOME honoured
    with torch.no_grad():
        for _ in range(2):
            xi = torch.randn(2, 3, 8, 8)
            y = f(xi)
            assert isinstance(y, torch.Tensor) and y.shape == (2, 5)
            assert rel_l2(y.numpy(), m(xi).numpy()) < TOL
        assert len(f._plans) == 1  # the tuned shape reuses its plan
        # a new shape tunes once more
        x3 = torch.randn(3, 3, 8, 8)
        assert rel_l2(f(x3).numpy(), m(x3).numpy()) < TOL
        assert len(f._plans) == 2
        # a second compilation of the same model: the cached plan, no tune
        g = dc.torch.compile(m, (x,), config=str(QUICK), workers=1)
        assert rel_l2(g(x).numpy(), m(x).numpy()) < TOL
    assert descendants(os.getpid()) == []
    assert list(private_cache.iterdir()) == []


def test_compile_two_inputs_two_outputs():
    torch.manual_seed(5)
    a, b = torch.randn(4, 6), torch.randn(6, 3)
    m = TwoOut()
    f = dc.torch.compile(m, (a, b), config=str(QUICK), workers=1)
    r = f(a, b)
    assert isinstance(r, tuple) and len(r) == 2
    for got, want in zip(r, m(a, b)):
        assert rel_l2(got.numpy(), want.numpy()) < TOL


def test_unsupported_op():
    class Det(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.det(x) + 1

    with pytest.raises(dc.UnsupportedOpsError) as e:
        dc.torch.compile(Det(), (torch.randn(3, 3),), config=str(QUICK), workers=1)
    assert e.value.ops == ["Det"] and "dc does not support Det" in str(e.value)


def test_backend_registration():
    if not hasattr(torch, "compile"):
        assert dc.torch.BACKEND_REGISTERED is False  # PyTorch 1.x: nothing to register with
        pytest.skip(f"torch {torch.__version__} has no torch.compile (PyTorch 2.x needed)")
    assert dc.torch.BACKEND_REGISTERED
    m = _net()
    x = torch.randn(2, 3, 8, 8)
    f = torch.compile(m, backend="dc")
    with torch.no_grad():
        assert rel_l2(f(x).numpy(), m(x).numpy()) < TOL
