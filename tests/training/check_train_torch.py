#!/usr/bin/python3
"""dc's training steps on the CPU reference against PyTorch autograd (torch 1.13, train
mode), through `dc-coordinator verify MODEL --train` (docs/training.md, "Tests").

    check_train_torch.py DC_COORDINATOR [CASE ...]

Cases: steps (MODEL: the loss and every updated weight and BatchNorm running statistic after
1 SGD step with momentum and weight decay, and after 3 AdamW steps), curve (50 SGD steps of
the small CNN on a fixed batch: the loss falls as PyTorch's does), amp:MODEL (the steps
case with --precision bf16 against PyTorch's bf16 autocast step: within 2x its distance from
fp64), errors (bad input: exit 2
and an `error:` line), cli (plan --train on the examples; bad training flags). Default: steps of mlp, small_cnn, tiny_cnn, tiny_unet (ConvTranspose
and Resize), tiny_transformer and small_bert, curve, errors; `steps:resnet18` and `steps:mobilenetv2` are the longer cases (label training),
`steps:bert4` the issue's 4-layer encoder.
"""
import copy
import io
import os
import re
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

SGD = {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.01, "steps": 1}
ADAMW = {"optimizer": "adamw", "lr": 0.01, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.05,
         "steps": 3}
DEFAULT = ["steps:mlp", "steps:small_cnn", "steps:tiny_cnn", "steps:tiny_unet", "steps:tiny_transformer",
           "steps:small_bert", "curve", "errors", "cli"]


def export(module, args, names, path):
    """Eval-mode export that keeps BatchNorm nodes (PRESERVE) and every weight under its
    state_dict name (no constant folding)."""
    module.eval()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buf, opset_version=13, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.PRESERVE, input_names=names,
                          output_names=["logits"])
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return onnx.load_from_string(buf.getvalue())


def write_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(array), name).SerializeToString())


def torch_optimizer(params, o):
    if o["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"], weight_decay=o["weight_decay"])
    return torch.optim.AdamW(params, lr=o["lr"], betas=o["betas"], eps=o["eps"],
                             weight_decay=o["weight_decay"])


def rounding_noise_gradients(module, args, labels, loss_fn):
    """Parameters whose gradient is zero up to rounding (a conv bias before BatchNorm, the key
    bias of attention): Adam's update of one is the sign of rounding noise, and through the
    batch statistics it reaches the rest. The AdamW checks freeze them in both frameworks."""
    module.train()
    probe = copy.deepcopy(module).double()
    loss_fn(probe(*(to_double(a) for a in args)), to_double(labels)).backward()
    return sorted(n for n, p in probe.named_parameters()
                  if p.grad is not None and p.grad.abs().max().item() < 1e-6)


def to_double(t):
    return t.double() if t.is_floating_point() else t


