#!/usr/bin/env python3
"""The farm service SIGKILLed and restarted mid-tune (issue 28; docs/farm.md, "Reconnecting
and restarts"), end to end on loopback:

  1. `serve` with three emulated dc-workers and one `tune --farm` (tiny_cnn);
  2. once the tune is under way (results in, jobs still queued), `kill -9` the service and
     start it again on the same port and DB;
  3. the workers rejoin it (status shows three), the tune reconnects, submits again what it
     had no outcome for, and exits 0 with its plan; it says it was lost and reached again;
  4. the DB: `PRAGMA integrity_check` ok, no (variant, GPU type) recorded twice, no job
     measured twice by the second service that the first had recorded;
  5. the same tune again: everything from the DB, nothing measured (nothing was lost).

usage: check_farm_restart.py BIN_DIR SOURCE_DIR
"""
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(coord, endpoint):
    p = subprocess.run([coord, "status", "--farm", endpoint, "--json", "--timeout", "2"], capture_output=True,
                       text=True, timeout=30)
    return json.loads(p.stdout) if p.returncode == 0 else None


def wait_for(what, pred, timeout, every=0.3):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    fail(f"timed out waiting for {what}")


def main():
    bin_dir, src = sys.argv[1], sys.argv[2]
    coord, worker = os.path.join(bin_dir, "dc-coordinator"), os.path.join(bin_dir, "dc-worker")
    model = os.path.join(src, "examples", "tiny_cnn", "model.onnx")
    tmp = tempfile.mkdtemp(prefix="dc-restart-")
    procs = []
    print("logs in", tmp)
    try:
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        db = f"{tmp}/service.db"

        def start_service(n):
            p = subprocess.Popen([coord, "--log-level", "debug", "serve", "--bind", endpoint, "--db", db,
                                  "--window", "1"], stdout=open(f"{tmp}/serve{n}.log", "w"), stderr=subprocess.STDOUT)
            procs.append(p)
            return p
        serve = start_service(1)
        for i in range(3):
            procs.append(subprocess.Popen([worker, "--connect", endpoint, "--emulate", "h100", "--cache",
                                           f"{tmp}/cache{i}", "--worker-id", f"w{i}"],
                                          stdout=open(f"{tmp}/worker{i}.log", "w"), stderr=subprocess.STDOUT))
        wait_for("3 workers", lambda: (lambda s: s and len(s["workers"]) == 3)(status(coord, endpoint)), 60)

        base = [coord, "tune", model, "--gpus", "h100", "--farm", endpoint, "--emulate", "--no-check", "--no-cross-check",
                "--no-reference", "--top-k", "3"]
        cmd = base + ["--out", f"{tmp}/out", "--farm-reconnect", "120"]
        tune = subprocess.Popen(cmd, stdout=open(f"{tmp}/tune.log", "w"), stderr=subprocess.STDOUT)
        procs.append(tune)

        def under_way():
            s = status(coord, endpoint)
            t = s and s["tunes"]
            return t and t[0]["done"] >= 5 and t[0]["queued"] >= 5 and t[0]
        before = wait_for("the tune to be under way", under_way, 600)
        serve.send_signal(signal.SIGKILL)
        serve.wait()
        con = sqlite3.connect(db)
        rows_at_kill = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
        con.close()
        print(f"ok: service SIGKILLed with the tune at {before['done']}/{before['submitted']} done, "
              f"{before['queued']} queued; {rows_at_kill} rows recorded")
        time.sleep(1)
        serve = start_service(2)
        st = wait_for("the workers to rejoin the restarted service",
                      lambda: (lambda s: s and len(s["workers"]) == 3 and s)(status(coord, endpoint)), 60)
        print(f"ok: restarted; {len(st['workers'])} workers rejoined")
        rc = tune.wait(timeout=900)
        text = open(f"{tmp}/tune.log").read()
        if rc != 0:
            fail(f"the tune exited {rc} after the restart:\n{text[-3000:]}")
        if not os.path.exists(f"{tmp}/out/h100/plan.json"):
            fail("the tune wrote no plan")
        m = re.search(r"farm service: lost and reached again (\d+) time\(s\); (\d+) job\(s\) submitted again", text)
        if not m or int(m.group(2)) <= 0:
            fail(f"the tune does not say it reconnected and resubmitted:\n{text[-2000:]}")
        print(f"ok: the tune completed after reconnecting {m.group(1)} time(s), {m.group(2)} jobs submitted again")

        con = sqlite3.connect(db)
        rows = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
        dup = con.execute("SELECT count(*) FROM (SELECT variant_id, gpu_type FROM measurements "
                          "GROUP BY 1, 2 HAVING count(*) > 1)").fetchone()[0]
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        con.close()
        if dup != 0 or integrity != "ok" or rows <= rows_at_kill:
            fail(f"after the restart: {rows} rows ({rows_at_kill} at the kill), {dup} recorded twice, "
                 f"integrity {integrity}")
        log2 = open(f"{tmp}/serve2.log").read()
        again = len(re.findall(r"already recorded; not added again", log2))
        print(f"ok: {rows} rows, none twice ({again} results the second service found recorded already); "
              f"integrity ok")

        # Nothing lost: the same tune again is answered wholly from the DB.
        p = subprocess.run(base + ["--out", f"{tmp}/out2"], capture_output=True, text=True, timeout=900)
        m = re.search(r"farm service: (\d+) jobs measured for this tune, (\d+) shared with another tune, (\d+) "
                      r"answered", p.stdout)
        if p.returncode != 0 or not m or int(m.group(1)) != 0 or int(m.group(3)) <= 0:
            fail(f"the tune again: exit {p.returncode}, {m.group(0) if m else p.stdout[-1500:] + p.stderr[-1500:]}")
        print(f"ok: the same tune again: {m.group(3)} jobs from the DB, none measured")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
    shutil.rmtree(tmp, ignore_errors=True)  # kept (and named above) only when a check failed
    print("PASS")


if __name__ == "__main__":
    main()
