#!/usr/bin/python3
"""The cluster launchers of examples/deploy/ (docs/farm.md, "Deploying the service"):

  flags       every dc flag the launchers pass exists in the binary's --help (a renamed
              flag fails here, not on a cluster)
  kubernetes  the manifests validate against the Kubernetes schemas (kubernetes-validate
              --strict, from PyPI, installed by scripts/install-deps.sh into /opt/dc/pydeps)
  systemd     systemd-analyze verify passes both units without a warning (their binaries
              pointed at this build)
  slurm       the batch script, run as a Slurm job step would run it (srun replaced by a shim
              that sets SLURM_JOB_ID and runs the step here), starts a dc-worker that joins a
              farm service on loopback: `status --farm --json` lists it under the id the
              script gives it; without DC_SERVICE it exits non-zero, naming it

usage: check_deploy.py DC_COORDINATOR DC_WORKER SOURCE_DIR
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PYDEPS = "/opt/dc/pydeps"
failures = []


def fail(what):
    print("FAIL", what)
    failures.append(what)


def help_flags(cmd):
    out = subprocess.run(cmd + ["--help"], capture_output=True, text=True).stdout
    return set(re.findall(r"--[a-z][a-z0-9-]*", out))


def check_flags(coord, worker, deploy):
    serve, work = help_flags([coord, "serve"]), help_flags([worker])
    if not serve or not work:
        fail(f"flags: no --help text from {coord} serve or {worker}")
        return
    for path, known in ((f"{deploy}/systemd/dc-service.service", serve),
                        (f"{deploy}/kubernetes/dc-service.yaml", serve),
                        (f"{deploy}/systemd/dc-worker@.service", work),
                        (f"{deploy}/kubernetes/dc-worker-daemonset.yaml", work),
                        (f"{deploy}/slurm/dc-workers.sbatch", work)):
        # The commands, not the comments (which show systemctl, kubectl and sbatch lines).
        text = "\n".join(l for l in open(path).read().splitlines() if not l.lstrip().startswith("#"))
        if path.endswith(".sbatch"):
            text = text.replace("--kill-on-bad-exit", "")  # srun's own
        used = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
        unknown = sorted(used - known)
        print(f"flags: {os.path.basename(path)}: {len(used)} flags, unknown: {unknown or 'none'}")
        if unknown:
            fail(f"flags: {path} passes {unknown}, which the binary does not know")


def check_kubernetes(deploy):
    if not os.path.isdir(os.path.join(PYDEPS, "kubernetes_validate")):
        fail(f"kubernetes: kubernetes-validate is not in {PYDEPS}; run scripts/install-deps.sh")
        return
    files = [os.path.join(deploy, "kubernetes", f) for f in ("dc-service.yaml", "dc-worker-daemonset.yaml")]
    env = dict(os.environ, PYTHONPATH=PYDEPS)
    r = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict"] + files,
                       capture_output=True, text=True, env=env)
    passed = r.stdout.count(" passed for resource ")
    print(f"kubernetes: exit {r.returncode}, {passed} resources passed")
    if r.returncode != 0 or passed != 4:
        fail(f"kubernetes: expected 4 resources to pass, exit 0: {r.stdout}{r.stderr}")


def check_systemd(coord, deploy, tmp):
    if shutil.which("systemd-analyze") is None:
        fail("systemd: no systemd-analyze (Debian's systemd package)")
        return
    bindir = os.path.dirname(os.path.abspath(coord))
    for unit, as_name in (("dc-service.service", "dc-service.service"), ("dc-worker@.service", "dc-worker@0.service")):
        text = open(os.path.join(deploy, "systemd", unit)).read().replace("/opt/dc/bin", bindir)
        path = os.path.join(tmp, as_name)  # an instance name: verify skips a bare template
        open(path, "w").write(text)
        r = subprocess.run(["systemd-analyze", "verify", "--man=no", path], capture_output=True, text=True)
        notes = [l for l in (r.stdout + r.stderr).splitlines() if as_name in l]
        print(f"systemd: {unit}: exit {r.returncode}, {len(notes)} warnings")
        if r.returncode != 0 or notes:
            fail(f"systemd: {unit}: {r.stdout}{r.stderr}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_slurm(coord, worker, deploy, tmp):
    script = os.path.join(deploy, "slurm", "dc-workers.sbatch")
    if subprocess.run(["bash", "-n", script]).returncode != 0:
        fail("slurm: the batch script does not parse")
        return
    # A bundle layout the script expects: DC_HOME/bin/dc-worker.
    home = os.path.join(tmp, "dc-home")
    os.makedirs(os.path.join(home, "bin"))
    os.symlink(os.path.abspath(worker), os.path.join(home, "bin", "dc-worker"))
    shim = os.path.join(tmp, "shim")
    os.makedirs(shim)
    with open(os.path.join(shim, "srun"), "w") as f:  # one task on this node, as srun would run it
        f.write("#!/bin/bash\nwhile [[ \"$1\" == --* ]]; do shift; done\nexport SLURM_JOB_ID=4242\nexec \"$@\"\n")
    os.chmod(os.path.join(shim, "srun"), 0o755)
    base = dict(os.environ, PATH=shim + ":" + os.environ["PATH"], DC_HOME=home, DC_KEYS=os.path.join(tmp, "nokeys"),
                DC_WORKER_ARGS="--emulate h100", TMPDIR=tmp)
    r = subprocess.run(["bash", script], capture_output=True, text=True, env=base, timeout=30)
    if r.returncode == 0 or "DC_SERVICE" not in r.stderr:
        fail(f"slurm: without DC_SERVICE: expected a non-zero exit naming it, got {r.returncode}: {r.stderr}")

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    serve = subprocess.Popen([coord, "serve", "--bind", endpoint, "--db", os.path.join(tmp, "service.db")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job = subprocess.Popen(["bash", script], env=dict(base, DC_SERVICE=endpoint), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    want = f"{socket.gethostname()}/slurm-4242"
    seen = None
    try:
        deadline = time.time() + 60
        while time.time() < deadline and seen is None:
            time.sleep(1)
            s = subprocess.run([coord, "status", "--farm", endpoint, "--json"], capture_output=True, text=True)
            if s.returncode == 0:
                workers = json.loads(s.stdout)["workers"]
                seen = next((w for w in workers if w["id"].startswith(want)), None)
        print(f"slurm: worker {'joined as ' + seen['id'] if seen else 'did not join'}")
        if seen is None:
            fail(f"slurm: no worker with id {want}* joined the service within 60 s")
        elif "h100" not in seen.get("gpu_types", []):
            fail(f"slurm: the worker serves {seen.get('gpu_types')}, expected the emulated h100 of DC_WORKER_ARGS")
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        serve.send_signal(signal.SIGTERM)
        for p in (job, serve):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        if seen is None:
            print("service log:", serve.stdout.read()[-2000:], "\njob log:", job.stdout.read()[-2000:])


def main():
    coord, worker, src = sys.argv[1:4]
    deploy = os.path.join(src, "examples", "deploy")
    with tempfile.TemporaryDirectory(prefix="dc-deploy-") as tmp:
        check_flags(coord, worker, deploy)
        check_kubernetes(deploy)
        check_systemd(coord, deploy, tmp)
        check_slurm(coord, worker, deploy, tmp)
    print("FAIL" if failures else "PASS")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
