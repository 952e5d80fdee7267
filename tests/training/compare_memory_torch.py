#!/usr/bin/env python3
"""Bytes a training step keeps for its backward pass: PyTorch 1.13 eager against dc's memory
plan (docs/training.md, "Memory"; docs/bench/training.md). Byte counts, not timings.

PyTorch: every tensor autograd saves during the forward pass and the loss (max-pool indices
included), counted through torch.autograd.graph.saved_tensors_hooks once per storage, less
the parameters, buffers, inputs and labels (which live anyway). dc: plan.json's memory.saved_for_backward of `plan --train --out`
(the arena tensors live across the loss step), with and without --no-recompute.

usage: compare_memory_torch.py DC_COORDINATOR [--check] [CASE ...]   (cases: tiny_cnn small_cnn
mlp resnet18 small_bert). --check: exit 1 when dc keeps more bytes than PyTorch for a case."""
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402
from check_train_torch import export  # noqa: E402


def torch_saved_bytes(name):
    """(saved activation bytes, tensor count, a lower bound of the step's memory) of one
    train-mode SGD step (momentum 0.9): the lower bound is what lives at the end of the
    backward pass, parameters + buffers + inputs + .grad + momentum + saved activations."""
    module, args, _, loss_kind, labels = torch_models.case(name)
    module.train()
    live_anyway = list(module.parameters()) + list(module.buffers()) + list(args) + [labels]
    skip = {t.storage().data_ptr() for t in live_anyway}
    seen = {}

    def pack(t):
        ptr = t.storage().data_ptr()
        if ptr not in skip:
            seen[ptr] = max(seen.get(ptr, 0), t.storage().size() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(*args)
        loss = (torch.nn.functional.cross_entropy(out, labels) if loss_kind == "cross_entropy"
                else torch.nn.functional.mse_loss(out, labels))
    loss.backward()
    opt = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)
    opt.step()

    def nbytes(ts):
        return sum(t.numel() * t.element_size() for t in ts)

    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    persistent = (nbytes(module.parameters()) + nbytes(module.buffers()) + nbytes(args) + nbytes([labels]) +
                  nbytes(p.grad for p in module.parameters() if p.grad is not None) + nbytes(state))
    return sum(seen.values()), len(seen), persistent + sum(seen.values())


def dc_memory(coord, name, work, extra):
    module, args, names, loss_kind, _ = torch_models.case(name)
    model = os.path.join(work, name + ".onnx")
    if not os.path.exists(model):
        export(module, args, names, model)
    out = os.path.join(work, name + "-plan" + "".join(extra))
    subprocess.run([coord, "plan", model, "--train", "--loss", loss_kind, "--gpus", "h100", "--optimizer",
                    "sgd", "--momentum", "0.9", "--out", out] + extra, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "plan.json")) as f:
        return json.load(f)["memory"]


def kib(b):
    return "%.1f KiB" % (b / 1024.0)


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    coord, cases = args[0], args[1:] or ["tiny_cnn", "small_cnn"]
    torch.set_num_threads(2)
    failed = []
    print("| model | PyTorch eager: saved for backward | dc, recompute | dc, --no-recompute | "
          "dc / PyTorch | PyTorch step, lower bound | dc step total (next state; arena) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as work:
        for name in cases:
            pt, count, pt_total = torch_saved_bytes(name)
            dc = dc_memory(coord, name, work, [])
            plain = dc_memory(coord, name, work, ["--no-recompute"])
            kept, kept_plain = dc["saved_for_backward"], plain["saved_for_backward"]
            print("| %s | %s (%d tensors) | %s (%d) | %s (%d) | %.2f | %s | %s (%s; %s) |" % (
                name, kib(pt), count, kib(kept["bytes"]), kept["count"], kib(kept_plain["bytes"]),
                kept_plain["count"], kept["bytes"] / pt, kib(pt_total), kib(dc["total_bytes"]),
                kib(dc["state_next_bytes"]), kib(dc["arena_bytes"])))
            if kept["bytes"] > pt:
                failed.append(name)
    if check and failed:
        print("compare_memory_torch: dc keeps more bytes for the backward pass than PyTorch for " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
