#!/usr/bin/env python3
"""dc-coordinator tune end to end on a small model, with emulated workers:

  1. a cold tune: exit 0, a summary per GPU type, DIR/<gpu>/summary.txt and selection.json
     (a cover: every node exactly once), one DB row per planned variant (+ winner checks);
  2. the same command again: nothing measured, the same selection;
  3. resume: a tune SIGKILLed mid-run, then the same command again: every planned variant
     measured exactly once, no duplicate row, PRAGMA integrity_check ok.

usage: check_tune.py DC_COORDINATOR MODEL.onnx CONFIG.yaml GPU [extra tune flags...]

Caches (the workers' compile cache, the host emulator's) go to a fresh XDG_CACHE_HOME per
phase, so that jobs take their real time and the tune of phase 3 can be killed mid-run.
"""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def fresh_cache_env(tmp, name):
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = os.path.join(tmp, "cache-" + name)
    return env


def run(cmd, timeout=300, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


REFERENCE_KEY = "reference/fp32/"


def planned_variants(coord, model, config, gpu):
    rc, out, err = run([coord, "plan", model, "--gpus", gpu, "--config", config, "--json"])
    if rc != 0:
        fail(f"plan failed: {err}")
    plan = json.loads(out)
    kept = {(w["signature"], k["variant"]) for g in plan["gpus"] for w in g["workloads"] for k in w["kept"]}
    # tune also measures each workload's reference kernel once: the report's baseline.
    references = {(w["signature"], REFERENCE_KEY) for g in plan["gpus"] for w in g["workloads"]}
    return kept | references, plan


def db_rows(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        rows = con.execute(
            "SELECT v.workload, v.key, m.gpu_type, m.status, m.emulated FROM measurements m "
            "JOIN variants v ON v.id = m.variant_id").fetchall()
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        runs = con.execute("SELECT status FROM tuning_runs ORDER BY id").fetchall()
    finally:
        con.close()
    return rows, integrity, [r[0] for r in runs]


def count_rows(path):
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        n = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
        con.close()
        return n
    except sqlite3.Error:
        return 0


def main():
    coord, model, config, gpu = sys.argv[1:5]
    extra = sys.argv[5:]
    planned, plan = planned_variants(coord, model, config, gpu)
    if not planned:
        fail("plan kept no variants")
    tmp = tempfile.mkdtemp(prefix="dc_check_tune_")
    db = os.path.join(tmp, "dbs", "tune.db")  # tune creates the folder, too
    out_dir = os.path.join(tmp, "out")
    base = [coord, "tune", model, "--gpus", gpu, "--config", config, "--db", db] + extra

    # 1. Cold tune.
    t0 = time.time()
    rc, out, err = run(base + ["--out", out_dir], env=fresh_cache_env(tmp, "cold"))
    cold_s = time.time() - t0
    if rc != 0:
        fail(f"tune exited {rc}\n{out}\n{err}")
    for needle in [f"== {gpu} ", "EMULATED", "least-estimate cover", " ok\n"]:
        if needle not in out:
            fail(f"summary lacks {needle!r}:\n{out}")
    if "MODELLED" not in err:
        fail(f"the console does not say that times are modelled:\n{err}")
    rows, integrity, runs = db_rows(db)
    measured = {(r[0], r[1]) for r in rows if r[2] == gpu}
    if measured != planned:
        fail(f"DB holds {len(measured)} variants, plan kept {len(planned)}")
    if not all(r[4] == 1 for r in rows):
        fail("emulated results not marked emulated")
    if integrity != "ok" or runs != ["ok"]:
        fail(f"integrity {integrity}, runs {runs}")
    # dc-worker's inventory reaches the DB: the device name it reported, its host.
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    workers = con.execute("SELECT device, host, emulated FROM workers").fetchall()
    con.close()
    if not workers or not all(d.startswith("emulated NVIDIA") and h and e == 1 for d, h, e in workers):
        fail(f"workers table lacks the inventory's device names: {workers}")
    # Two emulated workers: each workload's finalists are measured again on the other one.
    if "--local-workers" in extra and "cross-check  " not in out:
        fail(f"summary lacks the cross-check line:\n{out}")
    if "QUARANTINED" in out:
        fail(f"an honest emulated worker was quarantined:\n{out}")
    first_rows = len(rows)
    summary = open(os.path.join(out_dir, gpu, "summary.txt")).read()
    if summary.strip() not in out:
        fail("summary.txt differs from the printed summary")
    sel = json.load(open(os.path.join(out_dir, gpu, "selection.json")))
    if sel["format"] != "dc-tune-selection/1" or sel["gpu"] != gpu or sel["source"] != "emulated":
        fail(f"selection.json header: {sel['format']} {sel['gpu']} {sel['source']}")
    nodes = [n for c in sel["clusters"] for n in c["nodes"]]
    if len(nodes) != len(set(nodes)) or len(nodes) != plan["nodes"]:
        fail(f"selection is not a cover: {len(nodes)} node slots, {len(set(nodes))} distinct, "
             f"{plan['nodes']} nodes")
    total = sum(c["measured_us"] for c in sel["clusters"])
    if abs(total - sel["measured_total_us"]) > 1e-6 * max(1.0, total):
        fail(f"cluster times add up to {total}, total says {sel['measured_total_us']}")

    # 2. The same command again: nothing new is measured.
    t0 = time.time()
    rc, out2, err = run(base + ["--out", out_dir])
    warm_s = time.time() - t0
    if rc != 0:
        fail(f"second tune exited {rc}\n{err}")
    rows2, _, _ = db_rows(db)
    if len(rows2) != first_rows:
        fail(f"second tune added {len(rows2) - first_rows} rows")
    sel2 = json.load(open(os.path.join(out_dir, gpu, "selection.json")))
    if [c["kernel"] for c in sel2["clusters"]] != [c["kernel"] for c in sel["clusters"]]:
        fail("second tune selected differently")

    # 3. SIGKILL mid-run, then the same command: resumes without loss or duplicates.
    kdb = os.path.join(tmp, "killed.db")
    # --no-cross-check: the finalists' second measurement is a second row by design, and
    # this part counts one row per variant (the cold tune above cross-checks).
    kcmd = [coord, "tune", model, "--gpus", gpu, "--config", config, "--db", kdb, "--no-check",
            "--no-cross-check", "--quiet"] + extra
    proc = subprocess.Popen(kcmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=fresh_cache_env(tmp, "killed"))
    deadline = time.time() + 120
    while count_rows(kdb) < 10 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    if proc.poll() is not None:
        fail("the tune to be killed finished first (too few jobs or too fast)")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_rows = count_rows(kdb)
    if not 10 <= killed_rows < len(planned):
        fail(f"{killed_rows} rows when killed, of {len(planned)}")
    rc, out3, err = run(kcmd)
    if rc != 0:
        fail(f"resumed tune exited {rc}\n{err}")
    rows3, integrity, runs = db_rows(kdb)
    keys = [(r[0], r[1], r[2]) for r in rows3]
    if len(keys) != len(set(keys)):
        fail("duplicate rows after resume")
    if {(k[0], k[1]) for k in keys} != planned:
        fail(f"after resume the DB holds {len(set(keys))} variants, plan kept {len(planned)}")
    if integrity != "ok":
        fail(f"integrity_check: {integrity}")
    if runs != ["running", "ok"]:
        fail(f"runs {runs}: expected the killed one still 'running', then 'ok'")
    sent = [l for l in out3.splitlines() if l.startswith("this run")]
    if not sent or f"{len(planned) - killed_rows} jobs sent" not in sent[0]:
        fail(f"resume sent the wrong number of jobs: {sent} (expected {len(planned) - killed_rows})")

    shutil.rmtree(tmp)  # kept when a check fails, for its DBs
    print(f"PASS: {len(planned)} variants; cold {cold_s:.1f} s, warm {warm_s:.1f} s; "
          f"killed at {killed_rows} rows, resumed to {len(keys)}")


if __name__ == "__main__":
    main()
