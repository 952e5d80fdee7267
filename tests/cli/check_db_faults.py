#!/usr/bin/env python3
"""Disk and database faults of `dc-coordinator tune` and `plan` (issue 15), one case per run:

  disk_full   the tuning DB on a small tmpfs that the test fills: the tune stops with one
              `error:` line and exit 2, PRAGMA integrity_check is ok, and a rerun after the
              space is freed resumes: every planned result exactly once (rows counted).
  locked      another process holds the DB's write lock mid-tune: a hold shorter than the busy
              timeout (--db-timeout) is waited out and the tune completes; a longer one stops
              the tune with one `error:` line naming the lock and the timeout, exit 2, in about
              the timeout; a rerun completes without duplicates.
  two_tunes   two tunes of one model write one DB at the same time: both exit 0, each variant
              has exactly one result, the shared tables have no duplicate names.
  plan_full   `plan --out` and `tune --out` into a full tmpfs: exit 2 with one `error:` line,
              and the target holds nothing, or the earlier plan byte for byte; no staging
              folder is left behind.

usage: check_db_faults.py CASE DC_COORDINATOR MODEL.onnx GPU

disk_full and plan_full mount a tmpfs (`mount -t tmpfs -o size=...`): they need root and are
skipped (exit 77, ctest SKIP_RETURN_CODE) elsewhere, with the reason. The mount is removed
even when the test fails.
"""
import contextlib
import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
# KiB left free for the DB: the schema and about half of the results (every commit appends
# its pages to the WAL, ~20 KiB each here), so that the disk fills mid-tune.
LEAVE = 512



