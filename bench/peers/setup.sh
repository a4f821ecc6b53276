#!/usr/bin/env bash
# Make (or reuse) the virtual environment with the loaders sluice is measured
# against (bench/peers/run.py), from PyPI, pinned:
#   tensorflow-cpu (tf.data), nvidia-dali-cuda130 (run CPU-only), webdataset,
#   ffcv (built here against Debian's OpenCV and libjpeg-turbo), mosaicml-streaming.
#
#   bash bench/peers/setup.sh [LOADER ...]   # last line of output: the venv's python
#   PY=$(bash bench/peers/setup.sh | tail -1)
#
# LOADERs (tfdata dali webdataset ffcv streaming litdata spdl torchdata grain)
# install only those; none: all of them. LitData needs torch >= 2.4, so it
# gets a venv of its own (below) beside this one. The thread-based peers
# (spdl, torchdata, grain) go into the venvs of scripts/pythons.sh instead
# (below, "Thread peers").
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
#   mosaicml-streaming 0.13.0 (boto3 for s3://: the remote rows read moto through it).
#
# LitData (litdata 0.2.76, needs torch >= 2.4) goes into its own venv,
# ${SLUICE_PEERS_LITDATA_VENV:-$HOME/.cache/sluice-peers-litdata}, made from
# /usr/bin/python3 WITHOUT Debian's site packages (Debian's torch is 1.13). Its
# torch: when SLUICE_TORCH2_PYTHON names the python of a venv that has torch
# >= 2.4 and torchvision (scripts/pythons.sh's `gil` venv: Debian's Python 3.11
# + torch 2.x), that venv's site-packages is put on the path (a .pth file; the
# other venv is only read, never changed) and torch/torchvision pinned to its
# versions; otherwise torch 2.12.0 + torchvision 0.27.0 from PyPI (several GB).
# run.py finds it there (or --litdata-python).
#
# Thread peers: SPDL (spdl 0.8.0, Meta), torchdata.nodes (torchdata 0.11.0,
# PyTorch) and Grain (grain 0.2.18, Google) need torch 2.x, so they are
# installed into the two venvs of scripts/pythons.sh,
# ${SLUICE_PYTHONS:-$HOME/.cache/sluice-pythons}/{gil,ft} (made by running
# that script first): `gil` (Debian's 3.11) gets all three, `ft` (CPython
# 3.13t) each one that has a cp313t wheel or is pure Python (Grain as
# grain-free-threading, its free-threaded build). Wheels only; torch,
# torchvision, numpy and Pillow are held at the venv's versions. A peer that
# cannot be installed leaves its reason in VENV/sluice-peers-status/<loader>.txt
# of that venv, which run.py reports. Those lines print gil=PY and ft=PY.
set -euo pipefail

VENV=${SLUICE_PEERS_VENV:-$HOME/.cache/sluice-peers}
SYSPY=/usr/bin/python3
STATUS=$VENV/sluice-peers-status

TF=tensorflow-cpu==2.17.1
DALI=nvidia-dali-cuda130==2.4.0
WDS=webdataset==1.0.2
FFCV=ffcv==1.0.2
STREAMING=mosaicml-streaming==0.13.0
LITDATA=litdata==0.2.76
TORCH2=(torch==2.12.0 torchvision==0.27.0)
LVENV=${SLUICE_PEERS_LITDATA_VENV:-$HOME/.cache/sluice-peers-litdata}
SPDL=spdl==0.8.0
TORCHDATA=torchdata==0.11.0
GRAIN=grain==0.2.18
GRAIN_FT=grain-free-threading==0.2.18
PYTHONS=${SLUICE_PYTHONS:-$HOME/.cache/sluice-pythons}
THREAD_PEERS=(spdl torchdata grain)
ALL=(tfdata dali webdataset streaming ffcv litdata "${THREAD_PEERS[@]}")
WANT=("$@")
[ ${#WANT[@]} -gt 0 ] || WANT=("${ALL[@]}")
for w in "${WANT[@]}"; do
  case " ${ALL[*]} " in *" $w "*) ;; *) echo "peers: unknown loader '$w' (known: ${ALL[*]})" >&2; exit 2 ;; esac
