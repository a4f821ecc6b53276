#!/usr/bin/env bash
# Make (or reuse) the virtual environment with the loaders sluice is measured
# against (bench/peers/run.py), from PyPI, pinned:
#   tensorflow-cpu (tf.data), nvidia-dali-cuda130 (run CPU-only), webdataset,
#   ffcv (built here against Debian's OpenCV and libjpeg-turbo), mosaicml-streaming.
#
#   bash bench/peers/setup.sh            # last line of output: the venv's python
#   PY=$(bash bench/peers/setup.sh | tail -1)
#
# The venv lives outside the repo, at ${SLUICE_PEERS_VENV:-$HOME/.cache/sluice-peers},
# made from /usr/bin/python3 with --system-site-packages so Debian's torch,
# torchvision, numpy and Pillow stay the ones used (a constraints file keeps
# pip from replacing them). Not part of the test command: these are large
# downloads (~1 GB).
#
# A peer that cannot be installed does not stop the others: the reason goes to
# VENV/sluice-peers-status/<loader>.txt and run.py reports that loader's row as
# "not installable: <reason>".
#
# Pins (chosen for Debian 12's Python 3.11, numpy 1.24 and torch 1.13):
#   tensorflow-cpu 2.17.1: the last release that accepts numpy < 1.26 on Python 3.11;
#   protobuf < 5 for it (mosaicml-streaming would otherwise pull protobuf 7);
#   opencv-python 4.11.0.86 (an ffcv dependency): the newest built for numpy 1.x;
#   mosaicml-streaming rather than litdata: litdata >= 0.2 needs torch >= 2.4.
set -euo pipefail

VENV=${SLUICE_PEERS_VENV:-$HOME/.cache/sluice-peers}
SYSPY=/usr/bin/python3
STATUS=$VENV/sluice-peers-status

TF=tensorflow-cpu==2.17.1
DALI=nvidia-dali-cuda130==2.4.0
WDS=webdataset==1.0.2
FFCV=ffcv==1.0.2
STREAMING=mosaicml-streaming==0.13.0

say() { echo "peers: $*" >&2; }

# Debian packages: venv/headers for the interpreter, OpenCV and libjpeg-turbo
# headers for FFCV's C++ extension, pkg-config that its setup.py calls.
APT=(python3-venv python3-dev pkg-config g++ libopencv-dev libturbojpeg0-dev)
missing=()
for p in "${APT[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  LOCK=()
  if command -v flock >/dev/null; then LOCK=(flock /tmp/sluice-apt.lock); fi
  $SUDO "${LOCK[@]}" apt-get update -q >&2 || true
  DEBIAN_FRONTEND=noninteractive $SUDO "${LOCK[@]}" apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >&2
fi

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$SYSPY" -m venv --system-site-packages "$VENV"
fi
PY=$VENV/bin/python
mkdir -p "$STATUS"

# Keep Debian's numpy, torch and torchvision: pin them to the versions the
# system interpreter has, so a peer's requirement can never pull PyPI's.
CONSTRAINTS=$VENV/sluice-peers-constraints.txt
"$SYSPY" - >"$CONSTRAINTS" <<'EOF'
from importlib import metadata
for name in ("numpy", "torch", "torchvision", "Pillow"):
    try:
        print(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass
print("protobuf<5")
print("opencv-python==4.11.0.86")
EOF

pip_install() {  # loader, then pip arguments
  local loader=$1; shift
  local log=$STATUS/$loader.log
  say "pip install $* (log: $log)"
  if "$PY" -m pip install --disable-pip-version-check -c "$CONSTRAINTS" "$@" >"$log" 2>&1; then
    rm -f "$STATUS/$loader.txt"
    return 0
  fi
  local why
  why=$(grep -E 'error|Error|ERROR' "$log" | grep -v '^ *$' | tail -3 | tr '\n' ' ' | cut -c1-400)
  echo "pip install $* failed: ${why:-see $log}" >"$STATUS/$loader.txt"
  say "$loader: NOT installable: $(cat "$STATUS/$loader.txt")"
  return 1
}

pip_install tfdata "$TF" || true
pip_install dali "$DALI" || true
pip_install webdataset "$WDS" || true
pip_install streaming "$STREAMING" || true
# FFCV compiles a C++ extension against the Debian headers found by pkg-config.
if ! pkg-config --exists opencv4 libturbojpeg; then
  echo "pkg-config finds no opencv4/libturbojpeg (Debian: libopencv-dev, libturbojpeg0-dev)" \
    >"$STATUS/ffcv.txt"
  say "ffcv: NOT installable: $(cat "$STATUS/ffcv.txt")"
else
  pip_install ffcv "$FFCV" || true
fi

# Each module must import; a wheel that installs but cannot load is reported too.
check() {  # loader module
  local out
  if ! out=$("$PY" -c "import $2" 2>&1); then
    echo "installed, but 'import $2' fails: $(echo "$out" | tail -1 | cut -c1-300)" >"$STATUS/$1.txt"
    say "$1: $(cat "$STATUS/$1.txt")"
  fi
}
[ -f "$STATUS/tfdata.txt" ] || check tfdata tensorflow
[ -f "$STATUS/dali.txt" ] || check dali nvidia.dali
[ -f "$STATUS/webdataset.txt" ] || check webdataset webdataset
[ -f "$STATUS/streaming.txt" ] || check streaming streaming
[ -f "$STATUS/ffcv.txt" ] || check ffcv "ffcv.loader"

"$PY" - >&2 <<'EOF' || true
from importlib import metadata
for n in ("tensorflow-cpu", "nvidia-dali-cuda130", "webdataset", "ffcv", "mosaicml-streaming",
          "numpy", "torch", "torchvision"):
    try:
        print(f"peers: {n} {metadata.version(n)}")
    except metadata.PackageNotFoundError:
        print(f"peers: {n} not installed")
EOF
echo "$PY"
