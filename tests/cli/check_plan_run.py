#!/usr/bin/env python3
"""A tuned plan end to end: tune --out writes it, dc-run runs it and checks it.

  1. `dc-coordinator tune MODEL --gpus GPU --emulate --out OUT` (emulated workers) exits 0
     and writes OUT/GPU/{plan.json, kernels.cu, weights.bin, summary.txt, selection.json};
  2. plan.json: format dc-plan/1, the GPU type, times marked emulated, every model node in
     exactly one step, the same kernels as selection.json, an arena smaller than one buffer
     per tensor; kernels.cu holds the prelude once; no step is a kernel that only copies
     (Reshape/Flatten/Squeeze/Unsqueeze/Identity alone: those are views, docs/plan-format.md);
  3. `dc-run OUT/GPU --emulate --data DATA` exits 0 and says PASS for every output
     (the outputs of ONNX test data: PyTorch's for the exported models);
  4. a truncated weights.bin, an edited kernels.cu and a plan.json cut in half are each
     refused by dc-run with exit 2 and a message naming the file.

usage: check_plan_run.py DC_COORDINATOR DC_RUN MODEL.onnx DATA_DIR CONFIG.yaml GPU [--real] [tune flags]

--real: a real device (pocl-cpu, PoCL's OpenCL CPU device): tune and dc-run without --emulate,
and the plan's times must be marked measured (emulated: false); the DB's rows are real
(emulated = 0); the same tune again measures nothing and writes the same plan; and
`dc-run --bench N` prints real times (issue 30's "Done when").
"""
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(cmd, timeout=1800):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    print(f"$ {' '.join(cmd)}  -> {p.returncode} in {time.time() - t0:.1f} s")
    return p.returncode, p.stdout, p.stderr


def check_plan_files(plan_dir, gpu, emulated):
    for f in ["plan.json", "kernels.cu", "weights.bin", "summary.txt", "selection.json"]:
        if not os.path.isfile(os.path.join(plan_dir, f)):
            fail(f"tune --out did not write {f}")
    plan = json.load(open(os.path.join(plan_dir, "plan.json")))
    sel = json.load(open(os.path.join(plan_dir, "selection.json")))
    if plan["format"] != "dc-plan/1" or plan["gpu_type"] != gpu or plan["emulated"] is not emulated:
        fail(f"plan.json header: {plan['format']} {plan['gpu_type']} emulated={plan['emulated']}")
    plan_nodes = [n for s in plan["steps"] + plan.get("views", []) for n in s["nodes"]]
    sel_nodes = [n for c in sel["clusters"] for n in c["nodes"]]
    if len(plan_nodes) != len(set(plan_nodes)) or sorted(plan_nodes) != sorted(sel_nodes):
        fail(f"plan steps do not cover the selection's nodes once: {len(plan_nodes)} slots, "
             f"{len(set(plan_nodes))} distinct, selection {len(sel_nodes)}")
    if len(plan["steps"]) + len(plan.get("views", [])) != len(sel["clusters"]):
        fail(f"{len(plan['steps'])} steps and {len(plan.get('views', []))} views for "
             f"{len(sel['clusters'])} selected clusters")
    copy_only = [s["cluster"] for s in plan["steps"] if copy_only_cluster(s["cluster"])]
    if copy_only:
        fail(f"the plan holds kernels that only copy (they should be views): {copy_only}")
    tensors = plan["tensors"]
    for i, t in enumerate(tensors):
        if t["kind"] == "view":
            base = tensors[t["view_of"]]
            if base["kind"] in ("view", "scratch") or t["offset"] < 0:
                fail(f"tensor {i} '{t['name']}' is a view of {base['kind']} '{base['name']}'")
    if not 0 < plan["arena_bytes"] < plan["unshared_bytes"]:
        fail(f"arena {plan['arena_bytes']} B is not below one buffer per tensor ({plan['unshared_bytes']} B)")
    kernels = open(os.path.join(plan_dir, "kernels.cu")).read()
    if kernels.count("#define DC_EXPORT_KERNEL") > 1:
        fail("kernels.cu repeats the prelude")
    summary = open(os.path.join(plan_dir, "summary.txt")).read()
    if "dc-run" not in summary:
        fail("summary.txt does not say how to run the plan")
    return plan


