#!/usr/bin/env bash
# Builds libzmq with ThreadSanitizer for `scripts/test.sh --tsan`: Debian's libzmq is not
# instrumented, so TSan cannot see how it hands its objects between the caller's thread and
# its I/O thread ("ZMQbg/IO/0") and reports races on them that are not there.
#   scripts/sanitizers/tsan_libzmq.sh DEST     installs into DEST (lib/libzmq.so.5, include/)
# The source is Debian's own package of the installed libzmq5 version (orig tarball and
# Debian's patches, applied by dpkg-source), fetched here: nothing third-party is in git.
# Built once: a stamp in DEST names the version and flags, and a rerun with the same ones
# changes nothing and touches no network. CURVE through libsodium, as Debian builds it;
# Debian's PGM, NORM and GSSAPI transports are left out (dc uses tcp and ipc only).
set -euo pipefail
dest="$(realpath -m "$1")"
version="$(dpkg-query -W -f='${Version}' libzmq5)"
flags="-fsanitize=thread -O1 -g -fno-omit-frame-pointer"
stamp="zeromq3 $version, gcc $(gcc -dumpfullversion), $flags"
if [ -f "$dest/.built" ] && [ "$(cat "$dest/.built")" = "$stamp" ] && [ -e "$dest/lib/libzmq.so.5" ]; then
  exit 0
fi
echo "tsan_libzmq: building libzmq $version with $flags into $dest"

# A deb-src entry for this release, added once (a fresh machine has only binary entries).
if ! apt-get source --print-uris -qq "zeromq3=$version" >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "tsan_libzmq: need root or sudo to add a deb-src entry for zeromq3" >&2; exit 1; }
    SUDO="sudo"
  fi
  . /etc/os-release
  list=/etc/apt/sources.list.d/dc-src.sources
  echo "tsan_libzmq: adding Debian source entries for $VERSION_CODENAME in $list"
  $SUDO tee "$list" >/dev/null <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $VERSION_CODENAME $VERSION_CODENAME-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: $VERSION_CODENAME-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  $SUDO apt-get update -q
fi

work="$dest/src"
rm -rf "$work" "$dest/lib" "$dest/include" "$dest/.built"
mkdir -p "$work"
(cd "$work" && apt-get source --download-only -q "zeromq3=$version" && dpkg-source -x ./*.dsc tree >/dev/null)

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# GCC, like dc's TSan build: both must use the same TSan runtime (libtsan).
cmake -S "$work/tree" -B "$work/build" "${launcher[@]}" -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
  -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DCMAKE_INSTALL_PREFIX="$dest" -DCMAKE_INSTALL_LIBDIR=lib \
  -DWITH_LIBSODIUM=ON -DENABLE_CURVE=ON -DENABLE_DRAFTS=OFF -DWITH_OPENPGM=OFF -DWITH_NORM=OFF \
  -DBUILD_STATIC=OFF -DBUILD_TESTS=OFF -DWITH_DOCS=OFF -DWITH_PERF_TOOL=OFF -DENABLE_CPACK=OFF \
  -DLIBZMQ_WERROR=OFF >/dev/null
nice -n 10 cmake --build "$work/build" -j"${SANITIZE_JOBS:-2}"
cmake --install "$work/build" >/dev/null
echo "$stamp" >"$dest/.built"
