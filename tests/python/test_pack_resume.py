"""sluice.pack interrupted by Ctrl-C: KeyboardInterrupt within a second (it was
raised only once the whole pack had finished), the complete records kept in
DST.partial, and resume=True ending with the clean pack's bytes.

The pack is stopped at a known record: its 30th file is a FIFO whose open
blocks until the signal breaks it off. The pack runs in a child process (the
signal goes to the whole process, and the test must not be the one
interrupted)."""
import filecmp
import os
import signal
import subprocess
import sys
import time

import pytest

import sluice

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(os.path.dirname(os.environ.get("SLUICE_BIN") or
                                   os.path.join(HERE, "..", "..", "build", "sluice")),
                   "sluice_gen_images")

CHILD = r"""
import sys, time
import sluice
print("started", flush=True)
t0 = time.monotonic()
try:
    rep = sluice.pack(sys.argv[1], sys.argv[2], jobs=1, shard_bytes=128 << 10,
                      resume=sys.argv[3] == "1")
    print("finished", rep["records"], flush=True)
except KeyboardInterrupt as e:
    print("KeyboardInterrupt", time.monotonic(), flush=True)
    for n in getattr(e, "__notes__", []):
        print("note", n, flush=True)
"""


def same_tree(a, b):
    cmp = filecmp.dircmp(a, b)
    assert not cmp.left_only and not cmp.right_only and not cmp.diff_files, (
        cmp.left_only, cmp.right_only, cmp.diff_files)
    for f in cmp.common_files:  # dircmp compares shallowly: the bytes too
        assert open(os.path.join(a, f), "rb").read() == open(os.path.join(b, f), "rb").read(), f


def pil_images(src, count, classes, seed):
    """The same kind of folder as sluice_gen_images makes, written with Pillow:
    where sluice is installed from a wheel there is no build tree and no
    sluice_gen_images beside the command."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    for i in range(count):
        d = src / f"class{i % classes}"
        d.mkdir(parents=True, exist_ok=True)
        h, w = (int(x) for x in rng.integers(24, 64, 2))
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
            d / f"{i:05d}.jpg", quality=90)


@pytest.fixture
def folder(tmp_path):
    src = tmp_path / "src"
    if os.access(GEN, os.X_OK):
        subprocess.run([GEN, str(src), "--count", "120", "--classes", "4", "--seed", "2"],
                       check=True, capture_output=True)
    else:
        pil_images(src, 120, 4, 2)
    files = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    return src, files[29]


def interrupted(tmp_path, src, fifo_rel, resume=False):
    """A child's pack of `src` stopped by SIGINT at the FIFO; (seconds from the
    signal to KeyboardInterrupt, the child's lines)."""
    fifo = src / fifo_rel
    keep = fifo.read_bytes()
    fifo.unlink()
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(tmp_path / "out.slr"),
                          "1" if resume else "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "started"
        for _ in range(500):  # bounded: 10 s for the pack to reach the FIFO
            try:
                if "wait_for_partner" in open(f"/proc/{p.pid}/wchan").read():
                    break
            except OSError:
                pass
            time.sleep(0.02)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        fifo.unlink()
        fifo.write_bytes(keep)
    lines = out.splitlines()
    ki = [l for l in lines if l.startswith("KeyboardInterrupt")]
    assert ki, (out, err)
    return float(ki[0].split()[1]) - sent, lines


def test_keyboard_interrupt_within_a_second_then_resume(tmp_path, folder):
    src, fifo = folder
    sluice.pack(str(src), str(tmp_path / "ref.slr"), jobs=1, shard_bytes=128 << 10)
    took, lines = interrupted(tmp_path, src, fifo)
    assert took < 1.0, took
    partial = tmp_path / "out.slr.partial"
    assert partial.is_dir() and not (tmp_path / "out.slr").exists()
    note = [l for l in lines if l.startswith("note ")]
    assert note and "continue with sluice.pack(..., resume=True)" in note[0], lines
    assert f"sluice recover {partial} --out OUT" in note[0]
    r = subprocess.run([os.path.join(os.path.dirname(GEN), "sluice"), "recover", str(partial)],
                       capture_output=True, text=True)
    assert "29 of 120 records (120 as planned by the interrupted pack) complete" in r.stdout, r
    # not without resume: the message says how to go on
    with pytest.raises(FileExistsError) as e:
        sluice.pack(str(src), str(tmp_path / "out.slr"), jobs=1, shard_bytes=128 << 10)
    assert "continue it with sluice.pack(..., resume=True)" in str(e.value)
    # the resume is interrupted too, at the same file (its record 29 again)
    took, _ = interrupted(tmp_path, src, fifo, resume=True)
    assert took < 1.0, took
    rep = sluice.pack(str(src), str(tmp_path / "out.slr"), jobs=2, shard_bytes=128 << 10,
                      resume=True)
    assert rep["records"] == 120
    same_tree(str(tmp_path / "ref.slr"), str(tmp_path / "out.slr"))
    assert not partial.exists()


def test_resume_with_other_options_is_refused(tmp_path, folder):
    src, fifo = folder
    interrupted(tmp_path, src, fifo)
    with pytest.raises(sluice.InvalidError, match="another --jpeg-restart"):
        sluice.pack(str(src), str(tmp_path / "out.slr"), shard_bytes=128 << 10,
                    jpeg_restart="auto", resume=True)
    with pytest.raises(sluice.InvalidError, match="skip_bad"):
        sluice.pack(str(src), str(tmp_path / "out.slr"), shard_bytes=128 << 10, skip_bad=True,
                    resume=True)
    rep = sluice.pack(str(src), str(tmp_path / "out.slr"), shard_bytes=128 << 10, resume=True)
    assert rep["records"] == 120
