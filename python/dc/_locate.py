"""Where dc's executables are: $DC_BIN_DIR, the package's own bin/ (a pip install bundles
them), build/bin next to build/python (the build tree), then PATH."""
import os
import shutil
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def executable(name):
    candidates = []
    if os.environ.get("DC_BIN_DIR"):
        candidates.append(Path(os.environ["DC_BIN_DIR"]) / name)
    candidates.append(_HERE / "bin" / name)
    candidates.append(_HERE.parent.parent / "bin" / name)  # build/python/dc -> build/bin
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which(name)
    if found:
        return found
    from .errors import Error
    raise Error(f"cannot find the {name} executable: build dc (scripts/build.sh), put its bin/ "
                f"on PATH or set DC_BIN_DIR (looked in {', '.join(str(c.parent) for c in candidates)})")


def cache_dir():
    """The per-user cache: $XDG_CACHE_HOME/dc or ~/.cache/dc (as the workers' compile cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dc"