def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(cmd, timeout=300, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def expect_user_error(rc, out, err, needles, what):
    """Exit 2, exactly one `error:` line that holds every needle, nothing internal."""
    lines = error_lines(err)
    if rc != 2:
        fail(f"{what}: exit {rc}, expected 2\n{out[-2000:]}\n{err[-3000:]}")
    if len(lines) != 1:
        fail(f"{what}: {len(lines)} error: lines, expected one:\n{err[-3000:]}")
    for n in needles:
        if n not in lines[0]:
            fail(f"{what}: the error line lacks {n!r}: {lines[0]}")
    if "internal error" in err.lower() or "terminate called" in err:
        fail(f"{what}: an internal error or abort:\n{err[-3000:]}")
    print(f"{what}: exit 2, {lines[0]}")


def tune_cmd(coord, model, gpu, db, *extra):
    # Few variants, no winner checks, no reference kernels: ~20 jobs in ~10 s on 2 cores.
    return [coord, "tune", model, "--gpus", gpu, "--emulate", "--local-workers", "2", "--top-k", "1",
            "--no-check", "--no-cross-check", "--no-reference", "--quiet", "--db", db] + list(extra)


def env_with_cache(tmp, name):
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = os.path.join(tmp, "cache-" + name)
    return env


def db_state(path):
    """(result rows as (workload, key, gpu) with repeats, integrity, duplicate names)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        rows = con.execute("SELECT v.workload, v.key, m.gpu_type FROM measurements m "
                           "JOIN variants v ON v.id = m.variant_id WHERE m.status <> 'worker_lost'").fetchall()
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        dups = []
        for table, cols in [("gpu_types", "name"), ("workers", "name"), ("workloads", "signature"),
                            ("variants", "workload, key"), ("models", "name, sha256")]:
            dups += con.execute(f"SELECT '{table}', {cols}, count(*) FROM {table} GROUP BY {cols} "
                                "HAVING count(*) > 1").fetchall()
    finally:
        con.close()
    return rows, integrity, dups


def count_rows(path):
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        n = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
        con.close()
        return n
    except sqlite3.Error:
        return 0


def expect_complete(path, reference, what):
    """Every result of `reference` exactly once, integrity ok, no duplicate names."""
    rows, integrity, dups = db_state(path)
    if integrity != "ok":
        fail(f"{what}: integrity_check says {integrity}")
    if dups:
        fail(f"{what}: duplicate rows {dups}")
    if len(rows) != len(set(rows)):
        fail(f"{what}: {len(rows) - len(set(rows))} variants recorded twice")
    if set(rows) != reference:
        fail(f"{what}: {len(set(rows))} variants recorded, {len(reference)} expected "
             f"(missing {len(reference - set(rows))}, extra {len(set(rows) - reference)})")
    print(f"{what}: {len(rows)} results, each once; integrity ok")


def reference_rows(coord, model, gpu, tmp):
    """One undisturbed tune: the result rows every other run must end with."""
    db = os.path.join(tmp, "reference.db")
    rc, out, err = run(tune_cmd(coord, model, gpu, db), env=env_with_cache(tmp, "reference"))
    if rc != 0:
        fail(f"reference tune exited {rc}\n{out}\n{err}")
    rows, integrity, dups = db_state(db)
    if not rows or integrity != "ok" or dups or len(rows) != len(set(rows)):
        fail(f"reference tune: {len(rows)} rows, integrity {integrity}, duplicates {dups}")
    return set(rows)


# ---- a small tmpfs ------------------------------------------------------------------------

def need_root(what):
    if os.geteuid() != 0:
        print(f"SKIP: {what} mounts a tmpfs, which needs root (CI runs as root)")
        sys.exit(SKIP)


@contextlib.contextmanager
def tmpfs(size_kib):
    path = tempfile.mkdtemp(prefix="dc_faults_tmpfs_")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        os.rmdir(path)
        print(f"SKIP: cannot mount a tmpfs here ({p.stderr.strip()})")
        sys.exit(SKIP)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], check=False)
        shutil.rmtree(path, ignore_errors=True)


def fill(path, leave_kib):
    """Writes path/filler until only about leave_kib KiB of the filesystem are free."""
    filler = os.path.join(path, "filler")
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    n = max(0, free - leave_kib * 1024)
    with open(filler, "ab") as f:
        f.write(b"\xa5" * n)
    return filler


def free_kib(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize // 1024


# ---- the cases ----------------------------------------------------------------------------

def case_disk_full(coord, model, gpu, tmp):
    need_root("disk_full")
    reference = reference_rows(coord, model, gpu, tmp)
    with tmpfs(4096) as mnt:
        db = os.path.join(mnt, "tune.db")
        # Room for the schema and a few results, far from all of them (the WAL grows too).
        filler = fill(mnt, leave_kib=LEAVE)
        t0 = time.time()
        rc, out, err = run(tune_cmd(coord, model, gpu, db), env=env_with_cache(tmp, "full"))
        expect_user_error(rc, out, err, ["disk full", "tune.db"], "tune on a full disk")
        rows, integrity, dups = db_state(db)
        if integrity != "ok" or dups or len(rows) != len(set(rows)):
            fail(f"after the full disk: integrity {integrity}, duplicates {dups}")
        if not 0 < len(rows) < len(reference):
            fail(f"the disk did not fill mid-tune: {len(rows)} of {len(reference)} results written")
        print(f"full disk: stopped after {time.time() - t0:.1f} s with {len(rows)} of "
              f"{len(reference)} results; integrity ok")
        os.remove(filler)
        rc, out, err = run(tune_cmd(coord, model, gpu, db), env=env_with_cache(tmp, "full"))
        if rc != 0:
            fail(f"rerun after freeing space exited {rc}\n{out}\n{err}")
        expect_complete(db, reference, "rerun after freeing space")


class LockHolder:
    """Another process's write transaction on the DB (sqlite3 in Python: BEGIN IMMEDIATE
    plus a write), taken once the tune has `after` rows and held for `hold_s` seconds."""

    def __init__(self, db, after, hold_s):
        self.db, self.after, self.hold_s = db, after, hold_s
        self.taken_at = None
        self.thread = threading.Thread(target=self.main, daemon=True)
        self.thread.start()

    def main(self):
        deadline = time.time() + 120
        while count_rows(self.db) < self.after and time.time() < deadline:
            time.sleep(0.02)
        con = sqlite3.connect(self.db, timeout=30, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        con.execute("INSERT INTO imports(source_path, source_user_version, imported_ms) "
                    "VALUES ('lock holder', 1, 0)")
        self.taken_at = time.time()
        self.rows_at_take = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
        time.sleep(self.hold_s)
        con.execute("ROLLBACK")
        con.close()


def case_locked(coord, model, gpu, tmp):
    reference = reference_rows(coord, model, gpu, tmp)
    # Each phase with a fresh compile cache, so that its tune is still compiling and measuring
    # when the lock is taken.
    # 1. A hold shorter than the busy timeout is waited out.
    db = os.path.join(tmp, "short.db")
    holder = LockHolder(db, after=3, hold_s=1.0)
    rc, out, err = run(tune_cmd(coord, model, gpu, db, "--db-timeout", "4"), env=env_with_cache(tmp, "short"))
    holder.thread.join()
    if holder.taken_at is None or holder.rows_at_take >= len(reference):
        fail("the lock was not taken mid-tune")
    if rc != 0:
        fail(f"a 1 s lock under a 4 s busy timeout: tune exited {rc}\n{err[-3000:]}")
    expect_complete(db, reference, "tune that waited out a 1 s lock")
    # 2. A hold longer than the busy timeout stops the tune in about the timeout.
    db = os.path.join(tmp, "long.db")
    holder = LockHolder(db, after=3, hold_s=40.0)
    proc = subprocess.Popen(tune_cmd(coord, model, gpu, db, "--db-timeout", "2"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_with_cache(tmp, "long"))
    out, err = proc.communicate(timeout=120)
    ended = time.time()
    if holder.taken_at is None:
        fail(f"the tune ended before the lock was taken: exit {proc.returncode}\n{err[-2000:]}")
    waited = ended - holder.taken_at
    if holder.rows_at_take >= len(reference):
        fail("the lock was taken after the tune's last result")
    expect_user_error(proc.returncode, out, err, ["locked by another writer", "waited 2 s", "--db-timeout"],
                      "tune under a 40 s lock, busy timeout 2 s")
    if not 1.5 <= waited <= 20:
        fail(f"the tune stopped {waited:.1f} s after the lock was taken (busy timeout 2 s)")
    print(f"stopped {waited:.1f} s after the lock was taken")
    holder.thread.join()
    rows, integrity, dups = db_state(db)
    if integrity != "ok" or dups or len(rows) != len(set(rows)):
        fail(f"after the lock: integrity {integrity}, duplicates {dups}")
    rc, out, err = run(tune_cmd(coord, model, gpu, db), env=env_with_cache(tmp, "long"))
    if rc != 0:
        fail(f"rerun after the lock exited {rc}\n{err[-3000:]}")
    expect_complete(db, reference, "rerun after the lock")


def case_two_tunes(coord, model, gpu, tmp):
    reference = reference_rows(coord, model, gpu, tmp)
    db = os.path.join(tmp, "shared.db")
    # Each tune with its own compile cache, so that both really compile and measure.
    procs = [subprocess.Popen(tune_cmd(coord, model, gpu, db, "--db-timeout", "30"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env_with_cache(tmp, f"t{i}"))
             for i in range(2)]
    sent = []
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            fail(f"tune {i} of two exited {p.returncode}\n{out[-2000:]}\n{err[-3000:]}")
        m = re.search(r"(\d+) jobs, (\d+) results committed", out)
        if not m:
            fail(f"tune {i}: no summary\n{out}")
        sent.append(int(m.group(1)))
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    runs = con.execute("SELECT status FROM tuning_runs ORDER BY id").fetchall()
    con.close()
    if [r[0] for r in runs] != ["ok", "ok"]:
        fail(f"tuning_runs: {runs}")
    # Both measured variants the other measured too (neither saw the other's results at its
    # start), and yet each variant has one result: the second result was not added.
    if min(sent) == 0 or sum(sent) <= len(reference):
        fail(f"the tunes sent {sent} jobs for {len(reference)} variants: they did not overlap")
    print(f"two tunes sent {sent} jobs for {len(reference)} variants")
    expect_complete(db, reference, "two tunes at once")


def tree(path):
    """{relative path: sha256} of every file under path."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, path)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def expect_no_staging(parent, what):
    left = [n for n in os.listdir(parent) if ".staging-" in n]
    if left:
        fail(f"{what}: staging folders left behind: {left}")


