#!/usr/bin/python3
"""examples/deploy/slurm/dc-workers.sbatch on a real single-node Slurm cluster (issue 28).

Starts, as root, in a private folder and on free loopback ports (nothing in /etc, /run or
/var is touched): munged with a fresh key, slurmctld and slurmd from Debian's packages
(slurm.conf: one node, this host, with one `gpu` GRES so that the script's `--gres=gpu:1`
is honoured); then a farm service (`dc-coordinator serve`) on loopback, and submits the
batch script unchanged with `sbatch` (DC_WORKER_ARGS="--emulate h100": no GPU here).
Checks, each of which fails on a broken launcher:

  - the job runs, and its `srun` step starts a dc-worker that joins the service under the
    id the script gives it, `<host>/slurm-<job id>`;
  - a tune through the service (`tune --farm`) is measured by that worker: every
    measurement row in the service's DB names it;
  - `scancel` ends the job step, and the worker leaves the service.

usage: check_slurm_cluster.py DC_COORDINATOR DC_WORKER SOURCE_DIR
"""
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

failures = []
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")


def fail(what):
    print("FAIL", what)
    failures.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, probe, seconds):
    """Polls probe() until it returns something true; that value, or None after `seconds`."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    fail(f"{what}: not within {seconds} s")
    return None


def slurm_conf(tmp, node, ctld_port, slurmd_port):
    """One node (this host), one partition, no cgroups, accounting or MPI: what a container
    without systemd can run. The node offers one `gpu` GRES backed by /dev/null, since Slurm
    drops a GPU GRES without a device file."""
    conf = f"""ClusterName=dctest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={tmp}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd.pid
SlurmctldLogFile={tmp}/slurmctld.log
SlurmdLogFile={tmp}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    for d in ("state", "spool"):
        os.makedirs(os.path.join(tmp, d))
    with open(os.path.join(tmp, "slurm.conf"), "w") as f:
        f.write(conf)
    with open(os.path.join(tmp, "gres.conf"), "w") as f:  # read from slurm.conf's folder
        f.write(f"NodeName={node} Name=gpu File=/dev/null\n")
    return os.path.join(tmp, "slurm.conf")


def start_cluster(tmp, env, node):
    """munged, slurmctld and slurmd, daemonised with their pid files in tmp; True once the
    node is idle."""
    with open(os.path.join(tmp, "munge.key"), "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(os.path.join(tmp, "munge.key"), 0o600)
    subprocess.run(["munged", "--force", f"--socket={tmp}/munge.sock", f"--key-file={tmp}/munge.key",
                    f"--log-file={tmp}/munged.log", f"--pid-file={tmp}/munged.pid",
                    f"--seed-file={tmp}/munged.seed"], check=True)
    subprocess.run(["slurmctld", "-i", "-f", env["SLURM_CONF"]], env=env, check=True)
    subprocess.run(["slurmd", "-f", env["SLURM_CONF"], "-N", node], env=env, check=True)

    def node_state():
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True)
        state = r.stdout.strip()
        if state.startswith(("drain", "down", "inval")):  # a stale registration: take it back once
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=env,
                           capture_output=True)
        return state == "idle"
    return wait_for("slurm: the node idle in sinfo", node_state, 60) is not None


def stop_cluster(tmp, env):
    subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, timeout=30)
    for name in ("slurmd", "slurmctld", "munged"):
        try:
            pid = int(open(os.path.join(tmp, f"{name}.pid")).read())
            os.kill(pid, signal.SIGTERM)
            for _ in range(50):
                os.kill(pid, 0)
                time.sleep(0.1)
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass  # gone already (scontrol shutdown), or never started
    # Job steps a cancelled job left behind (slurmstepd outlives slurmd): they run in tmp.
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(tmp):
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def farm_workers(coord, endpoint):
    s = subprocess.run([coord, "status", "--farm", endpoint, "--json"], capture_output=True, text=True)
    return json.loads(s.stdout)["workers"] if s.returncode == 0 else None


