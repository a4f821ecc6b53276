# Run by scripts/test_wheels.sh inside a fresh copy of a minimal Debian 11
# root (bullseye, glibc 2.31), which holds the wheel's `sluice` command in
# /usr/local/bin, CPython 3.13 built for this root in /opt/python3.13, the
# abi3 wheel in /sluice/dist, JPEGs in /sluice/images and numpy in
# /wheelhouse. Prints `ok   ...` / `FAIL ...` lines.
set -u
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8

tools=$(command -v cc gcc 2>/dev/null | tr '\n' ' ' || true)
libs=$(dpkg-query -W -f='${Package}\n' |
       grep -E -- '-dev$|^(libjpeg|libturbojpeg|libcurl|libwebp|libspng|libcjson|libprotobuf-c)' |
       tr '\n' ' ' || true)
if [ -z "$tools$libs" ]; then
  echo "ok   the root: Debian $(cat /etc/debian_version), glibc $(ldd --version | head -1 | awk '{print $NF}'), no compiler, none of sluice's libraries"
else
  echo "FAIL the root has $tools $libs"
fi

# The wheel's command: the demo pipeline (tests/install/train_spec.json at a
# smaller size and batch).
mkdir -p /tmp/cli && cd /tmp/cli
sed 's|"size": \[224, 224\]|"size": [96, 96]|; s|"size": 64|"size": 16|' \
  /sluice/tests/install/train_spec.json > train.json
if sluice pack /sluice/images train.slr >pack.log 2>&1 && sluice verify train.slr >verify.log 2>&1 &&
   sluice run train.json --digest --threads 1 >d1 2>run.log && sluice run train.json --digest --threads 2 >d2 2>>run.log &&
   cmp -s d1 d2 && [ "$(wc -l <d1)" -ge 2 ] && sluice bench train.json --seconds 1 >bench.log 2>&1; then
  echo "ok   the wheel's sluice command: pack, verify, run (the same digest on 1 and 2 threads), bench ($(grep -m1 -o '[0-9.]* samples/s' bench.log))"
else
  echo "FAIL the wheel's sluice command"
  tail -5 ./*.log
fi

# import sluice under the CPython 3.13 built for this root.
if /opt/python3.13/bin/python3.13 -m venv /opt/venv &&
   /opt/venv/bin/pip install -q --no-index --find-links /wheelhouse numpy /sluice/dist/sluice-*.whl; then
  echo "ok   pip install of the abi3 wheel under CPython $(/opt/venv/bin/python -c 'import platform; print(platform.python_version())') built in bullseye"
else
  echo "FAIL pip install under the bullseye CPython"
  exit 1
fi
mkdir -p /tmp/check
PATH=/opt/venv/bin:$PATH /opt/venv/bin/python /sluice/tests/install/wheel_check.py /tmp/check --images /sluice/images
