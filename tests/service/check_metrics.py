#!/usr/bin/env python3
"""`serve --metrics`: Prometheus metrics and the HTML status page (issue 28; docs/farm.md,
"Metrics and the status page"), end to end on loopback:

  1. `serve --metrics 127.0.0.1:PORT` with two emulated dc-workers, one of them with an id
     that is HTML (`w<b>1</b>`): /metrics parses with prometheus_client's parser and shows
     the two h100 devices and workers;
  2. bad HTTP never stops it: a header line without a colon and an HTTP/1.1 request without
     Host get 400, a request line that is not HTTP 400 or the connection closed (libmicrohttpd
     closes one without a method and a path), a request with 100 KiB of headers gets a 4xx (or the connection closed), POST gets 405, an unknown path
     404, 12 idle connections (of the 16 allowed per address) do not block the next GET; /metrics still answers 200 after;
  3. one tune (tiny_ops) through the service: while it runs, /metrics has its progress and
     `status --json` its ETA; headless Chromium's DOM of / names both workers and the tune,
     with the HTML worker id escaped (text, not a <b> element), and its screenshot is a PNG
     of the window's size (kept with --keep-screenshot FILE);
  4. after it: the counters match the DB: measurement rows added by the service per status
     (dc_farm_recorded_total) are the DB's rows per status, results (dc_farm_results_total)
     are the jobs the service measured (status) and the latency histogram's count, the jobs
     answered are the tune's, each device's busy ratio is in (0, 1];
  5. the same tune again: answered wholly from the DB (dc_farm_jobs_answered_total
     {origin="database"} grows by its jobs), no new result.

usage: check_metrics.py BIN_DIR SOURCE_DIR [--keep-screenshot FILE]
"""
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, "/opt/dc/pydeps")
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("FAIL: no prometheus_client: scripts/install-deps.sh installs it into /opt/dc/pydeps")
    sys.exit(1)

WINDOW = (1200, 800)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, pred, timeout, every=0.3):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    fail(f"timed out waiting for {what}")


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def metrics(base):
    """{family name: [(sample name, labels, value)]} from /metrics, via prometheus_client."""
    status, ctype, text = get(base + "metrics")
    if status != 200 or not ctype.startswith("text/plain"):
        fail(f"/metrics: {status} {ctype}")
    out = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = [(s.name, s.labels, s.value) for s in fam.samples]
    return out


def value(m, family, sample=None, **labels):
    total = 0
    for name, l, v in m.get(family, []):
        if (sample is None or name == sample) and all(l.get(k) == w for k, w in labels.items()):
            total += v
    return total


