#!/usr/bin/env bash
# Make or reuse the two Pythons sluice is tested and measured on beside
# Debian's own (docs/PYTHON.md, "Pythons and torch versions"), under
# ${SLUICE_PYTHONS:-$HOME/.cache/sluice-pythons}:
#
#   cpython-3.13.5t/  CPython 3.13.5 configured --disable-gil (free-threaded),
#                     built from the upstream tarball in Debian 13's python3.13
#                     source package (fetched with `apt-get source`); built once,
#                     reused while its bin/python3.13t runs;
#   gil/              a venv of Debian's /usr/bin/python3 (3.11, GIL), without
#                     the system site packages;
#   ft/               a venv of the free-threaded 3.13t;
#
# each venv with a current pip and the pinned packages below from PyPI (torch's
# CUDA wheels, which run on the CPU too), and sluice itself installed with
# `pip install .` from this working tree on every run, so the venvs follow the
# tree (an incremental CMake build under $P/build/ makes it quick).
#
#   bash scripts/pythons.sh        # last two lines: gil=<python>  ft=<python>
#
# Needs apt (build dependencies, as scripts/deps.sh; sudo when not root),
# Debian's source archive and PyPI: several GB of downloads the first time.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
P=${SLUICE_PYTHONS:-$HOME/.cache/sluice-pythons}
CPY_VERSION=3.13.5
CPY_SUITE=trixie            # Debian 13: its python3.13 source package holds the tarball
CPY=$P/cpython-${CPY_VERSION}t
# The pins: a torch/torchvision pair that resolves for cp311 and cp313t alike
# (torchvision 0.27 is the newest that torch 2.12 satisfies); the rest the
# same on both where PyPI has wheels for both (Pillow 13 has none for
# cp313t: 12.2 there). Wheels only: nothing is compiled from an sdist.
PINS=(torch==2.12.0 torchvision==0.27.0 numpy==2.4.6 pytest==9.2.0 matplotlib==3.10.8
      protobuf==7.36.2 crc32c==2.8)
PILLOW_GIL=pillow==13.0.0
PILLOW_FT=pillow==12.2.0
JOBS=$(nproc)
log() { echo "pythons: $*" >&2; }

# 1. Build dependencies from Debian's apt: sluice's (scripts/deps.sh) and CPython's.
. "$ROOT/scripts/debian.sh"
bash "$ROOT/scripts/deps.sh" >&2
deb_need build-essential dpkg-dev xz-utils libssl-dev zlib1g-dev libffi-dev libbz2-dev \
         liblzma-dev libsqlite3-dev libreadline-dev libncurses-dev uuid-dev libgdbm-dev \
         python3-venv
mkdir -p "$P"

# 2. The free-threaded CPython, built when missing.
if ! "$CPY/bin/python3.13t" -c 'import sys, ssl, sqlite3, bz2, lzma, ctypes; assert not sys._is_gil_enabled()' 2>/dev/null; then
  SRC=$P/src
  rm -rf "$SRC" && mkdir -p "$SRC"
  # Debian's mirror as this machine's apt knows it (scripts/debian.sh); apt
  # checks the archive's signature and the tarball's checksums.
  log "fetching python3.13's source package ($CPY_SUITE)"
  deb_source "$SRC" "$CPY_SUITE" python3.13
  tarball=$(ls "$SRC"/python3.13_${CPY_VERSION}.orig.tar.xz)
  tar -C "$SRC" -xJf "$tarball"
  log "building CPython $CPY_VERSION --disable-gil into $CPY (a few minutes)"
  rm -rf "$CPY"
  (cd "$SRC/Python-$CPY_VERSION" &&
     ./configure --disable-gil --prefix="$CPY" --with-ensurepip=no >"$SRC/configure.log" 2>&1 &&
     make -j"$JOBS" >"$SRC/make.log" 2>&1 &&
     make install >"$SRC/install.log" 2>&1) ||
    { log "the CPython build failed; logs in $SRC"; tail -30 "$SRC"/*.log >&2; exit 1; }
  "$CPY/bin/python3.13t" -c 'import sys, ssl, sqlite3, bz2, lzma, ctypes; assert not sys._is_gil_enabled()' ||
    { log "$CPY/bin/python3.13t lacks a module or has the GIL on; logs in $SRC"; exit 1; }
  rm -rf "$SRC"
fi

# 3. The venvs: a current pip (Debian's pip 23 cannot drive 3.13), the pins,
#    then sluice from this tree.
make_venv() {  # name interpreter pillow-pin
  local name=$1 py=$2 pillow=$3 v=$P/$1
  if ! "$v/bin/python" -c 'import sys' 2>/dev/null || [ ! -x "$v/bin/pip" ]; then
    log "making the $name venv from $py"
    rm -rf "$v"
    "$py" -m venv --without-pip "$v"
    "$v/bin/python" -m ensurepip --upgrade >/dev/null 2>&1 ||
      { log "ensurepip failed in $v"; exit 1; }
  fi
  "$v/bin/python" -m pip install -q --upgrade pip
  # pip skips what is already installed at the pinned version.
  "$v/bin/python" -m pip install -q --only-binary :all: "${PINS[@]}" "$pillow"
  # sluice from the working tree, rebuilt incrementally in a kept build folder.
  log "pip install . into $name"
  (cd "$ROOT" && CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" "$v/bin/python" -m pip install -q \
     --force-reinstall --no-deps \
     --config-settings=build-dir="$P/build/$name" .)
  "$v/bin/python" -c 'import sluice, torch, torchvision, numpy, PIL, matplotlib' ||
    { log "the $name venv cannot import its packages"; exit 1; }
}
make_venv gil /usr/bin/python3 "$PILLOW_GIL"
make_venv ft "$CPY/bin/python3.13t" "$PILLOW_FT"
"$P/ft/bin/python" -c 'import sys, sluice; assert not sys._is_gil_enabled(), "import sluice turned the GIL on"'
echo "gil=$P/gil/bin/python"
echo "ft=$P/ft/bin/python"
