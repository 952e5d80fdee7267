"""What the benchmark scripts (bench_foundation.py, bench_peers.py) share: the machine's
description in their reports."""
import platform


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
