"""What the benchmark scripts (bench_foundation.py, bench_peers.py, bench_templates.py)
share: the machine's description in their reports, the check that PyTorch can run."""
import os
import platform
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
