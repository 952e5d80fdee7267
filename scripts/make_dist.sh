#!/usr/bin/env bash
# A relocatable bundle of dc for machines without Debian's -dev packages: GPU nodes that run
# dc-worker or dc-run, or the benchmark scripts (--dc-bin DEST/bin).
#
#   scripts/make_dist.sh [--no-build] [--with-tests] [--with-nvrtc] [BUILD_DIR [DEST]]
#                                                              defaults: build, dist
# --with-tests adds dc_gpu_tests to DEST/bin (run it from a checkout of the same commit with
# DC_SOURCE_DIR=$PWD: it reads examples/), for checking a GPU machine that has no build.
# --with-nvrtc carries the build's NVRTC and the pip NVRTC 12 of scripts/install-deps.sh too
# (about 115 MB each; redistributable), for nodes that have an NVIDIA driver but no CUDA
# toolkit: dc loads them from DEST/lib at run time (docs/compilation.md, "Which NVRTC").
#
# DEST/bin      dc-coordinator dc-worker dc-db dc-run
# DEST/lib      libdcrt.so and every shared library these load, except the C runtime
#               (glibc: the node's own) and CUDA (libcuda: the node's driver; NVRTC, loaded at
#               run time: the node's toolkits or pip packages, unless --with-nvrtc)
# DEST/include  dc/dcrt.h dc/dcrt.hpp
# Executables look in $ORIGIN/../lib, then in the CUDA toolkit's lib folder; each carried
# library in $ORIGIN, so that their own dependencies resolve inside DEST too. The script
# ends by checking that: every library the bundle needs resolves into DEST/lib or is one
# of the node's own. Needs patchelf (scripts/install-deps.sh).
set -euo pipefail

build_first=1
with_tests=0
with_nvrtc=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build_first=0; shift ;;
    --with-tests) with_tests=1; shift ;;
    --with-nvrtc) with_nvrtc=1; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "make_dist: unknown option $1 (--help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
DEST="${2:-$ROOT/dist}"

command -v patchelf >/dev/null || { echo "make_dist: patchelf is missing (scripts/install-deps.sh)" >&2; exit 2; }
[ -f "$BUILD/CMakeCache.txt" ] || { echo "make_dist: $BUILD is not a configured build folder (scripts/build.sh)" >&2; exit 2; }
targets=(dc-coordinator dc-worker dc-db dc-run dcrt)
[ "$with_tests" = 1 ] && targets+=(dc_gpu_tests)
if [ "$build_first" = 1 ]; then
  cmake --build "$BUILD" -j"${JOBS:-2}" --target "${targets[@]}"
fi
rm -rf "$DEST"
cmake --install "$BUILD" --prefix "$DEST" >/dev/null
DEST="$(cd "$DEST" && pwd)"
if [ "$with_tests" = 1 ]; then
  cp "$BUILD/bin/dc_gpu_tests" "$DEST/bin/"  # every executable lands in BUILD/bin
  patchelf --set-rpath '$ORIGIN/../lib:/usr/local/cuda/lib64' "$DEST/bin/dc_gpu_tests"
fi

# The node's own: glibc's libraries and the loader, and CUDA's driver and (unless carried)
# NVRTC.
is_nodes_own() {
  case "$(basename "$1")" in
    linux-vdso.so.*|ld-linux*.so.*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|\
    libresolv.so.*|libutil.so.*|libcuda.so*) return 0 ;;
    libnvrtc*.so*) [ "$with_nvrtc" = 0 ] && return 0 ;;
  esac
  return 1
}

# Library paths an ELF file loads, as this machine resolves them.
loaded_libs() { ldd "$1" | awk '/=> \// { print $3 }'; }

carried=0
for elf in "$DEST"/bin/* "$DEST"/lib/*.so*; do
  for lib in $(loaded_libs "$elf"); do
    is_nodes_own "$lib" && continue
    name="$(basename "$lib")"
    [ -e "$DEST/lib/$name" ] && continue
    cp -L "$lib" "$DEST/lib/$name"
    chmod u+w "$DEST/lib/$name"
    patchelf --set-rpath '$ORIGIN' "$DEST/lib/$name"
    carried=$((carried + 1))
  done
done

# NVRTC is dlopen'ed (no binary links it): the build's and install-deps.sh's, each with the
# builtins library it loads from its own folder (RUNPATH $ORIGIN).
if [ "$with_nvrtc" = 1 ]; then
  cuda_lib="$(sed -n 's/^CUDAToolkit_LIBRARY_DIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")"
  for dir in "$cuda_lib" /opt/dc/nvrtc-cu*/nvidia/cuda_nvrtc/lib; do
    for lib in "$dir"/libnvrtc.so.[0-9]* "$dir"/libnvrtc-builtins.so.[0-9]*; do
      [ -e "$lib" ] || continue
      name="$(basename "$lib")"
      cp -L "$lib" "$DEST/lib/$name"
      chmod u+w "$DEST/lib/$name"
      patchelf --set-rpath '$ORIGIN' "$DEST/lib/$name"
      carried=$((carried + 1))
    done
  done
fi

# Check: nothing outside DEST but the node's own.
bad=0
for elf in "$DEST"/bin/* "$DEST"/lib/*.so*; do
  for lib in $(env -u LD_LIBRARY_PATH ldd "$elf" | awk '/=> \// { print $3 }'); do
    is_nodes_own "$lib" && continue
    lib="$(realpath -m "$lib")"
    case "$lib" in "$DEST"/lib/*) ;; *) echo "make_dist: $(basename "$elf") loads $lib from outside the bundle" >&2; bad=1 ;; esac
  done
  if env -u LD_LIBRARY_PATH ldd "$elf" | grep -q "not found"; then
    echo "make_dist: $(basename "$elf") has unresolved libraries:" >&2
    env -u LD_LIBRARY_PATH ldd "$elf" | grep "not found" >&2
    bad=1
  fi
done
[ "$bad" = 0 ] || exit 1
echo "make_dist: $DEST ($(du -sh "$DEST" | cut -f1)): $(ls "$DEST/bin" | tr '\n' ' ')+ libdcrt and $carried carried libraries"
