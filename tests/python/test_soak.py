"""A short soak (bench/soak.py): 12 epochs of the JPEG training pipeline over
200 generated photos, from the CLI and from Python. After epoch 12 the
process's RSS must be within 2% of its RSS after epoch 3 (batch pools are
filled to their in-flight bound on first use, so they do not grow later), and
open fds and threads must be the same after every epoch. The 100-epoch run
(1% bound from epoch 5) is in docs/CAMPAIGNS.md."""
import os
import subprocess
import sys

from conftest import REPO


def test_soak_short(tmp_path):
    # SLUICE_BUILD: a build tree with the sluice command and sluice_gen_images
    # when SLUICE_BIN is an installed command (scripts/test_pythons.sh); the
    # Python soak runs on this interpreter
    sluice_bin = os.environ.get("SLUICE_BIN", os.path.join(REPO, "build", "sluice"))
    build = os.environ.get("SLUICE_BUILD") or os.path.dirname(os.path.abspath(sluice_bin))
    r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "soak.py"), "--build", build,
                        "--python", sys.executable,
                        "--mode", "both", "--epochs", "12", "--base-epoch", "3",
                        "--rss-tolerance", "2", "--images", "200", "--epoch-timeout", "60",
                        "--workdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert any(x.startswith("soak c: 12 epochs") for x in lines), r.stdout
    assert any(x.startswith("soak python: 12 epochs") for x in lines), r.stdout