done
want() { case " ${WANT[*]} " in *" $1 "*) return 0 ;; esac; return 1; }
only_threads=1
for w in "${WANT[@]}"; do
  case " ${THREAD_PEERS[*]} " in *" $w "*) ;; *) only_threads=0 ;; esac
done

say() { echo "peers: $*" >&2; }

# The versions of numpy, torch, torchvision and Pillow that interpreter $1
# has, as pip constraints: a peer's requirement can never replace them.
held_versions() {
  "$1" - <<'EOF'
from importlib import metadata
for name in ("numpy", "torch", "torchvision", "Pillow"):
    try:
        print(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass
EOF
}

# Thread peers, into the venvs of scripts/pythons.sh (see the top).
thread_peers() {  # venv name: gil or ft
  local v=$PYTHONS/$1
  local py=$v/bin/python st=$v/sluice-peers-status cons=$v/sluice-peers-constraints.txt
  if [ ! -x "$py" ]; then
    say "no $py: run scripts/pythons.sh first (the thread peers need its torch 2.x venvs)"
    return 1
  fi
  mkdir -p "$st"
  held_versions "$py" >"$cons"
  local loader pin mod out
  for loader in "${THREAD_PEERS[@]}"; do
    want "$loader" || continue
    case $loader in
      spdl) pin=$SPDL mod=spdl.pipeline ;;
      torchdata) pin=$TORCHDATA mod=torchdata.nodes ;;
      grain) pin=$GRAIN mod=grain; if [ "$1" = ft ]; then pin=$GRAIN_FT; fi ;;
    esac
    say "pip install $pin into $v (log: $st/$loader.log)"
    if ! "$py" -m pip install --disable-pip-version-check --only-binary :all: -c "$cons" "$pin" \
         >"$st/$loader.log" 2>&1; then
      echo "pip install $pin failed in $v: $(grep -E 'error|Error|ERROR' "$st/$loader.log" | tail -2 | tr '\n' ' ' | cut -c1-300)" \
        >"$st/$loader.txt"
      say "$loader ($1): NOT installable: $(cat "$st/$loader.txt")"
      continue
    fi
    if ! out=$("$py" -c "import $mod" 2>&1); then
      echo "installed, but 'import $mod' fails in $v: $(echo "$out" | tail -1 | cut -c1-300)" >"$st/$loader.txt"
      say "$loader ($1): $(cat "$st/$loader.txt")"
      continue
    fi
    rm -f "$st/$loader.txt"
    say "$loader ($1): ${pin%%==*} $("$py" -c "from importlib import metadata; print(metadata.version('${pin%%==*}'))")"
  done
  echo "$1=$py"
}
if want spdl || want torchdata || want grain; then
  thread_peers gil || true
  thread_peers ft || true
fi
if [ "$only_threads" = 1 ]; then exit 0; fi

# Debian packages: venv/headers for the interpreter, OpenCV and libjpeg-turbo
# headers for FFCV's C++ extension, pkg-config that its setup.py calls.
APT=(python3-venv python3-dev)
if want ffcv; then APT+=(pkg-config g++ libopencv-dev libturbojpeg0-dev); fi
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
{ held_versions "$SYSPY"; echo "protobuf<5"; echo "opencv-python==4.11.0.86"; } >"$CONSTRAINTS"

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

want tfdata && { pip_install tfdata "$TF" || true; }
want dali && { pip_install dali "$DALI" || true; }
want webdataset && { pip_install webdataset "$WDS" || true; }
want streaming && { pip_install streaming "$STREAMING" || true; }
# FFCV compiles a C++ extension against the Debian headers found by pkg-config.
if ! want ffcv; then
  :
elif ! pkg-config --exists opencv4 libturbojpeg; then
  echo "pkg-config finds no opencv4/libturbojpeg (Debian: libopencv-dev, libturbojpeg0-dev)" \
    >"$STATUS/ffcv.txt"
  say "ffcv: NOT installable: $(cat "$STATUS/ffcv.txt")"
