# Run by scripts/test_wheels.sh inside a fresh copy of a minimal Debian 12
# root (debootstrap --variant=minbase, python3, python3-venv), which holds
# the abi3 wheel in /sluice/dist, the tests in /sluice/tests and a
# wheelhouse (numpy, torch, torchvision, Pillow, pytest from PyPI) in
# /wheelhouse. Prints `ok   ...` / `FAIL ...` lines.
set -u
V=/opt/venv
export PATH=$V/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8

# What the root has and has not.
bad=$(dpkg-query -W -f='${Package}\n' |
      grep -E -- '-dev$|^(gcc|cpp|clang|tcc)(-[0-9]+)?$|^(libjpeg|libturbojpeg|libcurl|libzstd|libwebp|libspng|libcjson|libprotobuf-c|libxxhash|liblz4)' |
      tr '\n' ' ' || true)
tools=$(command -v cc gcc clang 2>/dev/null | tr '\n' ' ' || true)
if [ -z "$bad$tools" ]; then
  echo "ok   the root: Debian $(cat /etc/debian_version), glibc $(ldd --version | head -1 | awk '{print $NF}'), no compiler, no -dev package, none of sluice's libraries"
else
  echo "FAIL the root has $bad $tools"
fi

if python3 -m venv $V &&
   $V/bin/pip install -q --no-index --find-links /wheelhouse numpy torch torchvision pillow pytest &&
   $V/bin/pip install -q --no-index --find-links /wheelhouse /sluice/dist/sluice-*.whl; then
  echo "ok   pip install of the abi3 wheel (and numpy, torch, torchvision, Pillow, pytest from PyPI) in a venv"
else
  echo "FAIL pip install"
  exit 1
fi

mkdir -p /tmp/check
$V/bin/python /sluice/tests/install/wheel_check.py /tmp/check --torch --http

# The Python test files that need no build tree (the others load
# libsluice.so, the delay proxy or the stand-in CUDA libraries from one,
# start nginx, or run the repository's bench/ scripts).
cd /sluice
files=$(grep -L -E 'SLUICE_LIB|SLUICE_BUILD|SLUICE_DELAYPROXY|ops_ref_lib|nginx|httpfix|bench/' tests/python/test_*.py | tr '\n' ' ')
SLUICE_BIN=$V/bin/sluice $V/bin/python -m pytest -q -p no:cacheprovider -rfEs $files >/tmp/pytest.log 2>&1
rc=$?
grep -E '^(SKIPPED|FAILED|ERROR)' /tmp/pytest.log | head -20 | sed 's/^/    /'
summary=$(tail -1 /tmp/pytest.log)
if [ $rc -eq 0 ]; then
  echo "ok   the Python tests that need no build tree ($(echo $files | wc -w) files): $summary"
else
  echo "FAIL the Python tests that need no build tree: $summary"
fi
