#!/usr/bin/env bash
# Prove the wheels of scripts/wheel.sh (in dist/) work where no sluice
# dependency exists:
#
#   1. auditwheel show: each wheel's platform tag is manylinux_2_28 and it
#      needs no library outside the policy's own; the sdist installs with pip
#      on this Debian after scripts/deps.sh;
#   2. the abi3 wheel under every other CPython >= 3.10 found on this machine
#      (python3.10 ... python3.15 on PATH or under $PYENV_ROOT/versions):
#      a venv, numpy from PyPI, the wheel, tests/install/wheel_check.py;
#   3. the free-threaded venv of scripts/pythons.sh: the cp313t wheel in a
#      venv of CPython 3.13t beside it (the ft venv's packages reached through
#      a .pth file), the GIL still off after `import sluice`, and
#      scripts/test_pythons.sh's suite run against the installed wheel;
#   4. a minimal Debian 12 chroot (debootstrap --variant=minbase, plus
#      python3 and python3-venv only; zstd, xxhash and lz4, which apt itself
#      pulls in, purged before the checks): no compiler, no -dev package, no
#      libjpeg, libcurl, libzstd, libwebp, libspng, cJSON or protobuf-c; a
#      venv with numpy, torch 2.x, Pillow and pytest from PyPI, the abi3
#      wheel; wheel_check.py (the command's demo pipeline: pack, verify, run,
#      bench; import sluice; a batch to torch; a read over http://127.0.0.1
#      from a server started in the chroot) and the Python test files that
#      need no build tree;
#   5. a Debian 11 chroot (bullseye, glibc 2.31): CPython 3.13 built from the
#      source scripts/pythons.sh fetches (Debian 13's python3.13), in a
#      bullseye root with a compiler, then copied into a minimal bullseye
#      root with no compiler; there the wheel's `sluice` command runs the
#      same demo pipeline and `import sluice` works.
#
#   bash scripts/test_wheels.sh        (as root: debootstrap and chroot)
#
# Not part of scripts/test.sh: it downloads two Debian root file systems and
# several GB of wheels (torch), and builds CPython once. Roots, wheelhouses
# and the bullseye CPython are kept under ${SLUICE_WHEEL_CACHE:-~/.cache/sluice-wheel};
# each run works on fresh copies of the roots. Last line:
# `wheels: N passed, M failed`.
set -euo pipefail
. "$(dirname "$0")/sigint.bash"   # the Ctrl-C tests need SIGINT at its default
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/debian.sh"
W=${SLUICE_WHEEL_CACHE:-$HOME/.cache/sluice-wheel}
DIST=${SLUICE_WHEEL_DIST:-$ROOT/dist}
ARCH=$(uname -m)
JOBS=$(nproc)
log() { echo "test_wheels: $*" >&2; }
[ "$(id -u)" -eq 0 ] || { log "run as root (debootstrap, chroot, mount)"; exit 2; }

ABI3=$(ls "$DIST"/sluice-*-cp310-abi3-manylinux_2_28_"$ARCH".whl 2>/dev/null | tail -1 || true)
FTW=$(ls "$DIST"/sluice-*-cp313-cp313t-manylinux_2_28_"$ARCH".whl 2>/dev/null | tail -1 || true)
[ -n "$ABI3" ] && [ -n "$FTW" ] || { log "no wheels in $DIST: run scripts/wheel.sh first"; exit 2; }
TOOLS=$W/tools
[ -x "$TOOLS/bin/auditwheel" ] || { log "no $TOOLS: run scripts/wheel.sh first"; exit 2; }

