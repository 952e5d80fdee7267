#!/usr/bin/python3
"""The farm service under load (issue 28; docs/bench/farm-service.md): dispatch rate, fairness
between concurrent tunes, and the service's memory over a soak.

On loopback only, it starts
  - `dc-coordinator serve` (the service under test, with --metrics),
  - `bench_farm --service ... --workers W --devices D`: W zero-time workers of D emulated h100
    devices each (the worker protocol in full; each job's run returns at once), and
  - `bench_farm --service ... --tunes T --jobs N`: T concurrent tunes, each a RemoteFarm
    client (what `tune --farm` uses) submitting N distinct synthetic jobs,
and samples the service: `status --json` (jobs measured in all, and per tune the jobs
dispatched from its share and still queued), its RSS (/proc/PID/status) and the load average.

Phases:
  scenario  T tunes of N jobs at once (priorities cycled from --priorities) until all end.
            Dispatch rate: the service's results from workers over the phase's time.
            Fairness error: over the time all T tunes were connected with jobs queued, tune i's
            share of the jobs dispatched, s_i = d_i / sum d, against its fair share
            f_i = p_i / sum p: error = max_i |s_i - f_i| / f_i (also the worst over windows of
            --fair-window seconds).
  soak      for --soak-minutes: T tunes of --soak-jobs jobs, each followed by a new tune (new
            jobs) as it ends, so tunes come and go; every --kill-every seconds one more tune
            (--kill-jobs jobs, submitted at once) is started and SIGKILLed --kill-after seconds
            later: the service must cancel its queued jobs after its grace period. RSS is
            sampled every --rss-every seconds; flat: RSS at the end within --flat-tolerance of RSS
            after the warm-up (--warmup-minutes).

usage: bench_farm_service.py [--bin DIR] [--smoke] [--out FILE.md] [--keep DIR] [options]
--smoke: seconds, small numbers (the ctest entry farm_service_bench_smoke); exits 1 when a
tune fails, a job is lost, or no figure came out.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_util import cpu_name  # noqa: E402


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_seconds(pid):
    """User + system CPU seconds of a running process (and its threads), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def thread_cpu_seconds(pid):
    """CPU seconds (user + system) by thread of a running process: {tid: (name, seconds)}."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
            fields = tail.split()
            out[int(tid)] = (head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
        except (OSError, IndexError, ValueError):
            pass
    return out


def thread_cpu_delta(pid, before, after):
    """CPU seconds by role over a run: the main thread (tid == pid, the service's loop), the
    others by thread name (the broker's and the DB writer's threads are named; ZeroMQ's are
    ZMQbg/...), threads of the same name summed."""
    roles = {}
    for tid, (name, sec) in after.items():
        role = "main" if tid == pid else name
        roles[role] = roles.get(role, 0.0) + sec - before.get(tid, (name, 0.0))[1]
    return roles


def run_measuring_cpu(cmd, timeout):
    """Runs cmd to its end: (returncode, stdout + stderr, CPU seconds of it and its children)."""
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + timeout
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                p.kill()
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return p.returncode, out.read(), usage.ru_utime + usage.ru_stime


class Farm:
    """The service and its zero-time workers, with a sampler thread."""

    def __init__(self, a, tmp, name):
        self.a, self.tmp, self.name = a, tmp, name
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.metrics = f"127.0.0.1:{free_port()}"
        self.coord = os.path.join(a.bin, "dc-coordinator")
        self.bench = os.path.join(a.bin, "bench_farm")
        self.procs = []
        self.samples = []  # dicts: t, load, rss, measured, tunes {id: (priority, measured, queued, connected)}
        self.stop_sampling = threading.Event()
        self.serve = self.start([self.coord, "--log-level", "warn", "serve", "--bind", self.endpoint, "--db",
                                 f"{tmp}/{name}.db", "--metrics", self.metrics, "--client-grace", str(a.client_grace)],
                                f"{name}-serve.log")
        self.workers = self.start([self.bench, "--service", self.endpoint, "--workers", str(a.workers),
                                   "--devices", str(a.devices), "--credits", str(a.credits), "--tag", name],
                                  f"{name}-workers.log")
        deadline = time.time() + 30
        while True:
            st = self.status()
            devices = sum(q.get("devices", 0) for q in st.get("queues", [])) if st else 0
            if devices == a.workers * a.devices:
                break
            if time.time() > deadline or self.serve.poll() is not None or self.workers.poll() is not None:
                fail(f"{name}: {devices} of {a.workers * a.devices} devices joined the service (logs in {tmp})")
            time.sleep(0.2)

    def start(self, cmd, log):
        p = subprocess.Popen(cmd, stdout=open(os.path.join(self.tmp, log), "w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def status(self):
        r = subprocess.run([self.coord, "--log-level", "warn", "status", "--farm", self.endpoint, "--json"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except ValueError:
            return None

    def sample(self):
        st = self.status()
        s = {"t": time.time(), "load": loadavg(), "rss": rss_kib(self.serve.pid), "measured": None, "tunes": {}}
        if st:
            s["measured"] = st.get("jobs_measured", 0)
            s["cancelled"] = st.get("jobs_cancelled", 0)
            for tv in st.get("tunes", []):
                s["tunes"][tv["id"] if "id" in tv else tv.get("tune_id")] = (
                    tv.get("priority", 1), tv.get("measured", 0), tv.get("queued", 0), tv.get("connected", True))
        self.samples.append(s)
        return s

    def sample_every(self, seconds):
        def loop():
            while not self.stop_sampling.is_set():
                self.sample()
                self.stop_sampling.wait(seconds)
        t = threading.Thread(target=loop, daemon=True)
        t.start()
        return t

    def close(self):
        self.stop_sampling.set()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def tunes_cmd(farm, a, tunes, jobs, tag, duration=0, outstanding=None):
    cmd = [farm.bench, "--service", farm.endpoint, "--tunes", str(tunes), "--jobs", str(jobs), "--priorities",
           a.priorities, "--outstanding", str(a.outstanding if outstanding is None else outstanding), "--source-bytes", str(a.source_bytes), "--tag", tag]
    return cmd + (["--duration", str(duration)] if duration else []) + (["--retune"] if a.retune else [])


def fairness(samples, tunes, window_s):
    """Fairness over the samples in which `tunes` tunes are connected with jobs queued:
    (error over the whole stretch, worst error over windows of window_s, jobs, seconds, shares)."""
    stretch = [s for s in samples if len(s["tunes"]) == tunes and
               all(q > 0 and c for (_, _, q, c) in s["tunes"].values())]
    if len(stretch) < 2:
        return None

    def error(first, last):
        ids = [i for i in last["tunes"] if i in first["tunes"]]
        d = {i: last["tunes"][i][1] - first["tunes"][i][1] for i in ids}
        total = sum(d.values())
        psum = sum(last["tunes"][i][0] for i in ids)
        if total <= 0 or len(ids) != tunes:
            return None, total, {}
        shares = {i: (last["tunes"][i][0], d[i] / total, last["tunes"][i][0] / psum) for i in ids}
        return max(abs(s - f) / f for (_, s, f) in shares.values()), total, shares

    whole, total, shares = error(stretch[0], stretch[-1])
    worst, start = None, 0  # None: the stretch is shorter than one window
    for k in range(1, len(stretch)):
        if stretch[k]["t"] - stretch[start]["t"] >= window_s:
            e, _, _ = error(stretch[start], stretch[k])
            if e is not None:
                worst = e if worst is None else max(worst, e)
            start = k
    return whole, worst, total, stretch[-1]["t"] - stretch[0]["t"], shares


def run_scenario(a, tmp, report):
    farm = Farm(a, tmp, "scenario")
    try:
        farm.sample()
        base = farm.samples[-1]
        sampler = farm.sample_every(a.sample_every)
        load0 = loadavg()
        cpu0 = {"service": cpu_seconds(farm.serve.pid), "workers": cpu_seconds(farm.workers.pid)}
        threads0 = thread_cpu_seconds(farm.serve.pid)
        t0 = time.time()
        rc, output, tunes_cpu = run_measuring_cpu(tunes_cmd(farm, a, a.tunes, a.jobs, "scenario"), a.timeout)
        wall = time.time() - t0
        # CPU per job of each side: what bounds the rate on a machine of few cores.
        cpu = {k: (cpu_seconds(p.pid) or 0) - (cpu0[k] or 0) for k, p in (("service", farm.serve),
                                                                       ("workers", farm.workers))}
        cpu["tunes"] = tunes_cpu
        service_threads = thread_cpu_delta(farm.serve.pid, threads0, thread_cpu_seconds(farm.serve.pid))
        farm.stop_sampling.set()
        sampler.join()
        end = farm.sample()
        with open(f"{tmp}/scenario-tunes.log", "w") as f:
            f.write(output)
        print(output.strip(), flush=True)
        if rc != 0:
            fail(f"the tunes failed (exit {rc}): {output[-4000:]}")
        total = a.tunes * a.jobs
        measured = end["measured"] - base["measured"]
        if measured != total:
            fail(f"the service measured {measured} jobs for {total} submitted")
        # The rate from the first sample with a result to the last before all were in.
        running = [s for s in farm.samples if s["measured"] is not None and base["measured"] < s["measured"] < end["measured"]]
        steady = (running[-1]["measured"] - running[0]["measured"]) / (running[-1]["t"] - running[0]["t"]) \
            if len(running) >= 2 and running[-1]["t"] > running[0]["t"] else None
        fair = fairness(farm.samples, a.tunes, a.fair_window)
        rss = [s["rss"] for s in farm.samples if s["rss"]]
        load1 = loadavg()
    finally:
        farm.close()
    res = {
        "tunes": a.tunes, "jobs_per_tune": a.jobs, "devices": a.workers * a.devices, "jobs": total,
        "wall_s": wall, "rate_end_to_end": total / wall, "rate_while_running": steady,
        "fairness": None if fair is None else {"error": fair[0], "worst_window_error": fair[1], "jobs": fair[2],
                                               "seconds": fair[3], "window_s": a.fair_window,
                                               "shares": {str(k): v for k, v in fair[4].items()}},
        "rss_kib_max": max(rss) if rss else None, "load_start": load0, "load_end": load1,
        "samples": len(farm.samples),
        "cpu_seconds": cpu, "cpu_us_per_job": {k: 1e6 * v / total for k, v in cpu.items()},
        "service_threads_us_per_job": {k: 1e6 * v / total for k, v in sorted(service_threads.items())},
    }
    report["scenario"] = res
    if fair is None:
        fail("no stretch of samples with every tune waiting: no fairness figure (sample more often?)")
    return res


def run_soak(a, tmp, report):
    farm = Farm(a, tmp, "soak")
    duration = int(a.soak_minutes * 60)
    kills = 0
    try:
        sampler = farm.sample_every(a.rss_every)
        load0 = loadavg()
        t0 = time.time()
        soak = subprocess.Popen(tunes_cmd(farm, a, a.tunes, a.soak_jobs, "soak", duration),
                                stdout=open(f"{tmp}/soak-tunes.log", "w"), stderr=subprocess.STDOUT)
        next_kill = t0 + a.kill_every
        while soak.poll() is None:
            if time.time() - t0 > duration + a.timeout:
                soak.kill()
                fail("the soak's tunes did not end")
            if a.kill_every and time.time() >= next_kill and \
                    time.time() - t0 < duration - a.kill_after - a.client_grace:
                k = subprocess.Popen(tunes_cmd(farm, a, 1, a.kill_jobs, f"killed{kills}", outstanding=0),
                                     stdout=open(f"{tmp}/soak-killed{kills}.log", "w"), stderr=subprocess.STDOUT)
                time.sleep(a.kill_after)
                k.kill()
                k.wait()
                kills += 1
                next_kill = time.time() + a.kill_every
            time.sleep(0.5)
        wall = time.time() - t0
        # The last killed tune's queue is cancelled once the service noticed its silence (3
        # heartbeats of 1 s) and its grace period passed.
        deadline = time.time() + 3 + a.client_grace + 5
        while True:
            end = farm.sample()
            if not kills or not end["tunes"] or time.time() > deadline:
                break
            time.sleep(0.5)
        farm.stop_sampling.set()
        sampler.join()
        end = farm.sample()
        load1 = loadavg()
        out = open(f"{tmp}/soak-tunes.log").read()
        if soak.returncode != 0:
            fail(f"the soak's tunes failed (exit {soak.returncode}): {out[-2000:]}")
    finally:
        farm.close()
    ended = out.count(" jobs in ")
    samples = [s for s in farm.samples if s["rss"]]
    warm = [s for s in samples if s["t"] - t0 >= a.warmup_minutes * 60] or samples
    first, last = warm[0], samples[-1]
    peak = max(s["rss"] for s in samples)
    growth = (last["rss"] - first["rss"]) / first["rss"]
    res = {
        "minutes": wall / 60, "tunes_at_once": a.tunes, "jobs_per_tune": a.soak_jobs, "tunes_ended": ended,
        "tunes_killed": kills, "jobs_cancelled": end.get("cancelled"), "tunes_left": len(end["tunes"]),
        "jobs_measured": end["measured"], "rate": end["measured"] / wall,
        "rss_kib_start": samples[0]["rss"], "rss_kib_after_warmup": first["rss"],
        "warmup_minutes": a.warmup_minutes, "rss_kib_end": last["rss"], "rss_kib_max": peak,
        "growth_after_warmup": growth, "flat": growth <= a.flat_tolerance,
        "load_start": load0, "load_end": load1, "load_max": max(s["load"] for s in samples),
        "rss_series": [(round(s["t"] - t0, 1), s["rss"], s["load"], s["measured"]) for s in samples],
    }
    report["soak"] = res
    if ended == 0 or end["measured"] <= 0:
        fail("no tune ended in the soak")
    # A killed tune must be gone once its grace passed: its queued jobs cancelled, or all of
    # them measured before the service noticed (a fast service on an idle machine does that
    # with the smoke's 6,000; test_farm_service.cpp checks the cancellation itself).
    if kills and end["tunes"]:
        fail(f"{kills} tune(s) killed mid-way, and the service still holds tune(s) {sorted(end['tunes'])} "
             f"after their grace ({end.get('cancelled', 0)} jobs cancelled)")
    if end["tunes"]:
        fail(f"{len(end['tunes'])} tune(s) still known to the service after the soak")
    return res


def markdown(a, report):
    mib = lambda k: f"{k / 1024:.1f} MiB" if k else "-"
    lines = [f"Machine: {report['machine']}, {report['cores']} cores; {report['date']}; "
             f"{a.workers} workers x {a.devices} zero-time emulated h100 devices, credits {a.credits}, "
             f"source {a.source_bytes} bytes, priorities cycled {a.priorities}, "
             f"at most {a.outstanding or 'all'} jobs per tune without an outcome, "
             f"{'--retune jobs (no DB lookup)' if a.retune else 'jobs looked up in the DB as tunes send them'}.", ""]
    s = report.get("scenario")
    if s:
        f = s["fairness"]
        lines += ["| scenario | figure | goal | load avg (start / end) |", "| --- | ---: | --- | --- |",
                  f"| {s['tunes']} tunes x {s['jobs_per_tune']:,} jobs, {s['devices']} devices: wall time | "
                  f"{s['wall_s']:.1f} s | | {s['load_start']:.2f} / {s['load_end']:.2f} |",
                  f"| dispatch rate, end to end (jobs / wall time) | {s['rate_end_to_end']:,.0f} jobs/s | "
                  f">= 20,000 | {s['load_start']:.2f} / {s['load_end']:.2f} |",
                  f"| dispatch rate while running (status samples) | "
                  f"{(s['rate_while_running'] or 0):,.0f} jobs/s | >= 20,000 | |",
                  f"| fairness error, all {s['tunes']} tunes waiting ({f['jobs']:,} jobs, {f['seconds']:.1f} s) | "
                  f"{100 * f['error']:.2f} % | <= 10 % | |",
                  f"| fairness error, worst {f['window_s']:g} s window | " +
                  ("-" if f["worst_window_error"] is None else f"{100 * f['worst_window_error']:.2f} %") + " | | |",
                  f"| service RSS, max | {mib(s['rss_kib_max'])} | | |", ""]
        c = s.get("cpu_us_per_job")
        if c:
            per_job = sum(c.values())
            lines += ["| CPU time per job (user + system, all threads) | µs |", "| --- | ---: |"] + \
                     [f"| {k} | {v:,.0f} |" for k, v in c.items()] + \
                     [f"| all three | {per_job:,.0f} |", "",
                      f"All three share the machine's {report['cores']} cores: at {per_job:,.0f} µs of CPU a job "
                      f"they allow at most {report['cores'] * 1e6 / per_job:,.0f} jobs/s here, with every core "
                      f"theirs; 20,000 jobs/s at these costs needs {20000 * per_job / 1e6:.1f} cores "
                      f"({20000 * c['service'] / 1e6:.1f} of them for the service).", ""]
        t = s.get("service_threads_us_per_job")
        if t:
            lines += ["| the service's CPU per job by thread (main: its loop, on which the rate waits) | µs |",
                      "| --- | ---: |"] + [f"| {k} | {v:,.1f} |" for k, v in t.items()] + \
                     [f"| main thread alone allows at most | {1e6 / t['main']:,.0f} jobs/s |" if t.get("main") else "", ""]
    k = report.get("soak")
    if k:
        lines += ["| soak | figure | goal | load avg |", "| --- | ---: | --- | --- |",
                  f"| duration, tunes ended (killed) | {k['minutes']:.1f} min, {k['tunes_ended']} "
                  f"({k['tunes_killed']}) | | {k['load_start']:.2f} start, {k['load_max']:.2f} max, "
                  f"{k['load_end']:.2f} end |",
                  f"| jobs measured, rate | {k['jobs_measured']:,}, {k['rate']:,.0f} jobs/s | | |",
                  f"| queued jobs of killed tunes cancelled | {k['jobs_cancelled']:,} | | |",
                  f"| service RSS at start / after {k['warmup_minutes']:g} min / end / max | "
                  f"{mib(k['rss_kib_start'])} / {mib(k['rss_kib_after_warmup'])} / {mib(k['rss_kib_end'])} / "
                  f"{mib(k['rss_kib_max'])} | flat | |",
                  f"| RSS growth after the warm-up | {100 * k['growth_after_warmup']:+.1f} % | "
                  f"<= {100 * a.flat_tolerance:g} % | {'flat' if k['flat'] else 'NOT flat'} |", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--smoke", action="store_true", help="seconds, small numbers")
    ap.add_argument("--phases", default="scenario,soak")
    ap.add_argument("--tunes", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--credits", type=int, default=2)
    ap.add_argument("--priorities", default="1,2,3")
    ap.add_argument("--source-bytes", type=int, default=2000)
    ap.add_argument("--retune", action="store_true",
                    help="jobs as `tune --retune` sends them: the service does not look them up in its DB")
    ap.add_argument("--outstanding", type=int, default=1000,
                    help="jobs a tune keeps without an outcome, topped up as outcomes come (0: all at once)")
    ap.add_argument("--sample-every", type=float, default=0.5)
    ap.add_argument("--fair-window", type=float, default=5.0)
    ap.add_argument("--soak-minutes", type=float, default=30)
    ap.add_argument("--soak-jobs", type=int, default=20000)
    ap.add_argument("--rss-every", type=float, default=10)
    ap.add_argument("--warmup-minutes", type=float, default=5)
    ap.add_argument("--flat-tolerance", type=float, default=0.05)
    ap.add_argument("--kill-every", type=float, default=120)
    ap.add_argument("--kill-after", type=float, default=5)
    ap.add_argument("--kill-jobs", type=int, default=5000, help="jobs of a killed tune, submitted at once")
    ap.add_argument("--client-grace", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--out", help="markdown table (and FILE.json beside it)")
    ap.add_argument("--keep", help="keep logs and DBs in this folder")
    a = ap.parse_args()
    if a.smoke:
        # 1,500 jobs a tune: on an idle machine 3 x 400 ended in 0.45 s, too soon for the 0.1 s
        # status samples to see every tune waiting (no fairness figure).
        a.tunes, a.jobs, a.workers, a.devices, a.outstanding = 3, 1500, 2, 2, 100
        a.sample_every, a.fair_window = 0.1, 0.5
        a.soak_minutes, a.soak_jobs, a.rss_every, a.warmup_minutes = 0.12, 200, 1, 0.03
        # 6,000 jobs a killed tune: its queue must outlast the second before the kill and the
        # service's 3 s to notice the silence (round 6's service measured 2,000 of them in time).
        a.kill_every, a.kill_after, a.kill_jobs, a.client_grace, a.timeout = 1.5, 1, 6000, 1, 120
        a.flat_tolerance = 1.0  # a few seconds are no soak: the smoke run checks the plumbing
    a.bin = os.path.abspath(a.bin)
    for b in ("dc-coordinator", "bench_farm"):
        if not os.access(os.path.join(a.bin, b), os.X_OK):
            fail(f"no {b} in {a.bin} (--bin DIR)")
    tmp = a.keep or tempfile.mkdtemp(prefix="dc-bench-farm-service-")
    os.makedirs(tmp, exist_ok=True)
    print("logs in", tmp, flush=True)
    report = {"machine": cpu_name(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "smoke": a.smoke}
    phases = a.phases.split(",")
    if "scenario" in phases:
        run_scenario(a, tmp, report)
    if "soak" in phases:
        run_soak(a, tmp, report)
    md = markdown(a, report)
    print(md, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md + "\n")
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump(report, f, indent=1)
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.smoke and report.get("soak") and not report["soak"]["flat"]:
        fail("RSS grew")
    print("ok", flush=True)


if __name__ == "__main__":
    main()