VIEW_OPS = {"reshape", "flatten", "squeeze", "unsqueeze", "identity"}


def copy_only_cluster(cluster):
    """'flatten#12' or 'reshape+squeeze#3': a cluster of view ops only."""
    return all(op in VIEW_OPS for op in cluster.split("#")[0].split("+"))


def expect_refused(dc_run, plan_dir, data, what, needle, mode):
    rc, out, err = run([dc_run, plan_dir] + mode + ["--data", data])
    if rc != 2 or needle not in err:
        fail(f"{what}: dc-run exited {rc}, expected 2 with {needle!r} in stderr:\n{out}\n{err}")


def check_cpu_warmup(dc_run, plan_dir):
    """On a CPU device --bench warms up for at least 0.5 s as well as --warmup runs (the
    device settles only then, docs/bench/opencl.md); --warmup-seconds 0 keeps the count alone."""
    rc, out, err = run([dc_run, plan_dir, "--bench", "5", "--warmup", "2"])
    m = re.search(r"\((\d+) runs after (\d+) warm-up in ([0-9.]+) s, at least 0.5 s\)", out)
    if rc != 0 or not m:
        fail(f"dc-run --bench on a CPU device: no time-based warm-up reported (exit {rc}):\n{out}\n{err}")
    runs, warm, seconds = int(m.group(1)), int(m.group(2)), float(m.group(3))
    if runs != 5 or warm < 3 or seconds < 0.5:
        fail(f"dc-run --bench: {runs} runs after {warm} warm-up runs in {seconds} s (want 5, > 2, >= 0.5 s)")
    rc, out, err = run([dc_run, plan_dir, "--bench", "5", "--warmup", "2", "--warmup-seconds", "0"])
    if rc != 0 or "(5 runs after 2 warm-up)" not in out:
        fail(f"dc-run --bench --warmup-seconds 0 should warm up by count alone (exit {rc}):\n{out}\n{err}")
    rc, out, err = run([dc_run, plan_dir, "--bench", "5", "--warmup-seconds", "700"])
    if rc != 2 or "--warmup-seconds must be 0 to 600" not in err:
        fail(f"dc-run --warmup-seconds 700: exit {rc}, want 2 with a clear error:\n{out}\n{err}")
    print(f"bench warm-up: {warm} runs in {seconds:.2f} s")


