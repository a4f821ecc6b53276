#!/usr/bin/env bash
# Install what sluice needs to build, test and run its demo, from Debian's apt.
# Runs as root or through sudo; does nothing when everything is present.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
      libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev zlib1g-dev libwebp-dev
      libzstd-dev libxxhash-dev libcjson-dev libdlpack-dev
      libprotobuf-c-dev protobuf-c-compiler
      libsnappy-dev liblz4-dev libbrotli-dev   # Parquet's page compressions (zlib, zstd above)
      python3-dev python3-venv python3-numpy python3-torch python3-torchvision python3-pil python3-pytest python3-opencv
      python3-protobuf protobuf-compiler python3-crc32c   # TFRecord tests: files made by Google's runtime
      dataset-fashion-mnist
      libssl-dev libcurl4-openssl-dev   # s3:// signing (libcrypto); remote inputs (src/io/http.c)
      nginx-light   # serves datasets to tests/python/test_remote.py
      mate-backgrounds   # real photographs for the image reference tests
      lcov)   # scripts/coverage.sh: line/branch/function coverage per layer (gcov is gcc's)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "sluice: installing ${missing[*]}" >&2
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
