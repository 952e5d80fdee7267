#!/usr/bin/env python3
"""The farm as a shared service, end to end on loopback (issue 28; docs/farm.md):

  0. `serve` on a non-loopback address without keys: exit 2, a clear error;
  1. `serve` on 127.0.0.1 with four emulated dc-workers (each its own empty compile cache);
  2. three tunes at once through it: tiny_cnn twice (priorities 1 and 2) and tiny_ops
     (priority 3), each `tune --farm ... --emulate`:
       - all exit 0 and write their plans locally;
       - nothing is measured twice (each job the service dispatches has a source of its own;
         the tunes run with --no-cross-check, whose second measurements are second rows);
       - every DB row once (no (variant, GPU type) with two measurements), one row per
         dispatched job, `PRAGMA integrity_check` ok;
       - while all three wait, the jobs dispatched from each tune's share follow the
         priorities 1:2:3 within 15 %;
  3. `status --farm ... --json`: the four workers with their jobs done, no tune left;
  4. a tune (tiny_transformer) SIGKILLed mid-run: its queued jobs are cancelled (status),
     what was on a worker is recorded, and the same tune again measures only the rest;
  5. CURVE: a service on 127.0.0.1 with --keys, --allow-workers and --allow-clients: a
     worker with its key joins; `status` with a client key works; a tune with a key in no
     list and one with the worker's key are refused (exit 2), and no job reaches the worker.

usage: check_farm_service.py BIN_DIR SOURCE_DIR
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
    p = subprocess.run([coord, "status", "--farm", endpoint, "--json"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        fail(f"status exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)


def wait_for(what, pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.3)
    fail(f"timed out waiting for {what}")


def main():
    bin_dir, src = sys.argv[1], sys.argv[2]
    coord, worker = os.path.join(bin_dir, "dc-coordinator"), os.path.join(bin_dir, "dc-worker")
    ex = os.path.join(src, "examples")
    tmp = tempfile.mkdtemp(prefix="dc-service-")
    procs = []
    print("logs in", tmp)
    try:
        # 0. Not on the network without keys.
        p = subprocess.run([coord, "serve", "--bind", f"tcp://0.0.0.0:{free_port()}", "--db", f"{tmp}/x.db"],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 2 or "can be reached from other machines" not in p.stderr:
            fail(f"serve on 0.0.0.0 without keys: exit {p.returncode}, {p.stderr!r}")
        print("ok: serve on 0.0.0.0 without keys refused:", p.stderr.strip().splitlines()[-1][:100])

        # 1. The service and four workers.
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        db = f"{tmp}/service.db"
        log = open(f"{tmp}/serve.log", "w")
        serve = subprocess.Popen([coord, "--log-level", "debug", "serve", "--bind", endpoint, "--db", db],
                                 stdout=log, stderr=subprocess.STDOUT)
        procs.append(serve)
        time.sleep(1)
        for i in range(4):
            wl = open(f"{tmp}/worker{i}.log", "w")
            procs.append(subprocess.Popen([worker, "--connect", endpoint, "--emulate", "h100", "--cache",
                                           f"{tmp}/cache{i}", "--worker-id", f"w{i}"], stdout=wl,
                                          stderr=subprocess.STDOUT))
        wait_for("4 workers", lambda: len(status(coord, endpoint)["workers"]) == 4, 60)

        # 2. Three tunes at once.
        def tune(model, priority, name):
            out = open(f"{tmp}/{name}.log", "w")
            return subprocess.Popen([coord, "tune", f"{ex}/{model}/model.onnx", "--gpus", "h100", "--farm", endpoint,
                                     "--priority", str(priority), "--emulate", "--no-check", "--no-cross-check", "--no-reference",
                                     "--top-k", "3", "--quiet", "--out", f"{tmp}/out-{name}"],
                                    stdout=out, stderr=subprocess.STDOUT)
        tunes = {"a": tune("tiny_cnn", 1, "a"), "b": tune("tiny_cnn", 2, "b"), "c": tune("tiny_ops", 3, "c")}
        for name, t in tunes.items():
            rc = t.wait(timeout=900)
            text = open(f"{tmp}/{name}.log").read()
            if rc != 0:
                fail(f"tune {name} exited {rc}:\n{text[-3000:]}")
            if not os.path.exists(f"{tmp}/out-{name}/h100/plan.json"):
                fail(f"tune {name} wrote no plan")
        lines = open(f"{tmp}/serve.log").read().splitlines()
        tune_of = {}  # service tune id -> a, b, c (by model and priority)
        for l in lines:
            m = re.search(r"service: tune (\d+) joined: model (\S+) on \S+ from .* priority (\d+)", l)
            if m:
                tune_of[m.group(1)] = {"1": "a", "2": "b", "3": "c"}[m.group(3)]
        if sorted(tune_of.values()) != ["a", "b", "c"]:
            fail(f"tunes joined: {tune_of}")
        events = []  # ("submit", tune) / ("dispatch", tune, group)
        for l in lines:
            m = re.search(r"service: tune (\d+) submitted ", l)
            if m:
                events.append(("submit", tune_of[m.group(1)]))
            m = re.search(r"service: dispatch (g\d+) of tune (\d+)", l)
            if m:
                events.append(("dispatch", tune_of[m.group(2)], m.group(1)))
        dispatched = [e for e in events if e[0] == "dispatch"]
        groups = [e[2] for e in dispatched]
        if len(groups) != len(set(groups)):
            fail("a job was dispatched twice")
        con = sqlite3.connect(db)
        rows = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
        dup = con.execute("SELECT count(*) FROM (SELECT variant_id, gpu_type FROM measurements "
                          "GROUP BY 1, 2 HAVING count(*) > 1)").fetchone()[0]
        sources = con.execute("SELECT count(DISTINCT v.source_hash) FROM measurements m "
                              "JOIN variants v ON v.id = m.variant_id").fetchone()[0]
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        con.close()
        if dup != 0 or integrity != "ok":
            fail(f"{dup} variants recorded twice; integrity {integrity}")
        if rows != len(dispatched) or sources != rows:
            fail(f"{rows} DB rows, {sources} distinct sources for {len(dispatched)} jobs dispatched")
        print(f"ok: 3 tunes, {len(dispatched)} jobs dispatched, {rows} DB rows, each once; integrity ok")
        for name in "abc":
            m = re.search(r"farm service: (\d+) jobs measured for this tune, (\d+) shared with another tune, (\d+) "
                          r"answered", open(f"{tmp}/{name}.log").read())
            if not m:
                fail(f"tune {name} printed no farm service line")
            print(f"   tune {name}: measured {m.group(1)}, shared {m.group(2)}, from the DB {m.group(3)}")
        # Shares while every tune waits: from the last submit to the first tune whose model
        # has nothing left to dispatch (a and b share tiny_cnn's jobs).
        last_submit = max(i for i, e in enumerate(events) if e[0] == "submit")
        last_of = {}
        for i, e in enumerate(events):
            if e[0] == "dispatch":
                last_of["cnn" if e[1] in "ab" else "ops"] = i
        end = min(last_of.values())
        window = [e[1] for e in events[last_submit + 1:end + 1] if e[0] == "dispatch"]
        counts = {n: window.count(n) for n in "abc"}
        total = len(window)
        if total < 30:
            fail(f"only {total} jobs dispatched while all three tunes waited: {counts}")
        for n, w in (("a", 1), ("b", 2), ("c", 3)):
            share, want = counts[n] / total, w / 6
            if abs(share - want) > 0.15 * want:
                fail(f"tune {n} (priority {w}) got {share:.3f} of {total} jobs dispatched, want {want:.3f} +- 15 %: {counts}")
        print(f"ok: shares while all waited over {total} jobs: " +
              ", ".join(f"{n} {counts[n] / total:.3f} (want {w / 6:.3f})" for n, w in (("a", 1), ("b", 2), ("c", 3))))

        # 3. status.
        st = status(coord, endpoint)
        done = sum(w["jobs_done"] for w in st["workers"])
        if len(st["workers"]) != 4 or st["tunes"] or done != st["jobs_measured"] or done != len(dispatched):
            fail(f"status after the tunes: {json.dumps(st)[:600]}")
        print(f"ok: status: 4 workers, {done} jobs done, no tune left")

        # 4. A client killed mid-tune.
        cmd = [coord, "tune", f"{ex}/tiny_transformer/model.onnx", "--gpus", "h100", "--farm", endpoint, "--emulate",
               "--no-check", "--no-cross-check", "--no-reference", "--top-k", "3", "--quiet", "--out", f"{tmp}/out-k"]
        killed = subprocess.Popen(cmd, stdout=open(f"{tmp}/k1.log", "w"), stderr=subprocess.STDOUT)
        procs.append(killed)

        def progress():
            t = status(coord, endpoint)["tunes"]
            return t and t[0]["done"] >= 3 and t[0]["queued"] > 0 and t[0]
        before = wait_for("the tune to be under way", progress, 300)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        st = wait_for("the service to end the killed tune",
                      lambda: (lambda s: not s["tunes"] and s["queues"] and
                               all(q["in_flight"] == 0 for q in s["queues"]) and s)(status(coord, endpoint)), 60)
        cancelled = st["jobs_cancelled"]
        if cancelled <= 0:
            fail(f"the killed tune's queued jobs were not cancelled: {json.dumps(st)[:400]}")
        con = sqlite3.connect(db)
        recorded = con.execute("SELECT count(*) FROM measurements").fetchone()[0] - rows
        con.close()
        print(f"ok: killed tune: {cancelled} queued jobs cancelled, {recorded} recorded")
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            fail(f"the rerun exited {p.returncode}: {p.stderr[-2000:]}")
        m = re.search(r"farm service: (\d+) jobs measured for this tune, (\d+) shared with another tune, (\d+) answered",
                      p.stdout)
        if not m:
            fail("the rerun printed no farm service line")
        measured, from_db = int(m.group(1)), int(m.group(3))
        con = sqlite3.connect(db)
        total_rows = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
        dup = con.execute("SELECT count(*) FROM (SELECT variant_id, gpu_type FROM measurements "
                          "GROUP BY 1, 2 HAVING count(*) > 1)").fetchone()[0]
        con.close()
        # Everything the killed run recorded is answered from the DB (with what other tunes
        # measured of the same workloads); only the rest is measured, and recorded once.
        if recorded <= 0 or from_db < recorded or dup != 0 or total_rows != rows + recorded + measured:
            fail(f"rerun: measured {measured}, from the DB {from_db} (recorded before: {recorded}); "
                 f"{dup} duplicates; {total_rows} rows")
        print(f"ok: rerun measured only the rest: {measured} measured, {from_db} from the DB, no duplicate")

        # 5. CURVE with separate allow-lists.
        for name in ("service", "worker", "client", "stranger"):
            subprocess.run([coord, "keygen", f"{tmp}/{name}.key"], check=True, capture_output=True)
        open(f"{tmp}/workers.allow", "w").write(open(f"{tmp}/worker.key.pub").read())
        open(f"{tmp}/clients.allow", "w").write(open(f"{tmp}/client.key.pub").read())
        secure = f"tcp://127.0.0.1:{free_port()}"
        procs.append(subprocess.Popen([coord, "--log-level", "info", "serve", "--bind", secure, "--db", f"{tmp}/curve.db",
                                       "--keys", f"{tmp}/service.key", "--allow-workers", f"{tmp}/workers.allow",
                                       "--allow-clients", f"{tmp}/clients.allow"],
                                      stdout=open(f"{tmp}/serve-curve.log", "w"), stderr=subprocess.STDOUT))
        procs.append(subprocess.Popen([worker, "--connect", secure, "--emulate", "h100", "--cache", f"{tmp}/cache0",
                                       "--server-key", f"{tmp}/service.key.pub", "--key", f"{tmp}/worker.key"],
                                      stdout=open(f"{tmp}/worker-curve.log", "w"), stderr=subprocess.STDOUT))

        def secure_status(key):
            return subprocess.run([coord, "status", "--farm", secure, "--json", "--timeout", "3", "--farm-key",
                                   f"{tmp}/{key}.key", "--farm-server-key", f"{tmp}/service.key.pub"],
                                  capture_output=True, text=True, timeout=30)
        wait_for("the CURVE worker", lambda: (lambda p: p.returncode == 0 and len(json.loads(p.stdout)["workers"]) == 1)(
            secure_status("client")), 60)
        for key, expect in (("stranger", "no answer"), ("worker", "clients' allow-list")):
            p = subprocess.run([coord, "tune", f"{ex}/tiny_ops/model.onnx", "--gpus", "h100", "--farm", secure,
                                "--emulate", "--quiet", "--farm-key", f"{tmp}/{key}.key", "--farm-server-key",
                                f"{tmp}/service.key.pub"], capture_output=True, text=True, timeout=120)
            if p.returncode != 2 or expect not in p.stderr:
                fail(f"tune with the {key}'s key: exit {p.returncode}, {p.stderr[-500:]!r}")
            print(f"ok: tune with the {key}'s key refused: {p.stderr.strip().splitlines()[-1][:110]}")
        st = json.loads(secure_status("client").stdout)
        if st["jobs_measured"] != 0 or st["tunes"] or st["workers"][0]["jobs_done"] != 0:
            fail(f"a refused client's job reached the worker: {json.dumps(st)[:400]}")
        print("ok: no job of a refused client reached the worker")
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