def db_measurements(db):
    """(rows, rows marked emulated) of the DB's measurements table."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    n, emulated = con.execute("SELECT COUNT(*), COALESCE(SUM(emulated), 0) FROM measurements").fetchone()
    con.close()
    return n, emulated


def check_real_db_and_second_tune(tune_cmd, db, plan_dir):
    """A real tune's rows are real, and the same tune again measures nothing: every kept
    variant (and reference kernel) is found in the DB, and the plan it writes is the same."""
    rows, emulated = db_measurements(db)
    if rows == 0 or emulated != 0:
        fail(f"a real tune's DB holds {rows} measurements, {emulated} of them marked emulated")
    steps = [s["variant_key"] for s in json.load(open(os.path.join(plan_dir, "plan.json")))["steps"]]
    rc, out, err = run(tune_cmd)
    if rc != 0:
        fail(f"second tune exited {rc}\n{out}\n{err}")
    again, _ = db_measurements(db)
    lookup = re.search(r"(\d+) variants to measure", out + err)
    if again != rows or not lookup or lookup.group(1) != "0":
        fail(f"the second tune measured again: {again - rows} new rows, lookup says "
             f"{lookup.group(0) if lookup else 'nothing'}\n{out}\n{err}")
    steps2 = [s["variant_key"] for s in json.load(open(os.path.join(plan_dir, "plan.json")))["steps"]]
    if steps2 != steps:
        fail("the second tune wrote a different plan from the same measurements")
    print(f"DB: {rows} real measurements; the second tune measured none")


def check_bench_times(dc_run, plan_dir, data):
    """`dc-run PLAN --data DIR --bench 20` checks the outputs and prints measured times."""
    rc, out, err = run([dc_run, plan_dir, "--data", data, "--bench", "20"])
    m = re.search(r"median ([0-9.]+) (us|ms)", out)
    if rc != 0 or "PASS" not in out or "FAIL" in out or not m or float(m.group(1)) <= 0:
        fail(f"dc-run --data --bench 20 exited {rc} without PASS and a median time:\n{out}\n{err}")
    print(f"dc-run --bench 20: median {m.group(1)} {m.group(2)}")


def main():
    coord, dc_run, model, data, config, gpu = sys.argv[1:7]
    extra = [a for a in sys.argv[7:] if a != "--real"]
    real = "--real" in sys.argv[7:]
    mode = [] if real else ["--emulate"]
    tmp = tempfile.mkdtemp(prefix="dc_check_plan_run_")
    out_dir = os.path.join(tmp, "out")
    db = os.path.join(tmp, "tune.db")
    tune_cmd = [coord, "tune", model, "--gpus", gpu, "--config", config] + mode + [
        "--db", db, "--out", out_dir] + extra
    rc, out, err = run(tune_cmd)
    if rc != 0 and real and "DRIFT" in out + err:
        # The host changed speed over the tune (a shared machine; the drift check's noise
        # model allows 10 %) and the tune refused its results, marking them implausible. The
        # documented way on (docs/tune.md, "Drift over a tune") is the same tune again, which
        # measures them anew: once, so that a second drift still fails.
        print("the tune's drift check refused a run of the drifting host; tuning again once")
        rc, out, err = run(tune_cmd)
    if rc != 0:
        fail(f"tune exited {rc}\n{out}\n{err}")
    plan_dir = os.path.join(out_dir, gpu)
    if f"wrote plan {plan_dir}" not in out:
        fail(f"tune does not report the plan it wrote:\n{out}")
    plan = check_plan_files(plan_dir, gpu, emulated=not real)
    print(f"plan: {len(plan['steps'])} steps, {len(plan.get('views', []))} views, {len(plan['modules'])} modules, "
          f"arena {plan['arena_bytes'] / 2**20:.1f} MiB vs {plan['unshared_bytes'] / 2**20:.1f} MiB unshared")

    rc, out, err = run([dc_run, plan_dir] + mode + ["--data", data])
    print(out)
    if rc != 0 or "PASS" not in out or "FAIL" in out:
        fail(f"dc-run {' '.join(mode)} --data exited {rc}:\n{out}\n{err}")

    if real:
        check_real_db_and_second_tune(tune_cmd, db, plan_dir)
        check_bench_times(dc_run, plan_dir, data)
        check_cpu_warmup(dc_run, plan_dir)

    # Damaged copies are refused cleanly.
    def damaged(name, edit):
        d = os.path.join(tmp, name)
        shutil.copytree(plan_dir, d)
        edit(d)
        return d

    def truncate(path, keep):
        with open(path, "r+b") as f:
            f.truncate(keep(os.path.getsize(path)))

    def flip(path, at):
        with open(path, "r+b") as f:
            f.seek(at(os.path.getsize(path)))
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x20]))

    expect_refused(dc_run, damaged("short_weights", lambda d: truncate(os.path.join(d, "weights.bin"), lambda n: n // 2)),
                   data, "truncated weights.bin", "weights.bin", mode)
    expect_refused(dc_run, damaged("edited_kernels", lambda d: flip(os.path.join(d, "kernels.cu"), lambda n: n - 10)),
                   data, "edited kernels.cu", "kernels.cu", mode)
    expect_refused(dc_run, damaged("short_json", lambda d: truncate(os.path.join(d, "plan.json"), lambda n: n // 2)),
                   data, "truncated plan.json", "plan.json", mode)
    shutil.rmtree(tmp)
    print("OK")


if __name__ == "__main__":
    main()