def raw(port, data, read=True):
    """Sends bytes on a fresh connection; the first line of the answer ('' if it closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if not read:
            return ""
        got = b""
        try:
            while b"\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        return got.split(b"\r\n")[0].decode(errors="replace")


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def chromium(args, tmp, timeout=120):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        fail("no chromium on PATH: scripts/install-deps.sh installs Debian's chromium package")
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={tmp}/profile", f"--window-size={WINDOW[0]},{WINDOW[1]}"] + args,
                          capture_output=True, text=True, timeout=timeout)


def main():
    bin_dir, src = sys.argv[1], sys.argv[2]
    keep = sys.argv[sys.argv.index("--keep-screenshot") + 1] if "--keep-screenshot" in sys.argv else None
    coord, worker = os.path.join(bin_dir, "dc-coordinator"), os.path.join(bin_dir, "dc-worker")
    model = os.path.join(src, "examples", "tiny_ops", "model.onnx")
    tmp = tempfile.mkdtemp(prefix="dc-metrics-")
    procs = []
    print("logs in", tmp)
    try:
        # 1. The service with --metrics, two workers.
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        port = free_port()
        base = f"http://127.0.0.1:{port}/"
        db = f"{tmp}/service.db"
        serve = subprocess.Popen([coord, "--log-level", "debug", "serve", "--bind", endpoint, "--db", db,
                                  "--metrics", f"127.0.0.1:{port}", "--page-refresh", "2"],
                                 stdout=open(f"{tmp}/serve.log", "w"), stderr=subprocess.STDOUT)
        procs.append(serve)
        ids = ["w0", "w<b>1</b>"]
        for i, wid in enumerate(ids):
            procs.append(subprocess.Popen([worker, "--connect", endpoint, "--emulate", "h100", "--cache",
                                           f"{tmp}/cache{i}", "--worker-id", wid],
                                          stdout=open(f"{tmp}/worker{i}.log", "w"), stderr=subprocess.STDOUT))

        def two_workers():
            try:
                m = metrics(base)
            except (urllib.error.URLError, ConnectionError):
                return None
            return value(m, "dc_farm_devices", gpu_type="h100") == 2 and value(m, "dc_farm_workers", gpu_type="h100") == 2 and m
        m = wait_for("two h100 workers in /metrics", two_workers, 60)
        if value(m, "dc_farm_up") != 1 or value(m, "dc_farm_workers", gpu_type="h100", state="idle") != 2:
            fail(f"/metrics before any tune: {m}")
        print("ok: /metrics parses; 2 h100 devices, 2 idle workers")

        # 2. Bad requests.
        line = raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nno colon in this header\r\n\r\n")
        if not re.match(r"HTTP/1\.1 400", line):
            fail(f"a header line without a colon: {line!r}, want 400")
        nohost = raw(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        if not re.match(r"HTTP/1\.1 400", nohost):
            fail(f"HTTP/1.1 without Host: {nohost!r}, want 400")
        garbage = raw(port, b"GARBAGE\r\n\r\n")
        if garbage and not re.match(r"HTTP/1\.1 400", garbage):
            fail(f"a request line that is not HTTP: {garbage!r}, want 400 or the connection closed")
        huge = raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (100 * 1024) + b"\r\n\r\n")
        if huge and not re.match(r"HTTP/1\.\d 4\d\d", huge):
            fail(f"100 KiB of headers: {huge!r}, want a 4xx or the connection closed")
        post = raw(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        if " 405" not in post:
            fail(f"POST: {post!r}, want 405")
        nope = raw(port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        if " 404" not in nope:
            fail(f"GET /nope: {nope!r}, want 404")
        raw(port, b"\x00\xff" * 500 + b"\r\n\r\n")
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(12)]  # under the 16 per address
        t0 = time.time()
        status, _, _ = get(base + "metrics", timeout=5)
        for s in idle:
            s.close()
        if status != 200 or serve.poll() is not None:
            fail(f"after bad requests: /metrics {status}, serve {'exited' if serve.poll() is not None else 'runs'}")
        print(f"ok: bad requests: {line!r}, no Host {nohost!r}, GARBAGE {garbage or 'closed'!r}, "
              f"100 KiB headers {huge or 'closed'!r}, POST {post!r}, {nope!r}; "
              f"GET with 12 idle connections open in {time.time() - t0:.2f} s")

        # 3. A tune, watched while it runs.
        tune_cmd = [coord, "tune", model, "--gpus", "h100", "--farm", endpoint, "--emulate", "--no-check", "--no-cross-check",
                    "--no-reference", "--top-k", "2", "--quiet", "--out", f"{tmp}/out"]
        tune = subprocess.Popen(tune_cmd, stdout=open(f"{tmp}/tune1.log", "w"), stderr=subprocess.STDOUT)
        procs.append(tune)

        def running():
            m = metrics(base)
            return value(m, "dc_farm_tune_jobs", state="submitted") > 0 and value(m, "dc_farm_tune_jobs", state="done") > 0 and m
        during = wait_for("the tune's progress in /metrics", running, 300, every=0.2)
        tune_ids = {l["tune"] for _, l, _ in during["dc_farm_tune_jobs"]}
        models = {l["model"] for _, l, _ in during["dc_farm_tune_jobs"]}
        print(f"ok: during the tune: /metrics has tune {sorted(tune_ids)} ({sorted(models)}): "
              f"{value(during, 'dc_farm_tune_jobs', state='done'):.0f}/"
              f"{value(during, 'dc_farm_tune_jobs', state='submitted'):.0f} done")
        st = json.loads(subprocess.run([coord, "status", "--farm", endpoint, "--json"], capture_output=True,
                                       text=True, timeout=30, check=True).stdout)
        if st["tunes"]:
            t = st["tunes"][0]
            if "eta_seconds" not in t or "busy_fraction" not in st["workers"][0]:
                fail(f"status --json lacks eta_seconds or busy_fraction: {json.dumps(st)[:400]}")
            print(f"   status: tune {t['done']}/{t['submitted']}, ETA {t['eta_seconds']:.1f} s")
        dom = chromium(["--dump-dom", base], tmp)
        page = dom.stdout
        if dom.returncode != 0 or 'id="workers"' not in page:
            fail(f"chromium --dump-dom: exit {dom.returncode}: {page[:300]!r} {dom.stderr[-300:]!r}")
        if "w0" not in page or "w&lt;b&gt;1&lt;/b&gt;" not in page or "<b>1</b>" in page:
            fail("the page does not name both workers, or did not escape the HTML worker id")
        # The tunes table (before the workers table) names it, unless the tune ended meanwhile.
        tune_on_page = bool(re.search(r"id=\"tunes\".*<td>tiny_ops</td>.*id=\"workers\"", page, re.S))
        if not tune_on_page and tune.poll() is None:
            fail("the page does not name the running tune (tiny_ops)")
        if 'http-equiv="refresh"' not in page:
            fail("the page does not refresh itself")
        print(f"ok: status page DOM names w0, the escaped w<b>1</b>{' and the tune' if tune_on_page else ''}")
        png = f"{tmp}/page.png"
        shot = chromium([f"--screenshot={png}", base], tmp)
        if shot.returncode != 0 or not os.path.isfile(png):
            fail(f"chromium wrote no screenshot: {shot.stderr[-500:]}")
        size = os.path.getsize(png)
        w, h = png_size(png)
        if (w, h) != WINDOW or size < 10000:
            fail(f"screenshot {w}x{h}, {size} bytes; want {WINDOW}, at least 10 kB")
        if keep:
            shutil.copyfile(png, keep)
        print(f"ok: screenshot {w}x{h}, {size} bytes{' -> ' + keep if keep else ''}")

        rc = tune.wait(timeout=900)
        if rc != 0:
            fail(f"tune exited {rc}:\n{open(f'{tmp}/tune1.log').read()[-3000:]}")

        # 4. Counters against the DB.
        def settled():
            st = json.loads(subprocess.run([coord, "status", "--farm", endpoint, "--json"], capture_output=True,
                                           text=True, timeout=30, check=True).stdout)
            if st["tunes"] or any(q["in_flight"] for q in st["queues"]):
                return None
            m = metrics(base)
            return value(m, "dc_farm_results", "dc_farm_results_total") == st["jobs_measured"] and (m, st)
        m, st = wait_for("the metrics to settle", settled, 30)
        con = sqlite3.connect(db)
        by_status = dict(con.execute("SELECT status, count(*) FROM measurements GROUP BY status").fetchall())
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        con.close()
        recorded = {l["status"]: v for _, l, v in m.get("dc_farm_recorded", [])}
        results = {l["status"]: v for _, l, v in m.get("dc_farm_results", [])}
        if not by_status or recorded != by_status or integrity != "ok":
            fail(f"dc_farm_recorded_total {recorded} != the DB's rows by status {by_status} (integrity {integrity})")
        measured = st["jobs_measured"]
        latency_count = value(m, "dc_farm_job_latency_seconds", "dc_farm_job_latency_seconds_count")
        if sum(results.values()) != measured or latency_count != measured or measured <= 0:
            fail(f"results {results}, latency count {latency_count}, status jobs_measured {measured}")
        if any(results.get(k, 0) > recorded.get(k, 0) for k in results):
            fail(f"more results than rows recorded: {results} vs {recorded}")
        buckets = [v for n, l, v in m["dc_farm_job_latency_seconds"] if n.endswith("_bucket")]
        if buckets != sorted(buckets) or buckets[-1] != measured:
            fail(f"latency buckets not cumulative up to the count: {buckets}")
        answered = {l["origin"]: v for _, l, v in m["dc_farm_jobs_answered"]}
        t1 = re.search(r"farm service: (\d+) jobs measured for this tune, (\d+) shared with another tune, (\d+) answered",
                       open(f"{tmp}/tune1.log").read())
        jobs = sum(int(t1.group(i)) for i in (1, 2, 3)) if t1 else None
        if jobs is None or sum(answered.values()) != jobs or answered["measured"] != measured:
            fail(f"answered {answered}, the tune's jobs {jobs}, measured {measured}")
        busy = [v for _, l, v in m["dc_farm_device_busy_ratio"]]
        if len(busy) != 2 or not all(0 <= b <= 1 for b in busy) or max(busy) <= 0:
            fail(f"device busy ratios {busy}")
        print(f"ok: counters match the DB: rows by status {by_status}, {measured} results = latency count, "
              f"answered {answered}, busy {', '.join(f'{b:.2e}' for b in busy)}; integrity ok")

        # 5. Again: from the DB.
        p = subprocess.run(tune_cmd, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            fail(f"second tune exited {p.returncode}: {p.stderr[-2000:]}")
        m2 = wait_for("the second tune's answers", lambda: (lambda x: value(x, "dc_farm_jobs_answered", origin="database")
                                                             >= answered["database"] + jobs and x)(metrics(base)), 30)
        if value(m2, "dc_farm_results", "dc_farm_results_total") != measured or value(m2, "dc_farm_tunes", how="new") != 2:
            fail(f"the second tune measured something: {m2.get('dc_farm_results')}, tunes {m2.get('dc_farm_tunes')}")
        print(f"ok: the same tune again: {jobs} jobs from the DB, no new result")
        if serve.poll() is not None:
            fail("serve exited")
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
