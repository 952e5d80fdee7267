"""What the benchmark scripts (bench_foundation.py, bench_peers.py, bench_templates.py)
share: the machine's description in their reports, the check that PyTorch can run, a cold tune's folder."""
import os
import platform
import shutil
import sys


def cpu_name():
    """The CPU's model name from /proc/cpuinfo, or what the platform module says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def require_torch(device):
    """Exits with a clear message unless PyTorch imports and, for device "cuda", sees a GPU
    (status 2: this machine cannot run the benchmark; --device cpu is the smoke test)."""
    try:
        import torch
    except ImportError:
        sys.exit("error: PyTorch is not installed for %s (run with a python3 that has torch: "
                 "Debian's /usr/bin/python3 on the build machine, the image's python3 on the GPU "
                 "machines)" % sys.executable)
    if device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA GPU visible to PyTorch; this benchmark needs one "
              "(--device cpu runs a plumbing smoke test instead)", file=sys.stderr)
        sys.exit(2)


def add_dc_peer_args(ap, root, runs, what, docs_md, smoke_md):
    """The options of the scripts that tune dc and time it beside its peers (bench_peers.py,
    its --train mode): timing, dc's binaries and tune, the work folder and the table."""
    ap.add_argument("--runs", type=int, default=runs, help="at least this many timed %s (>= 50 on a GPU)" % what)
    ap.add_argument("--min-seconds", type=float, default=2.0, help="and at least this long")
    ap.add_argument("--warmup-seconds", type=float, default=1.0)
    ap.add_argument("--dc-bin", help="folder with dc-coordinator, dc-worker, dc-run (default: dist/bin, else build/bin)")
    ap.add_argument("--gpu-type", help="dc's GPU type for --gpus (default: matched from the device name)")
    ap.add_argument("--config", help="tune configuration (default examples/tune.yaml; cpu: tune-quick.yaml)")
    ap.add_argument("--skip-tune", action="store_true", help="use the plans of an earlier tune in WORK")
    ap.add_argument("--work", default=os.path.join(root, "build-bench"), help="exports, DBs, plans, results")
    ap.add_argument("--out-md", help="default %s (cuda), %s (cpu)" % (os.path.relpath(docs_md, root), smoke_md))
    ap.add_argument("--fresh", action="store_true", help="forget the results of earlier calls")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")


def finish_common_args(ap, a, root, docs_md, smoke_md):
    """The checks and defaults both benchmark scripts share: enough runs on a GPU, absolute
    work and config paths (tune.yaml on a GPU, tune-quick.yaml for the CPU smoke run), and
    an output table that a CPU smoke run may not write into docs/."""
    if a.device == "cuda" and a.runs < 50:
        ap.error("--runs must be >= 50 on a GPU")
    a.work = os.path.abspath(a.work)
    a.config = os.path.abspath(a.config or os.path.join(
        root, "examples", "tune.yaml" if a.device == "cuda" else "tune-quick.yaml"))
    a.out_md = os.path.abspath(a.out_md or (docs_md if a.device == "cuda" else smoke_md))
    if a.device == "cpu" and a.out_md == docs_md:
        ap.error("a CPU smoke run is not a benchmark: it may not write %s" % os.path.relpath(docs_md, root))


def fresh_tune_dir(base, db, out):
    """A tune that starts cold: BASE exists, DB (with its -wal and -shm) and OUT do not."""
    os.makedirs(base, exist_ok=True)
    for path in (db, db + "-wal", db + "-shm"):
        if os.path.exists(path):
            os.remove(path)
    shutil.rmtree(out, ignore_errors=True)