def case_plan_full(coord, model, gpu, tmp):
    need_root("plan_full")
    # The plan's size decides how full the disk must be.
    probe = os.path.join(tmp, "probe")
    rc, out, err = run([coord, "plan", model, "--gpus", gpu, "--out", probe])
    if rc != 0:
        fail(f"plan --out exited {rc}\n{err}")
    plan_kib = sum(os.path.getsize(os.path.join(probe, f)) for f in os.listdir(probe)) // 1024
    with tmpfs(max(1024, 4 * plan_kib)) as mnt:
        # 1. No earlier plan: a full disk leaves nothing at the target.
        target = os.path.join(mnt, "plan")
        filler = fill(mnt, leave_kib=plan_kib // 2)
        rc, out, err = run([coord, "plan", model, "--gpus", gpu, "--out", target])
        expect_user_error(rc, out, err, ["disk full"], "plan --out on a full disk")
        if os.path.exists(target):
            fail(f"plan --out on a full disk left {target}: {os.listdir(target)}")
        expect_no_staging(mnt, "plan --out on a full disk")
        # 2. An earlier plan stays byte for byte.
        os.remove(filler)
        rc, out, err = run([coord, "plan", model, "--gpus", gpu, "--out", target])
        if rc != 0:
            fail(f"plan --out with space exited {rc}\n{err}")
        before = tree(target)
        if sorted(before) != ["kernels.cu", "plan.json", "weights.bin"]:
            fail(f"plan folder holds {sorted(before)}")
        filler = fill(mnt, leave_kib=plan_kib // 2)
        rc, out, err = run([coord, "plan", model, "--gpus", gpu, "--out", target, "--top-k", "2"])
        expect_user_error(rc, out, err, ["disk full"], "plan --out over an earlier plan, full disk")
        if tree(target) != before:
            fail("a failed plan --out changed the earlier plan")
        expect_no_staging(mnt, "plan --out over an earlier plan")
        print("plan --out: a full disk leaves nothing, or the earlier plan unchanged")
        # 3. tune --out: the DB elsewhere, the plan folder on the full disk.
        os.remove(filler)
        out_dir = os.path.join(mnt, "tuned")
        filler = fill(mnt, leave_kib=plan_kib // 2)
        rc, out, err = run(tune_cmd(coord, model, gpu, os.path.join(tmp, "tune.db"), "--out", out_dir),
                           env=env_with_cache(tmp, "tune-out"))
        expect_user_error(rc, out, err, ["disk full"], "tune --out on a full disk")
        gpu_dir = os.path.join(out_dir, gpu)
        if os.path.exists(gpu_dir):
            fail(f"tune --out on a full disk left {gpu_dir}: {os.listdir(gpu_dir)}")
        if os.path.isdir(out_dir):
            expect_no_staging(out_dir, "tune --out on a full disk")
        # With space, the same command writes the whole folder (the DB already has the results).
        os.remove(filler)
        rc, out, err = run(tune_cmd(coord, model, gpu, os.path.join(tmp, "tune.db"), "--out", out_dir),
                           env=env_with_cache(tmp, "tune-out"))
        if rc != 0:
            fail(f"tune --out with space exited {rc}\n{err[-3000:]}")
        got = sorted(tree(gpu_dir))
        if got != ["kernels.cu", "plan.json", "selection.json", "summary.txt", "weights.bin"]:
            fail(f"tune --out wrote {got}")
        print("tune --out: a full disk leaves no plan folder; with space the whole folder")


CASES = {"disk_full": case_disk_full, "locked": case_locked, "two_tunes": case_two_tunes,
         "plan_full": case_plan_full}


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in CASES:
        print(__doc__)
        sys.exit(2)
    case, coord, model, gpu = sys.argv[1:]
    tmp = tempfile.mkdtemp(prefix=f"dc_faults_{case}_")
    try:
        t0 = time.time()
        CASES[case](coord, model, gpu, tmp)
        print(f"PASS {case} ({time.time() - t0:.1f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
