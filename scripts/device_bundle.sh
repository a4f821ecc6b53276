#!/usr/bin/env bash
# Gather what a bare device machine lacks to build and check sluice into
# .devbundle/ (ignored by git; the device tool carries it with `carry`):
#   .devbundle/debs/   Debian .deb files of the build dependencies and the
#                      libraries they need at run time (apt-get download;
#                      gpu_check.sh unpacks them with dpkg -x into a private
#                      prefix there, never into /)
#   .devbundle/wheels/ NVIDIA's nvidia-nvjpeg wheel (nvjpeg.h, libnvjpeg.so.13),
#                      fetched with pip inside a private virtual environment
#                      (scripts/nvjpeg_fetch.sh)
# and prints the size, which must stay under 60 MiB (the tool carries at most
# 64 MiB per call, the working tree included). Run it here, on the host:
#   bash scripts/device_bundle.sh [DIR]        (DIR: default .devbundle)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.devbundle}
LIMIT_MIB=60
# Headers, pkg-config files and static-link pieces (-dev), the shared
# libraries behind them, and the two code generators the build runs.
DEBS=(pkgconf pkgconf-bin libpkgconf3 pkg-config
      libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo
      libspng-dev libspng0 libpng-dev libpng16-16 zlib1g-dev
      libwebp-dev libwebp7 libwebpdemux2 libwebpmux3
      libzstd-dev libzstd1 libxxhash-dev libxxhash0 libcjson-dev libcjson1 libdlpack-dev
      libprotobuf-c-dev libprotobuf-c1 protobuf-c-compiler libprotoc32 libprotobuf32)

mkdir -p "$DIR/debs" "$DIR/wheels"

echo "== .debs (apt-get download)" >&2
( cd "$DIR/debs" && rm -f ./*.deb && apt-get -o APT::Sandbox::User=root download -q "${DEBS[@]}" >/dev/null )

echo "== nvidia-nvjpeg wheel (scripts/nvjpeg_fetch.sh: pip download in a private venv)" >&2
rm -f "$DIR"/wheels/*.whl
bash scripts/nvjpeg_fetch.sh --wheel-dir "$DIR/wheels" >/dev/null

bytes=$(du -sb "$DIR" | cut -f1)
mib=$(( (bytes + 1048575) / 1048576 ))
echo "device bundle: $DIR: $(ls "$DIR"/debs | wc -l) .debs, $(ls "$DIR"/wheels | wc -l) wheel(s), ${mib} MiB (limit ${LIMIT_MIB} MiB)"
if [ "$mib" -ge "$LIMIT_MIB" ]; then
  echo "device bundle: over ${LIMIT_MIB} MiB: the device tool could not carry it with the tree" >&2
  exit 1
fi