def torch_steps(module, args, labels, loss_kind, o, frozen=(), fp64=True):
    """PyTorch's losses per step, and its state after them (train mode), by default computed
    in fp64: the exact answer, to far better than fp32 can compute it."""
    if fp64:
        module = module.double()
        args = tuple(to_double(a) for a in args)
        labels = to_double(labels)
    module.train()
    for n, p in module.named_parameters():
        p.requires_grad_(n not in frozen)
    opt = torch_optimizer([p for p in module.parameters() if p.requires_grad], o)
    loss_fn = loss_function(loss_kind)
    losses = []
    for _ in range(o["steps"]):
        opt.zero_grad()
        loss = loss_fn(module(*args), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    state = {k: v.detach().float().numpy().copy() for k, v in module.state_dict().items()
             if v.is_floating_point()}
    return losses, state


def torch_amp_steps(module, args, labels, loss_kind, o, frozen=()):
    """PyTorch's bf16 mixed precision (CPU autocast, torch 1.13): fp32 master weights and
    optimizer, the forward pass under autocast, the loss in fp32 (no scaler: bf16 needs none)."""
    module.train()
    for n, p in module.named_parameters():
        p.requires_grad_(n not in frozen)
    opt = torch_optimizer([p for p in module.parameters() if p.requires_grad], o)
    loss_fn = loss_function(loss_kind)
    for _ in range(o["steps"]):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = module(*args)
        loss_fn(out.float(), labels).backward()
        opt.step()
    return {k: v.detach().float().numpy().copy() for k, v in module.state_dict().items() if v.is_floating_point()}


def update_error(got, want, before):
    """rel-L2 of an update (state after - before) against the wanted one."""
    before = before.detach().double().numpy()
    d_want = want.astype(np.float64) - before
    d_got = got.astype(np.float64) - before
    norm = np.linalg.norm(d_want)
    return np.linalg.norm(d_got - d_want) / norm if norm > 0 else 0.0


def loss_function(loss_kind):
    return torch.nn.CrossEntropyLoss() if loss_kind == "cross_entropy" else torch.nn.MSELoss()


def dc_flags(loss_kind, o):
    flags = ["--train", "--loss", loss_kind, "--optimizer", o["optimizer"], "--lr", str(o["lr"]),
             "--weight-decay", str(o["weight_decay"]), "--steps", str(o["steps"])]
    if o["optimizer"] == "sgd":
        flags += ["--momentum", str(o["momentum"])]
    else:
        flags += ["--betas", "%r,%r" % o["betas"], "--eps", str(o["eps"])]
    return flags


DC_RUN = None  # --dc-run PATH


def run_dc(coord, model, data, flags):
    p = subprocess.run([coord, "verify", model, "--data", data, *flags], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def check_steps(coord, name, o, work, amp=False):
    module, args, names, loss_kind, labels = torch_models.case(name)
    model_path = os.path.join(work, "model.onnx")
    proto = export(module, args, names, model_path)
    initializers = {i.name for i in proto.graph.initializer}
    trained = copy.deepcopy(module)
    frozen = []
    if o["optimizer"] == "adamw":
        frozen = rounding_noise_gradients(module, args, labels, loss_function(loss_kind))
    losses, state = torch_steps(trained, args, labels, loss_kind, o, frozen)
    # The step's conditioning: PyTorch's own fp32 step against the fp64 one. dc's fp32 step
    # must be within max(1e-3, 2x that) of fp64 (docs/precision.md, "Training steps"); dc's
    # bf16 AMP step likewise within 2x PyTorch's bf16 AMP step's distance.
    if amp:
        state32 = torch_amp_steps(copy.deepcopy(module), args, labels, loss_kind, o, frozen)
    else:
        _, state32 = torch_steps(copy.deepcopy(module), args, labels, loss_kind, o, frozen, fp64=False)
    torch_err = max(update_error(state32[k], state[k], module.state_dict()[k]) for k in state)
    rtol = max(1e-3, 2 * torch_err)
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    for i, (a, n) in enumerate(zip(list(args) + [labels], names + ["labels"])):
        write_tensor(os.path.join(data, "input_%d.pb" % i), a.numpy(), n)
    write_tensor(os.path.join(data, "output_0.pb"), np.array(losses[-1], dtype=np.float32), "loss")
    compared = sorted(k for k in state if k in initializers)
    missing = sorted(k for k in state if k not in initializers)
    assert not missing, "%s: torch state not among the ONNX initializers: %s" % (name, missing)
    for i, k in enumerate(compared):
        write_tensor(os.path.join(data, "output_%d.pb" % (i + 1)), state[k], k)
    flags = dc_flags(loss_kind, o) + (["--freeze", ",".join(frozen)] if frozen else [])
    flags += ["--rtol", "%.3g" % rtol] + (["--precision", "bf16"] if amp else [])
    rc, out, err = run_dc(coord, model_path, data, flags)
    tag = "%s %s x%d%s" % (name, o["optimizer"], o["steps"], " bf16 AMP" if amp else "")
    if rc != 0:
        sys.stdout.write(out + err)
        raise AssertionError("%s: dc-coordinator verify --train exit %d" % (tag, rc))
    if DC_RUN:
        check_device_steps(coord, model_path, data, flags, tag, work)
    dc_losses = [float(x) for x in re.findall(r"^step \d+ loss (\S+)$", out, re.M)]
    assert len(dc_losses) == o["steps"], out
    errors = [float(e) for e in re.findall(r"^  update of \S+\s+\S+\s+\S+\s+(\S+)", out, re.M)]
    print("%-32s PASS  loss %.6f (torch %.6f), %d state tensors compared, worst update rel-L2 "
          "%.2e (PyTorch %s: %.2e; rtol %.3g)%s" % (tag, dc_losses[-1], losses[-1], len(compared),
                                                 max(errors, default=0.0), "bf16 AMP" if amp else "fp32",
                                                 torch_err, rtol,
        "; frozen (gradient zero up to rounding): " + ", ".join(frozen) if frozen else ""))


def check_device_steps(coord, model_path, data, flags, tag, work):
    """The same steps as the plan's device kernels run them (plan --train --out, then
    dc-run --train --emulate: every kernel on the host emulator), against the same data."""
    steps = flags[flags.index("--steps") + 1]
    plan_flags = [f for i, f in enumerate(flags) if f != "--steps" and (i == 0 or flags[i - 1] != "--steps")]
    plan_flags = [f for i, f in enumerate(plan_flags) if f != "--rtol" and (i == 0 or plan_flags[i - 1] != "--rtol")]
    plan_dir = os.path.join(work, "plan")
    p = subprocess.run([coord, "plan", model_path, "--gpus", "h100", "--out", plan_dir, *plan_flags],
                       capture_output=True, text=True)
    assert p.returncode == 0, "%s: plan --train --out exit %d\n%s" % (tag, p.returncode, p.stdout[-2000:] + p.stderr)
    rtol = flags[flags.index("--rtol") + 1]
    trained = os.path.join(work, "trained.onnx")
    p = subprocess.run([DC_RUN, plan_dir, "--train", "--emulate", "--data", data, "--steps", steps, "--rtol", rtol,
                        "--save-weights", trained], capture_output=True, text=True)
    if p.returncode != 0:
        sys.stdout.write(p.stdout + p.stderr)
        raise AssertionError("%s: dc-run --train --emulate exit %d" % (tag, p.returncode))
    losses = re.findall(r"^step \d+ loss (\S+)$", p.stdout, re.M)
    assert len(losses) == int(steps), p.stdout
    # The saved model loads, and its initializers are the trained weights (a state tensor
    # written as output_K.pb by its name holds the expected value after the steps).
    saved = {i.name: numpy_helper.to_array(i) for i in onnx.load(trained).graph.initializer}
    for f in sorted(os.listdir(data)):
        if f.startswith("output_") and f != "output_0.pb":
            t = onnx.TensorProto()
            with open(os.path.join(data, f), "rb") as fh:
                t.ParseFromString(fh.read())
            if t.name in saved:
                want = numpy_helper.to_array(t)
                err = np.abs(saved[t.name] - want).max() / max(np.abs(want).max(), 1e-12)
                assert err < max(1e-3, float(rtol)), "%s: saved %s differs from the expected weight (rel %.2e)" % (tag, t.name, err)
    errors = [float(e) for e in re.findall(r"^  update of \S+\s+\S+\s+\S+\s+(\S+)", p.stdout, re.M)]
    print("%-32s PASS  device kernels (emulated): loss %s, worst update rel-L2 %.2e (rtol %s); trained "
          "model saved" % (tag, losses[-1], max(errors, default=0.0), rtol))


def check_curve(coord, work, steps=50):
    o = dict(SGD, steps=steps, lr=0.05, weight_decay=0.0)
    module, args, names, loss_kind, labels = torch_models.case("small_cnn")
    model_path = os.path.join(work, "model.onnx")
    export(module, args, names, model_path)
    losses, _ = torch_steps(copy.deepcopy(module), args, labels, loss_kind, o)
    data = os.path.join(work, "curve")
    os.makedirs(data, exist_ok=True)
    write_tensor(os.path.join(data, "input_0.pb"), args[0].numpy(), "image")
    write_tensor(os.path.join(data, "input_1.pb"), labels.numpy(), "labels")
    write_tensor(os.path.join(data, "output_0.pb"), np.array(losses[-1], dtype=np.float32), "loss")
    rc, out, err = run_dc(coord, model_path, data, dc_flags(loss_kind, o) + ["--rtol", "1e-2"])
    dc_losses = [float(x) for x in re.findall(r"^step \d+ loss (\S+)$", out, re.M)]
    assert rc == 0 and len(dc_losses) == steps, out + err
    ours, theirs = np.array(dc_losses), np.array(losses)
    # Both fall by the same factor, and every step's loss stays within 1% of PyTorch's.
    assert theirs[-1] < 0.5 * theirs[0], "torch's loss did not fall: %s" % theirs
    assert ours[-1] < 0.5 * ours[0], "dc's loss did not fall: %s" % ours
    worst = np.max(np.abs(ours - theirs) / np.maximum(1.0, np.abs(theirs)))
    assert worst < 1e-2, "loss curves differ by %.3g: dc %s torch %s" % (worst, ours, theirs)
    print("%-32s PASS  loss %.4f -> %.4f (torch %.4f -> %.4f), worst step difference %.2e" % (
        "curve small_cnn sgd x%d" % steps, ours[0], ours[-1], theirs[0], theirs[-1], worst))


def expect_user_error(coord, model, data, flags, needle, tag):
    rc, out, err = run_dc(coord, model, data, flags)
    assert rc == 2, "%s: exit %d, expected 2\n%s%s" % (tag, rc, out, err)
    assert err.startswith("error:") and needle in err, "%s: %r" % (tag, err)
    print("%-32s PASS  %s" % (tag, err.strip()))


def check_errors(coord, work):
    x = torch.randn(4, 8)
    labels = np.array([0, 1, 2, 3], dtype=np.int64)
    for name, module in (("sin", torch_models.SinNet()), ("sum", torch_models.SumNet()),
                         ("mlp", torch_models.SinNet())):
        export(module, (x,), ["x"], os.path.join(work, name + ".onnx"))
    good = os.path.join(work, "good")
    os.makedirs(good, exist_ok=True)
    write_tensor(os.path.join(good, "input_0.pb"), x.numpy(), "x")
    write_tensor(os.path.join(good, "input_1.pb"), labels, "labels")
    write_tensor(os.path.join(good, "output_0.pb"), np.array(1.0, dtype=np.float32), "loss")
    sgd = dc_flags("cross_entropy", SGD)
    expect_user_error(coord, os.path.join(work, "sin.onnx"), good, sgd,
                      "(Sin) is on the path from a trained weight to the loss", "error no-rule")
    expect_user_error(coord, os.path.join(work, "sum.onnx"), good, sgd, "class axis",
                      "error no-class-axis")
    for tag, bad in (("error labels-dtype", labels.astype(np.int32)),
                     ("error labels-shape", labels.reshape(2, 2))):
        d = os.path.join(work, tag.split()[1])
        os.makedirs(d, exist_ok=True)
        write_tensor(os.path.join(d, "input_0.pb"), x.numpy(), "x")
        write_tensor(os.path.join(d, "input_1.pb"), bad, "labels")
        write_tensor(os.path.join(d, "output_0.pb"), np.array(1.0, dtype=np.float32), "loss")
        # The no-rule model with its Sin frozen out of the path trains: the error is the labels'.
        expect_user_error(coord, os.path.join(work, "mlp.onnx"), d, sgd + ["--freeze", "fc1.weight,fc1.bias"],
                          "'labels'", tag)


EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
BAD_FLAGS = (  # (flags after plan MODEL --gpus h100, expected message)
    (["--lr", "0.1"], "--lr is a training option: add --train"),
    (["--train", "--optimizer", "adam"], "--optimizer 'adam' is not one of sgd, adamw"),
    (["--train", "--optimizer", "adamw", "--momentum", "0.9"], "--momentum is an sgd option"),
    (["--train", "--betas", "0.9,0.99"], "--betas and --eps are adamw options"),
    (["--train", "--optimizer", "adamw", "--betas", "0.9"], "must be two numbers B1,B2"),
    (["--train", "--lr", "-1"], "--lr must be > 0"),
    (["--train", "--momentum", "1"], "--momentum must be in [0, 1)"),
    (["--train", "--loss", "hinge"], "--loss 'hinge' is not one of cross_entropy, mse, none"),
    (["--train", "--freeze", "nope"], "--freeze 'nope' is not an initializer of the model"),
    (["--train", "--loss", "none"], "--loss none needs the first output 'output' to be the scalar loss"),
    (["--train", "--precision", "fp8"], "unknown precision 'fp8'"),
    (["--no-recompute"], "--no-recompute is a training option: add --train"),
    (["--optimizer-bucket-mib", "4"], "--optimizer-bucket-mib is a training option: add --train"),
    (["--train", "--optimizer-bucket-mib", "-1"], "--optimizer-bucket-mib -1 is outside [0, 1048576]"),
    (["--train", "--optimizer-bucket-mib", "x"], "--optimizer-bucket-mib 'x' is not a number"),
    (["--train-attention", "ops"], "--train-attention is a training option: add --train"),
    (["--train", "--train-attention", "flash"], "--train-attention 'flash' is not one of auto, fused, ops"),
)


def check_cli(coord):
    """plan --train on the examples, and the training flags' validation (exit 2, `error:`)."""
    for name, loss in (("tiny_cnn", "cross_entropy"), ("tiny_transformer", "mse")):
        model = os.path.join(EXAMPLES, name, "model.onnx")
        p = subprocess.run([coord, "plan", model, "--gpus", "h100", "--train", "--loss", loss,
                            "--optimizer", "adamw"], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        note = re.search(r"^note +(training step of \d+ nodes.*)$", p.stdout, re.M)
        assert note and "dc.AdamWUpdate" in note.group(1), p.stdout
        print("%-32s PASS  %s" % ("plan --train " + name, note.group(1)[:100]))
    # --train-attention: auto keeps the step with the lower estimate and says so; fused and ops
    # force the two forms (the tiny transformer's one attention: a dc.Attention or none).
    model = os.path.join(EXAMPLES, "tiny_transformer", "model.onnx")
    fused = {}
    for mode in ("auto", "fused", "ops"):
        p = subprocess.run([coord, "plan", model, "--gpus", "h100", "--train", "--train-attention", mode],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        fused[mode] = "dc.Attention x1" in p.stdout
        choice = re.search(r"^note +attention: (fused|op by op) by estimate \(--train-attention auto\): h100 "
                           r"step ([\d.]+) us fused, ([\d.]+) us op by op$", p.stdout, re.M)
        assert (choice is not None) == (mode == "auto"), (mode, p.stdout)
        if choice:
            assert (choice.group(1) == "fused") == (float(choice.group(2)) <= float(choice.group(3))), choice.group(0)
            assert fused["auto"] == (choice.group(1) == "fused"), p.stdout
    assert fused["fused"] and not fused["ops"], fused
    print("%-32s PASS  auto chose %s" % ("--train-attention", "fused" if fused["auto"] else "op by op"))
    model = os.path.join(EXAMPLES, "tiny_cnn", "model.onnx")
    for flags, needle in BAD_FLAGS:
        p = subprocess.run([coord, "plan", model, "--gpus", "h100", *flags], capture_output=True, text=True)
        assert p.returncode == 2 and p.stderr.startswith("error:") and needle in p.stderr, (flags, p.stderr)
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run([coord, "codegen", model, "--gpus", "h100", "--out", out, "--no-compile", "--train"],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        sources = open(os.path.join(out, "h100", "kernels.cu")).read() if os.path.exists(
            os.path.join(out, "h100", "kernels.cu")) else "".join(
            open(os.path.join(d, f)).read() for d, _, fs in os.walk(out) for f in fs if f.endswith(".cu"))
        assert "dc_sgdupdate" in sources, "codegen --train wrote no training kernels"
        # BatchNorm's statistics are row-space outputs of its ReduceMeans (lower_batch_norm.h)
        assert "dc_batchnormstats" not in sources, "a dc.BatchNormStats kernel in the step"
    print("%-32s PASS  %d bad flag sets; codegen --train writes the training ops' kernels" %
          ("cli flags", len(BAD_FLAGS)))


def main():
    global DC_RUN
    args = sys.argv[1:]
    if "--dc-run" in args:  # also run every step case's plan on the device kernels (emulated)
        i = args.index("--dc-run")
        DC_RUN = args[i + 1]
        del args[i:i + 2]
    coord = args[0]
    cases = args[1:] or DEFAULT
    torch.set_num_threads(2)
    for c in cases:
        with tempfile.TemporaryDirectory() as work:
            if c.startswith("steps:"):
                for o in (SGD, ADAMW):
                    with tempfile.TemporaryDirectory(dir=work) as w:
                        check_steps(coord, c.split(":", 1)[1], o, w)
            elif c.startswith("amp:"):  # bf16 mixed precision against PyTorch's CPU autocast
                for o in (SGD, ADAMW):
                    with tempfile.TemporaryDirectory(dir=work) as w:
                        check_steps(coord, c.split(":", 1)[1], o, w, amp=True)
            elif c == "curve":
                check_curve(coord, work)
            elif c == "errors":
                check_errors(coord, work)
            elif c == "cli":
                check_cli(coord)
            else:
                raise SystemExit("unknown case " + c)
    print("check_train_torch: all %d case(s) passed" % len(cases))


if __name__ == "__main__":
    main()
