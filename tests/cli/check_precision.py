#!/usr/bin/python3
"""--precision through the command line: the plan of each precision, the deprecated
--precisions spelling (one value: a note and the same plan; several: an error naming
--precision), and the bad combinations (unknown name, tf32/bf16 on a GPU without their
tensor cores, fp16 on one without tensor cores: an OpenCL device), each one `error:` line and exit 2.

    check_precision.py COORD MODEL"""
import json
import subprocess
import sys

coord, model = sys.argv[1:3]


def run(*args):
    return subprocess.run([coord, *args], capture_output=True, text=True, timeout=600)


def plan_json(*extra):
    r = run("plan", model, "--gpus", "h100", "--json", *extra)
    assert r.returncode == 0, (extra, r.returncode, r.stderr)
    return json.loads(r.stdout), r.stderr


def error(args, *needles):
    r = run(*args)
    assert r.returncode == 2, (args, r.returncode, r.stdout, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, (args, r.stderr)
    for n in needles:
        assert n in lines[0], (args, n, lines[0])


# Each precision's plan: its name, and the math paths of the kept variants.
paths = {"fp32": {"fp32"}, "tf32": {"tf32", "fp32"}, "fp16": {"fp16", "fp32"}, "bf16": {"bf16", "fp32"}}
storage = {"fp32": "f32[", "tf32": "f32[", "fp16": "f16[", "bf16": "bf16["}
for p, allowed in paths.items():
    plan, _ = plan_json("--precision", p)
    assert plan["precision"] == p, plan["precision"]
    used = {k["variant"].split("/")[1] for g in plan["gpus"] for w in g["workloads"] for k in w["kept"]}
    assert used and used <= allowed, (p, used)
    for g in plan["gpus"]:
        for w in g["workloads"]:
            assert w["kept"], f"{p}: workload {w['signature']} has no variant"
    reduced = sum(storage[p] in w["canonical"] for w in plan["workloads"])
    if p in ("fp16", "bf16"):
        assert reduced > len(plan["workloads"]) // 2, (p, reduced, len(plan["workloads"]))
    else:
        assert not any("f16[" in w["canonical"] for w in plan["workloads"]), p

# Default: fp32.
plan, _ = plan_json()
assert plan["precision"] == "fp32"

# Deprecated spelling, one value: same plan, one note.
old, err = plan_json("--precisions", "fp16")
new, _ = plan_json("--precision", "fp16")
assert "note: --precisions is deprecated; read as --precision fp16" in err, err
assert old["precision"] == "fp16"
assert [w["signature"] for w in old["workloads"]] == [w["signature"] for w in new["workloads"]]

error(["plan", model, "--gpus", "h100", "--precisions", "fp32,fp16"], "--precision fp32|tf32|fp16|bf16")
error(["plan", model, "--gpus", "h100", "--precision", "fp16", "--precisions", "fp16"], "--precision")
error(["plan", model, "--gpus", "h100", "--precision", "fp8"], "unknown precision 'fp8'")
error(["plan", model, "--gpus", "h100", "--precision", "FP16"], "unknown precision 'FP16'")
error(["plan", model, "--gpus", "h100,t4", "--precision", "bf16"], "bf16", "t4", "sm_75")
error(["plan", model, "--gpus", "t4", "--precision", "tf32"], "tf32", "t4")
error(["plan", model, "--gpus", "pocl-cpu", "--precision", "fp16"], "fp16", "pocl-cpu", "sm_70+")
error(["tune", model, "--gpus", "t4", "--precision", "bf16", "--emulate"], "bf16", "t4")
error(["codegen", model, "--gpus", "t4", "--precision", "bf16", "--out", "/nonexistent/x"], "bf16", "t4")
# fp16 on t4 (sm_75 tensor cores) and on v100 (sm_70: mma.sync m8n8k4) is fine.
for gpu in ("t4", "v100"):
    r = run("plan", model, "--gpus", gpu, "--precision", "fp16")
    assert r.returncode == 0, (gpu, r.stderr)

for cmd in ("plan", "codegen", "tune"):
    r = run(cmd, "--help")
    assert r.returncode == 0 and "--precision" in r.stdout, (cmd, r.stdout[-400:])
r = run("--help")
assert "--precision" in r.stdout
print("ok")
