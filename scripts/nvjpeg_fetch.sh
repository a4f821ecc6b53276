#!/usr/bin/env bash
# Fetch NVIDIA's nvidia-nvjpeg wheel (CUDA 13: nvjpeg.h and libnvjpeg.so.13)
# with pip inside a private virtual environment (never the system Python),
# unpack it into a cache folder and print its root, the folder holding
# include/nvjpeg.h and lib/ — what CMake's NVJPEG_ROOT expects. CMake looks in
# the default cache folder by itself, so after this a plain configure builds
# sluice's nvJPEG code. libsluice never links libnvjpeg: it is loaded with
# dlopen at run time (SLUICE_NVJPEG names it, or the loader's search path).
#   bash scripts/nvjpeg_fetch.sh [--wheel-dir DIR]   (also keep the .whl in DIR)
# Cache: ${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/sluice-tools}/nvjpeg
set -euo pipefail
WHEEL_DIR=""
[ "${1:-}" = "--wheel-dir" ] && WHEEL_DIR=$2
CACHE=${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tools}
VENV=$CACHE/pip-venv
DL=$CACHE/wheels
mkdir -p "$DL"
if ! ls "$DL"/nvidia_nvjpeg-13.*.whl >/dev/null 2>&1; then
  [ -x "$VENV/bin/pip" ] || /usr/bin/python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64 \
    -d "$DL" "nvidia-nvjpeg>=13,<14" >&2
fi
whl=$(ls "$DL"/nvidia_nvjpeg-13.*.whl | sort -V | tail -1)
if [ -n "$WHEEL_DIR" ]; then mkdir -p "$WHEEL_DIR" && cp "$whl" "$WHEEL_DIR"/; fi
dest=$CACHE/nvjpeg
if [ ! -f "$dest/$(basename "$whl").unpacked" ]; then
  rm -rf "$dest" && mkdir -p "$dest"
  /usr/bin/python3 -m zipfile -e "$whl" "$dest/wheel"
  h=$(find "$dest/wheel" -name nvjpeg.h | head -1)
  [ -n "$h" ] || { echo "nvjpeg_fetch.sh: $whl has no nvjpeg.h" >&2; exit 1; }
  ln -s "$(dirname "$(dirname "$h")")" "$dest/root"
  touch "$dest/$(basename "$whl").unpacked"
fi
readlink -f "$dest/root"