PASS=0 FAILED=0
# SLUICE_TEST_WHEELS_STEPS: the steps to run (default all of them, in order):
# audit pythons sdist ft bookworm bullseye
STEPS=" ${SLUICE_TEST_WHEELS_STEPS:-audit pythons sdist ft bookworm bullseye} "
step() { [[ "$STEPS" == *" $1 "* ]]; }
WORK=$(mktemp -d /var/tmp/sluice-test-wheels.XXXXXX)
cleanup() {
  # Every mount under $WORK, deepest first (what run_root bound in: /proc,
  # /dev, wheelhouses), read from the kernel's table rather than kept in a
  # list; then the folder, never leaving its own file system: a bind of /dev
  # still in place must not be emptied through the root.
  local m
  for m in $(awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" || true
  done
  if awk -v w="$WORK/" 'index($2, w) == 1 {found = 1} END {exit !found}' /proc/self/mounts; then
    log "mounts are left under $WORK: not removing it"
    return
  fi
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
ok() { echo "ok   $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL $*"; FAILED=$((FAILED + 1)); }
# Count the ok/FAIL lines of a check program (wheel_check.py), show them.
tally() {  # name logfile rc
  local n f
  n=$(grep -c '^ok   ' "$2" || true)
  f=$(grep -c '^FAIL ' "$2" || true)
  sed 's/^/    /' "$2"
  if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "    (exit $3)"; fi
  PASS=$((PASS + n)) FAILED=$((FAILED + f))
  echo "-- $1: $n passed, $f failed"
}
# The pins of scripts/pythons.sh (torch, numpy, pytest, ...), one place for them.
eval "$(sed -n '/^PINS=(/,/)/p' "$ROOT/scripts/pythons.sh")"
eval "$(grep '^PILLOW_GIL=' "$ROOT/scripts/pythons.sh")"
pin() { printf '%s\n' "${PINS[@]}" | grep "^$1=="; }

# ---- 1. auditwheel show --------------------------------------------------------
if step audit; then
for whl in "$ABI3" "$FTW"; do
  # the lowest tag the binaries allow must be 2.28 or lower, and no library
  # may be needed beyond the policy's own (glibc's)
  out=$("$TOOLS/bin/auditwheel" show "$whl" 2>&1 | tr '\n' ' ' | tr -s ' ')
  floor=$(sed -n 's/.*consistent with the following platform tag: "manylinux_2_\([0-9]*\)_.*/\1/p' <<<"$out")
  if [ -n "$floor" ] && [ "$floor" -le 28 ] && ! grep -q "external shared libraries are required" <<<"$out"; then
    ok "auditwheel show $(basename "$whl"): consistent with manylinux_2_${floor}_$ARCH (tagged 2_28), no library beyond glibc's ($(du -h "$whl" | cut -f1))"
  else
    bad "auditwheel show $(basename "$whl"): $out"
  fi
done

# The extension exports its init function only (python/_sluice.map): the
# libraries linked into it cannot bind to others in the process.
for whl in "$ABI3" "$FTW"; do
  mkdir -p "$WORK/unzipped" && rm -rf "$WORK/unzipped"/*
  /usr/bin/python3 -m zipfile -e "$whl" "$WORK/unzipped"
  syms=$(nm -D --defined-only "$WORK"/unzipped/sluice/_sluice*.so | awk '{print $3}' | tr '\n' ' ')
  if [ "$syms" = "PyInit__sluice " ]; then
    ok "$(basename "$whl"): the extension exports PyInit__sluice only"
  else
    bad "$(basename "$whl"): the extension exports $(wc -w <<<"$syms") symbols: ${syms:0:200}"
  fi
done

fi

# JPEGs made once with Debian's Pillow, for the Pythons and roots without it.
/usr/bin/python3 "$ROOT/tests/install/wheel_check.py" --make-images "$WORK/images"

# ---- 2. the abi3 wheel under the other CPythons here -----------------------------
if step pythons; then
PYS=()
for v in 10 11 12 13 14 15; do
  for py in "$(command -v python3.$v || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.$v.*/bin/python3.$v; do
    [ -x "$py" ] || continue
    "$py" -c 'import sys, sysconfig; sys.exit(bool(sysconfig.get_config_var("Py_GIL_DISABLED")))' 2>/dev/null || continue
    PYS+=("$py")
    break
  done
done
for py in "${PYS[@]}"; do
  v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  venv=$WORK/py$v
  if "$py" -m venv "$venv" >"$WORK/py$v.log" 2>&1 &&
     "$venv/bin/python" -m pip install -q --only-binary :all: numpy "$ABI3" >>"$WORK/py$v.log" 2>&1; then
    mkdir -p "$WORK/py$v-run"
    set +e
    PATH="$venv/bin:$PATH" "$venv/bin/python" "$ROOT/tests/install/wheel_check.py" "$WORK/py$v-run" \
      --images "$WORK/images" >"$WORK/py$v.out" 2>&1 || true
    rc=0; grep -q '^FAIL ' "$WORK/py$v.out" && rc=1
    set -e
    tally "abi3 wheel under CPython $v ($py)" "$WORK/py$v.out" $rc
  else
    bad "abi3 wheel under CPython $v: install failed: $(tail -3 "$WORK/py$v.log")"
  fi
done

fi

# ---- the sdist: pip install on this Debian (the libraries of scripts/deps.sh) ----------
if step sdist; then
SDIST=$(ls "$DIST"/sluice-*.tar.gz 2>/dev/null | tail -1 || true)
if [ -z "$SDIST" ]; then
  bad "no sdist in $DIST"
else
  bash "$ROOT/scripts/deps.sh" >/dev/null
  /usr/bin/python3 -m venv --system-site-packages "$WORK/sdist-venv"
  if (cd "$WORK" && CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$WORK/sdist-venv/bin/pip" install -q "$SDIST") >"$WORK/sdist.log" 2>&1 &&
     mkdir -p "$WORK/sdist-run" &&
     PATH="$WORK/sdist-venv/bin:$PATH" "$WORK/sdist-venv/bin/python" "$ROOT/tests/install/wheel_check.py" \
       "$WORK/sdist-run" --images "$WORK/images" --system-libs >>"$WORK/sdist.log" 2>&1; then
    ok "the sdist: pip install $(basename "$SDIST") on Debian $(cat /etc/debian_version) after scripts/deps.sh, then wheel_check.py ($(grep -c '^ok ' "$WORK/sdist.log") checks)"
  else
    bad "the sdist: $(grep -E '^FAIL|rror' "$WORK/sdist.log" | head -5)"
  fi
fi

fi

# ---- 3. the free-threaded venv -------------------------------------------------------
if step ft; then
P=${SLUICE_PYTHONS:-$HOME/.cache/sluice-pythons}
if [ ! -x "$P/ft/bin/python" ]; then
  log "no free-threaded venv in $P: running scripts/pythons.sh"
  bash "$ROOT/scripts/pythons.sh" >/dev/null
fi
FTV=$WORK/ft-wheel
"$P/cpython-3.13.5t/bin/python3.13t" -m venv --without-pip "$FTV"
site=$("$P/ft/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mysite=$("$FTV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The wheel first (before the .pth file: pip would find the ft venv's own
# sluice of the same version installed and skip the wheel), then the ft
# venv's torch, numpy, pytest, ... after this venv's own site-packages:
# `import sluice` finds the wheel's.
if "$P/ft/bin/python" -m pip --python "$FTV/bin/python" install -q --no-deps "$FTW" >"$WORK/ft.log" 2>&1 &&
   echo "$site" > "$mysite/zz-ft-venv.pth"; then
  if where=$(env -u PYTHONPATH -u PYTHON_GIL "$FTV/bin/python" -c 'import sys, sluice; assert not sys._is_gil_enabled(), "the GIL is on"; print(sluice.__file__)' 2>&1) &&
     case "$where" in "$mysite"/sluice/*) true ;; *) false ;; esac; then
    ok "cp313t wheel: installed in a 3.13t venv; the GIL stays off after import sluice ($where)"
  else
    bad "cp313t wheel: import sluice: $where"
  fi
  set +e
  SLUICE_TEST_PYTHONS="ft=$FTV/bin/python" bash "$ROOT/scripts/test_pythons.sh" >"$WORK/ft-suite.log" 2>&1
  rc=$?
  set -e
  grep -E '^(FAILED|ERROR|SKIPPED)' "$WORK/ft-suite.log" | head -20 | sed 's/^/    /'
  cp "$WORK/ft-suite.log" "$W/test_wheels-ft-suite.log"   # kept after the run
  line=$(grep '^test_pythons: ft' "$WORK/ft-suite.log" | tail -1 || true)
  if [ $rc -eq 0 ] && grep -q ': ok ' <<<"$line"; then
    ok "cp313t wheel: scripts/test_pythons.sh's suite against the installed wheel (${line##*: ok })"
  else
    bad "cp313t wheel: scripts/test_pythons.sh's suite (exit $rc): ${line:-no summary}"
  fi
else
  bad "cp313t wheel: pip install failed: $(tail -3 "$WORK/ft.log")"
fi

fi

# ---- the roots ------------------------------------------------------------------------
deb_need debootstrap
MIRROR=$(deb_mirror)
ROOTS=$W/roots
mkdir -p "$ROOTS"
# A root made once by debootstrap and kept; each run copies it.
base_root() {  # name suite include
  local dir=$ROOTS/$1
  if [ ! -f "$dir/.complete" ]; then
    log "debootstrap $2 ($1) from $MIRROR"
    rm -rf "$dir"
    debootstrap --variant=minbase ${3:+--include=$3} "$2" "$dir" "$MIRROR" >"$ROOTS/$1.log" 2>&1 ||
      { tail -20 "$ROOTS/$1.log" >&2; log "debootstrap $2 failed (log: $ROOTS/$1.log)"; exit 1; }
    touch "$dir/.complete"
  fi
  echo "$dir"
}
# A fresh copy of a root, with /proc, /dev, /dev/shm and the host folders
# given (HOST:IN-ROOT) bound in; its path in R. (Not a $(...) subshell: the
# mounts are undone by cleanup, which reads them from /proc/self/mounts.)
run_root() {  # base name [HOST:IN-ROOT ...]
  local base=$1 m src dst
  R=$WORK/$2
  shift 2
  cp -a "$base" "$R"
  for m in proc dev dev/shm "$@"; do
    src=/$m dst=$R/$m
    case "$m" in *:*) src=${m%%:*} dst=$R/${m#*:} ;; esac
    mkdir -p "$dst"
    mount --bind "$src" "$dst"
  done
}
# The wheels a root installs from (the roots have no network of their own).
wheelhouse() {  # dir python-version requirement...
  local dir=$1 v=$2 target=() i
  shift 2
  mkdir -p "$dir"
  # for another Python than the tools venv's: its version, and every
  # manylinux tag a glibc 2.28 system takes (pip lists them itself only for
  # its own interpreter)
  if [ "$v" != "$("$TOOLS/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" ]; then
    target=(--python-version "$v" --platform "manylinux2014_$ARCH")
    for ((i = 28; i >= 17; i--)); do target+=(--platform "manylinux_2_${i}_$ARCH"); done
  fi
  "$TOOLS/bin/python" -m pip download -q --only-binary :all: "${target[@]}" \
    -d "$dir" "$@" >"$WORK/wheelhouse-$v.log" 2>&1 ||
    { tail -5 "$WORK/wheelhouse-$v.log" >&2; log "pip download for Python $v failed"; exit 1; }
}
# Run the script in a root; count its ok/FAIL lines.
in_root() {  # root name script
  set +e
  chroot "$1" /bin/bash "$3" >"$WORK/$2.out" 2>&1
  local rc=$?
  set -e
  tally "$2" "$WORK/$2.out" $rc
}

# ---- 4. a minimal Debian 12 root ----------------------------------------------------
if step bookworm; then
B12=$(base_root bookworm-minbase bookworm python3,python3-venv)
wheelhouse "$W/wheelhouse-cp311" 3.11 "$(pin torch)" "$(pin torchvision)" "$(pin numpy)" \
  "$(pin pytest)" "$PILLOW_GIL"
run_root "$B12" bookworm "$W/wheelhouse-cp311:wheelhouse"
mkdir -p "$R/sluice/dist" "$R/sluice/tests"
cp "$ABI3" "$R/sluice/dist/"
cp -r "$ROOT/tests/install" "$ROOT/tests/python" "$ROOT/tests/remote" "$R/sluice/tests/"
# zstd, xxhash and lz4 come with apt (libapt-pkg needs them): gone before
# sluice runs, so nothing of the root could stand in for the wheel's own.
chroot "$R" dpkg --purge --force-depends libzstd1 libxxhash0 liblz4-1 >"$WORK/purge.log" 2>&1 ||
  { sed 's/^/    /' "$WORK/purge.log"; bad "purging libzstd1, libxxhash0, liblz4-1 from the Debian 12 root"; }
cp "$ROOT/tests/install/in_root_bookworm.sh" "$R/sluice/in-root.sh"
in_root "$R" "a minimal Debian 12 root (debootstrap minbase, python3, python3-venv)" /sluice/in-root.sh

fi

# ---- 5. Debian 11 (bullseye, glibc 2.31) -----------------------------------------------
if step bullseye; then
B11=$(base_root bullseye-minbase bullseye "")
PYV=3.13.5
CPYTAR=$W/bullseye-cpython-$PYV.tar
if [ ! -s "$CPYTAR" ]; then
  # CPython from the source package scripts/pythons.sh fetches, built in a
  # bullseye root with a compiler (a root of its own: the test root has none).
  BB=$(base_root bullseye-build bullseye build-essential,zlib1g-dev,xz-utils)
  SRC=$W/cpython-src
  if ! ls "$SRC/python3.13_$PYV.orig.tar.xz" >/dev/null 2>&1; then
    rm -rf "$SRC" && mkdir -p "$SRC"
    deb_source "$SRC" trixie python3.13
  fi
  run_root "$BB" bullseye-build "$SRC:src"
  RB=$R
  log "building CPython $PYV in the bullseye build root (a few minutes)"
  chroot "$RB" /bin/bash -c "set -e; mkdir -p /b && cd /b && tar -xJf /src/python3.13_$PYV.orig.tar.xz &&
    cd Python-$PYV && ./configure --prefix=/opt/python3.13 --disable-test-modules >/b/log 2>&1 &&
    make -j$JOBS >>/b/log 2>&1 && make install >>/b/log 2>&1" ||
    { tail -30 "$RB/b/log" >&2; log "the CPython build in the bullseye root failed"; exit 1; }
  tar -C "$RB" -cf "$CPYTAR.tmp" opt/python3.13 && mv "$CPYTAR.tmp" "$CPYTAR"
fi
wheelhouse "$W/wheelhouse-cp313" 3.13 "$(pin numpy)"
run_root "$B11" bullseye "$W/wheelhouse-cp313:wheelhouse"
tar -C "$R" -xf "$CPYTAR"
mkdir -p "$R/sluice/dist" "$R/sluice/tests"
cp "$ABI3" "$R/sluice/dist/"
cp -r "$ROOT/tests/install" "$R/sluice/tests/"
cp -r "$WORK/images" "$R/sluice/images"
# The command alone, as a user of a Python older than 3.10 takes it from the wheel.
/usr/bin/python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [m for m in z.namelist() if m.endswith(".data/scripts/sluice")][0]; open(sys.argv[2], "wb").write(z.read(n))' \
  "$ABI3" "$R/usr/local/bin/sluice"
chmod +x "$R/usr/local/bin/sluice"
cp "$ROOT/tests/install/in_root_bullseye.sh" "$R/sluice/in-root.sh"
in_root "$R" "a Debian 11 root (bullseye, glibc 2.31)" /sluice/in-root.sh

fi

echo "wheels: $PASS passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