else
  pip_install ffcv "$FFCV" || true
fi

# LitData: its own venv (torch >= 2.4), its status file in this venv's status
# directory like the others', so run.py reports why it cannot run.
litdata_venv() {
  local lpy=$LVENV/bin/python log=$STATUS/litdata.log
  if [ ! -x "$lpy" ]; then
    say "creating $LVENV (no system site packages)"
    "$SYSPY" -m venv "$LVENV"
  fi
  "$lpy" -m pip install -q --disable-pip-version-check --upgrade "pip>=24" >"$log" 2>&1 || true
  local cons=$LVENV/sluice-peers-constraints.txt
  local site
  site=$("$lpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -f "$site/sluice-torch2.pth"
  : >"$cons"
  if [ -n "${SLUICE_TORCH2_PYTHON:-}" ]; then
    local other
    if ! other=$("$SLUICE_TORCH2_PYTHON" -c '
import sysconfig, sys, torch, torchvision
v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
assert v >= (2, 4), torch.__version__
assert sys.version_info[:2] == (3, 11), sys.version
print(sysconfig.get_paths()["purelib"])
from importlib import metadata  # the installed versions (torch.__version__ may add +cu130)
print("torch==" + metadata.version("torch")); print("torchvision==" + metadata.version("torchvision"))' 2>>"$log"); then
      echo "SLUICE_TORCH2_PYTHON=$SLUICE_TORCH2_PYTHON has no torch >= 2.4 + torchvision on Python 3.11 (see $log)" \
        >"$STATUS/litdata.txt"
      return 1
    fi
    echo "$other" | head -1 >"$site/sluice-torch2.pth"
    echo "$other" | tail -n +2 >"$cons"
    say "litdata: torch from $SLUICE_TORCH2_PYTHON ($(tail -n +2 <<<"$other" | tr '\n' ' '))"
  else
    printf '%s\n' "${TORCH2[@]}" >"$cons"
  fi
  say "pip install $LITDATA into $LVENV (log: $log)"
  if ! "$lpy" -m pip install --disable-pip-version-check -c "$cons" "$LITDATA" \
       $([ -n "${SLUICE_TORCH2_PYTHON:-}" ] || echo "${TORCH2[*]}") pillow >>"$log" 2>&1; then
    echo "pip install $LITDATA failed: $(grep -E 'error|Error|ERROR' "$log" | tail -3 | tr '\n' ' ' | cut -c1-400)" \
      >"$STATUS/litdata.txt"
    return 1
  fi
  local out
  if ! out=$("$lpy" -c 'import litdata, torch, torchvision, PIL' 2>&1); then
    echo "installed, but 'import litdata' fails in $LVENV: $(echo "$out" | tail -1 | cut -c1-300)" \
      >"$STATUS/litdata.txt"
    return 1
  fi
  rm -f "$STATUS/litdata.txt"
  say "litdata: $("$lpy" -c 'from importlib import metadata as m; print(m.version("litdata"), "torch", m.version("torch"))')"
  say "litdata venv: $lpy"
}
if want litdata && ! litdata_venv; then
  say "litdata: NOT installable: $(cat "$STATUS/litdata.txt")"
fi

# Each module must import; a wheel that installs but cannot load is reported too.
check() {  # loader module
  local out
  if ! out=$("$PY" -c "import $2" 2>&1); then
    echo "installed, but 'import $2' fails: $(echo "$out" | tail -1 | cut -c1-300)" >"$STATUS/$1.txt"
    say "$1: $(cat "$STATUS/$1.txt")"
  fi
}
want tfdata && { [ -f "$STATUS/tfdata.txt" ] || check tfdata tensorflow; }
want dali && { [ -f "$STATUS/dali.txt" ] || check dali nvidia.dali; }
want webdataset && { [ -f "$STATUS/webdataset.txt" ] || check webdataset webdataset; }
want streaming && { [ -f "$STATUS/streaming.txt" ] || check streaming streaming; }
want ffcv && { [ -f "$STATUS/ffcv.txt" ] || check ffcv "ffcv.loader"; }

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
