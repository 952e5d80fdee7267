"""Builds dc._dcrt against libdcrt from a built dc tree and bundles what the package runs:
libdcrt.so next to the module, and dc-coordinator, dc-worker and dc-run in dc/bin (found by
dc/_locate.py). DC_BUILD_DIR names the build tree (default: ../build, what
scripts/build.sh writes). docs/python.md."""
import os
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent
BUILD = Path(os.environ.get("DC_BUILD_DIR", SOURCE / "build")).resolve()
EXECUTABLES = ["dc-coordinator", "dc-worker", "dc-run"]


def pybind11_include():
    try:
        import pybind11
        return [pybind11.get_include()]
    except ImportError:  # Debian's pybind11-dev: /usr/include/pybind11, on the default path
        return []


class BuildWithRuntime(build_ext):
    def run(self):
        missing = [p for p in [BUILD / "lib" / "libdcrt.so"] + [BUILD / "bin" / e for e in EXECUTABLES]
                   if not p.is_file()]
        if missing:
            raise SystemExit(f"dc is not built in {BUILD} (missing {', '.join(map(str, missing))}): "
                             "run scripts/build.sh first, or set DC_BUILD_DIR")
        super().run()
        package = Path(self.build_lib) / "dc"
        shutil.copy2(BUILD / "lib" / "libdcrt.so", package / "libdcrt.so")
        (package / "bin").mkdir(exist_ok=True)
        for e in EXECUTABLES:
            shutil.copy2(BUILD / "bin" / e, package / "bin" / e)


setup(
    ext_modules=[Extension(
        "dc._dcrt",
        sources=["src/dcrt_module.cpp"],
        include_dirs=[str(SOURCE / "worker" / "runtime"), "src"] + pybind11_include(),
        library_dirs=[str(BUILD / "lib")],
        libraries=["dcrt"],
        runtime_library_dirs=["$ORIGIN"],
        extra_compile_args=["-std=c++17", "-fvisibility=hidden"],
        language="c++",
    )],
    cmdclass={"build_ext": BuildWithRuntime},
)
