"""What scripts/test_wheels.sh runs where sluice was installed from a wheel
(a chroot with no sluice dependency, another Python): each check prints
`ok   NAME` or `FAIL NAME: why`, and the caller counts them.

    PYTHON wheel_check.py WORK [--images DIR] [--torch] [--http] [--system-libs]
    PYTHON wheel_check.py --make-images DIR

WORK: an empty folder to write in. --images: an ImageFolder of JPEGs to use
(else 48 JPEGs are made here with Pillow). --torch: a batch through torch.
--http: the packed dataset read over http://127.0.0.1 from range_server.py
(beside this file), started here.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# What a self-contained binary may need: glibc's own libraries and the kernel's vDSO.
GLIBC = ("linux-vdso.so", "libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so",
         "ld-linux-x86-64.so", "ld-linux-aarch64.so")
results = []


def check(name):
    def wrap(fn):
        try:
            fn()
            results.append(True)
            print(f"ok   {name}", flush=True)
        except Exception as e:  # a failed check says why and the others still run
            results.append(False)
            msg = str(e).strip().replace("\n", "\n    ")
            print(f"FAIL {name}: {type(e).__name__}: {msg[:3000]}", flush=True)
        return fn
    return wrap


def run(*cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return r.stdout


def make_images(top):
    """48 photo-like JPEGs (gradients and noise) in 3 class folders, with Pillow."""
    from PIL import Image
    rng = np.random.default_rng(0)
    for c in range(3):
        os.makedirs(f"{top}/class{c}")
        for k in range(16):
            h, w = 120 + 7 * k, 160 + 5 * c
            y, x = np.mgrid[0:h, 0:w]
            px = np.stack([(x * 255 // w), (y * 255 // h), np.full_like(x, 80 * c)], -1)
            px = (px + rng.integers(0, 24, px.shape)).clip(0, 255).astype(np.uint8)
            Image.fromarray(px).save(f"{top}/class{c}/{k:02d}.jpg", quality=90)


def main():
    if sys.argv[1:2] == ["--make-images"]:  # where the wheel's Python has no Pillow
        make_images(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--images")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--http", action="store_true")
    ap.add_argument("--system-libs", action="store_true",
                    help="a source install (the sdist): it links the system's libraries")
    a = ap.parse_args()
    os.chdir(a.work)

    import sluice
    exe = shutil.which("sluice")
    print(f"     python {sys.version.split()[0]}, sluice {sluice.__version__} from "
          f"{os.path.dirname(sluice.__file__)}, command {exe}", flush=True)

    if not a.system_libs:
        @check("the extension and the command need only glibc (ldd)")
        def _():
            mods = [os.path.join(os.path.dirname(sluice.__file__), f)
                    for f in os.listdir(os.path.dirname(sluice.__file__)) if f.endswith(".so")]
            assert mods and exe, (mods, exe)
            for f in mods + [exe]:
                out = run("ldd", f)
                libs = [l.split()[0] for l in out.splitlines() if l.strip()]
                extra = [l for l in libs if not l.split("/")[-1].startswith(GLIBC)]
                assert not extra, f"{f} needs {extra}"

    images = a.images
    if not images:
        images = "images"

        @check("48 JPEGs made with Pillow (an ImageFolder of 3 classes)")
        def _():
            make_images(images)

    spec = {"source": {"path": "train.slr", "shuffle": True}, "seed": 0, "epochs": 1,
            "on_error": "fail", "ops": [
                {"op": "decode", "column": "image"},
                {"op": "random_resized_crop", "column": "image", "size": [96, 96],
                 "scale": [0.08, 1.0], "ratio": [0.75, 1.3333]},
                {"op": "flip", "column": "image", "p": 0.5},
                {"op": "normalize", "column": "image", "mean": [0.485, 0.456, 0.406],
                 "std": [0.229, 0.224, 0.225], "layout": "chw", "dtype": "float32"},
                {"op": "select", "columns": ["image", "label"]},
                {"op": "batch", "size": 16, "drop_remainder": False}]}

    @check("the command: pack, verify, run (same digest on 1 and 2 threads), bench")
    def _():
        rep = json.loads(run("sluice", "pack", images, "train.slr", "--json"))
        n = sum(len(fs) for _, _, fs in os.walk(images))
        assert rep["ok"] and rep["records"] == n and rep["kind"] == "imagefolder", rep
        run("sluice", "verify", "train.slr")
        with open("train.json", "w") as f:
            json.dump(spec, f)
        d1 = run("sluice", "run", "train.json", "--digest", "--threads", "1")
        d2 = run("sluice", "run", "train.json", "--digest", "--threads", "2")
        assert d1 == d2 and len(d1.splitlines()) >= 2, (d1, d2)
        b = json.loads(run("sluice", "bench", "train.json", "--seconds", "1", "--json"))
        assert b["samples_per_s"] > 0, b

    def chain(ds):
        return ds.decode("image").resize("image", [32, 32]).batch(8)

    @check("import sluice: packed records and the folder read in place give the same batches")
    def _():
        packed = list(chain(sluice.records("train.slr")))
        direct = list(chain(sluice.image_folder(images)))
        assert len(packed) == len(direct) >= 2
        for p, q in zip(packed, direct):
            assert np.array_equal(p["image"], q["image"]) and p["image"].shape[1:] == (32, 32, 3)
            assert p["label"].tolist() == q["label"].tolist()

    if a.torch:
        @check("a batch to torch (DLPack), equal to the numpy batch")
        def _():
            import torch
            t = next(iter(chain(sluice.records("train.slr")).torch()))
            n = next(iter(chain(sluice.records("train.slr"))))
            assert isinstance(t["image"], torch.Tensor) and tuple(t["image"].shape) == (8, 32, 32, 3)
            assert np.array_equal(t["image"].numpy(), n["image"])
            print(f"     torch {torch.__version__}", flush=True)

    if a.http:
        @check("a read over http://127.0.0.1 (range server started here) equals the local read")
        def _():
            os.makedirs("served")
            shutil.copy("train.slr", "served/train.slr")
            portfile = os.path.abspath("port")
            srv = subprocess.Popen([sys.executable, os.path.join(HERE, "range_server.py"),
                                    "served", portfile])
            try:
                for _ in range(100):
                    if os.path.exists(portfile):
                        break
                    time.sleep(0.05)
                url = f"http://127.0.0.1:{open(portfile).read()}/train.slr"
                env = dict(os.environ, SLUICE_CACHE_DIR=os.path.abspath("cache"))
                run("sluice", "verify", url, env=env)
                os.environ["SLUICE_CACHE_DIR"] = env["SLUICE_CACHE_DIR"]
                remote = list(chain(sluice.records(url)))
                local = list(chain(sluice.records("train.slr")))
                assert len(remote) == len(local) >= 2
                for p, q in zip(remote, local):
                    assert np.array_equal(p["image"], q["image"])
                    assert p["label"].tolist() == q["label"].tolist()
            finally:
                srv.kill()
                srv.wait()

    print(f"     {sum(results)} of {len(results)} checks passed", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