def check_job(coord, src, tmp, env, endpoint):
    script = os.path.join(src, "examples", "deploy", "slurm", "dc-workers.sbatch")
    r = subprocess.run(["sbatch", "--parsable", "--nodes=1", f"--chdir={tmp}", script], env=env,
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"slurm: sbatch refused the script: {r.stderr.strip()}")
        return
    job = r.stdout.strip().split(";")[0]
    print(f"slurm: submitted job {job}")
    try:
        state = lambda: subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env,
                                       capture_output=True, text=True).stdout.strip()
        if wait_for(f"slurm: job {job} RUNNING", lambda: state() == "RUNNING", 60) is None:
            return
        want = f"{socket.gethostname()}/slurm-{job}"
        joined = wait_for(f"slurm: a worker {want} in status --farm",
                          lambda: next((w for w in farm_workers(coord, endpoint) or [] if w["id"] == want), None), 60)
        if joined is None:
            return
        print(f"slurm: worker joined as {joined['id']}, serving {joined.get('gpu_types')}")
        if "h100" not in joined.get("gpu_types", []):
            fail(f"slurm: the worker serves {joined.get('gpu_types')}, expected DC_WORKER_ARGS' h100")
        check_tune(coord, src, tmp, endpoint, want)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=30)
    if wait_for(f"slurm: job {job} gone from squeue after scancel", lambda: state() == "", 60) is not None:
        left = wait_for("slurm: the worker left the service after scancel",
                        lambda: not any(w["id"].endswith(f"/slurm-{job}") and w.get("state") != "lost"
                                        for w in farm_workers(coord, endpoint) or []), 60)
        print(f"slurm: after scancel the worker {'left' if left else 'stayed'}")


def check_tune(coord, src, tmp, endpoint, worker_id):
    """A small tune through the service: the only worker is the one the job started."""
    out = os.path.join(tmp, "tune")
    r = subprocess.run([coord, "tune", os.path.join(src, "examples", "tiny_cnn", "model.onnx"), "--gpus", "h100",
                        "--farm", endpoint, "--top-k", "1", "--out", out], capture_output=True, text=True, timeout=600)
    print(f"slurm: tune --farm exit {r.returncode}: {r.stdout.strip().splitlines()[-1:] or r.stderr[-300:]}")
    if r.returncode != 0:
        fail(f"slurm: tune through the service failed: {r.stderr[-1500:]}")
        return
    db = sqlite3.connect(os.path.join(tmp, "service.db"))
    rows = db.execute("SELECT w.name, count(*) FROM measurements m JOIN workers w ON w.id = m.worker_id "
                      "GROUP BY w.name").fetchall()
    db.close()
    print(f"slurm: measurement rows by worker: {rows}")
    if not rows or any(not name.startswith(worker_id) for name, _ in rows):
        fail(f"slurm: expected every measurement by {worker_id}, the DB has {rows}")


def main():
    coord, worker, src = (os.path.abspath(a) for a in sys.argv[1:4])
    if os.geteuid() != 0:
        sys.exit("error: check_slurm_cluster.py starts munged, slurmctld and slurmd: run it as root")
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        sys.exit(f"error: {' '.join(missing)} not found: scripts/install-deps.sh installs Slurm and munge")
    node = socket.gethostname().split(".")[0]
    tmp = tempfile.mkdtemp(prefix="dc-slurm-")
    os.chmod(tmp, 0o755)  # munged refuses a key or socket folder others may write
    home = os.path.join(tmp, "dc-home")  # the bundle layout the script expects: DC_HOME/bin/dc-worker
    os.makedirs(os.path.join(home, "bin"))
    os.symlink(worker, os.path.join(home, "bin", "dc-worker"))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    env = dict(os.environ, SLURM_CONF=slurm_conf(tmp, node, free_port(), free_port()), DC_SERVICE=endpoint,
               DC_HOME=home, DC_KEYS=os.path.join(tmp, "nokeys"), DC_WORKER_ARGS="--emulate h100",
               TMPDIR=tmp)  # the worker's compile cache (the script's default) goes with tmp
    serve = subprocess.Popen([coord, "serve", "--bind", endpoint, "--db", os.path.join(tmp, "service.db")],
                             stdout=open(os.path.join(tmp, "serve.log"), "w"), stderr=subprocess.STDOUT)
    try:
        if start_cluster(tmp, env, node):
            check_job(coord, src, tmp, env, endpoint)
    finally:
        stop_cluster(tmp, env)
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        if failures:
            for log in ("slurmctld.log", "slurmd.log", "serve.log") + tuple(
                    f for f in os.listdir(tmp) if f.startswith("dc-workers-")):
                path = os.path.join(tmp, log)
                if os.path.exists(path):
                    print(f"--- {log} (tail)\n" + "".join(open(path, errors="replace").readlines()[-25:]))
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAIL" if failures else "PASS")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
