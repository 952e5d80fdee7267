#!/usr/bin/env python3
"""Reuse across models in the tuning DB: tuning a second model measures only the workloads
the first one did not have (issue 6: ResNet-50 then ResNet-101).

  1. `plan --json` of both models gives each model's workloads and the variants the
     estimator keeps for them;
  2. tune model A into a fresh DB, then model B into the same DB (emulated workers, no
     winner checks so that every job is a planned variant);
  3. the second tune's measurements are exactly the kept variants of B's workloads that A
     does not contain: none of A's is measured again, none of B's new ones is missed; and
     B shares workloads with A (else the test proves nothing). ResNet-101 differs from
     ResNet-50 only in how often its bottleneck blocks repeat: it has no new workload, so
     its tune measures nothing at all.

usage: check_reuse_models.py DC_COORDINATOR A.onnx B.onnx CONFIG.yaml GPU [tune flags]
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(cmd, timeout=1800):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def kept(coord, model, config, gpu):
    plan = json.loads(run([coord, "plan", model, "--gpus", gpu, "--config", config, "--json"]))
    kept = {(w["signature"], k["variant"]) for g in plan["gpus"] for w in g["workloads"] for k in w["kept"]}
    # tune also measures each workload's reference kernel once (the report's baseline).
    return kept | {(w["signature"], "reference/fp32/") for g in plan["gpus"] for w in g["workloads"]}


def measurements(db):
    """(id, workload, variant key) of every measurement, and the tuning runs' ids."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT m.id, v.workload, v.key FROM measurements m JOIN variants v ON v.id = m.variant_id").fetchall()
        runs = con.execute("SELECT id FROM tuning_runs ORDER BY id").fetchall()
    finally:
        con.close()
    return rows, [r[0] for r in runs]


def main():
    coord, model_a, model_b, config, gpu = sys.argv[1:6]
    extra = sys.argv[6:]
    kept_a, kept_b = kept(coord, model_a, config, gpu), kept(coord, model_b, config, gpu)
    workloads_a = {w for w, _ in kept_a}
    workloads_b = {w for w, _ in kept_b}
    shared = workloads_a & workloads_b
    new = {(w, v) for w, v in kept_b if w not in workloads_a}
    print(f"A: {len(workloads_a)} workloads, B: {len(workloads_b)} workloads, {len(shared)} shared; "
          f"B's new workloads keep {len(new)} variants (B keeps {len(kept_b)} in all)")
    if not shared:
        fail("the two models share no workload: the test would prove nothing")

    tmp = tempfile.mkdtemp(prefix="dc_check_reuse_")
    db = os.path.join(tmp, "tune.db")
    base = ["--gpus", gpu, "--config", config, "--db", db, "--no-check", "-q"] + extra
    run([coord, "tune", model_a] + base)
    first, _ = measurements(db)
    run([coord, "tune", model_b] + base)
    every, runs = measurements(db)
    last_of_a = max(i for i, _, _ in first)
    rows_a = [(w, v) for _, w, v in first]
    rows_b = [(w, v) for i, w, v in every if i > last_of_a]
    if len(runs) != 2:
        fail(f"expected two tuning runs, DB has {runs}")
    if set(rows_a) != kept_a or len(rows_a) != len(kept_a):
        fail(f"first tune measured {len(rows_a)} rows, {len(set(rows_a))} distinct, planned {len(kept_a)}")
    again = {(w, v) for w, v in rows_b if w in workloads_a}
    if again:
        fail(f"second tune measured {len(again)} variants of workloads the first model had")
    if set(rows_b) != new or len(rows_b) != len(new):
        fail(f"second tune measured {len(rows_b)} rows ({len(set(rows_b))} distinct); "
             f"expected exactly the {len(new)} variants of new workloads")
    print(f"OK: second tune measured {len(rows_b)} variants, all of new workloads; "
          f"{len(kept_b) - len(new)} reused")


if __name__ == "__main__":
    main()
