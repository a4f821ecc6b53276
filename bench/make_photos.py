#!/usr/bin/python3
"""Make the benchmarks' photo datasets, the same bytes on every run, from real photographs.

    /usr/bin/python3 bench/make_photos.py [--root data/photos] [--kinds imagenet-like,seedlike]
                                          [--count N] [--large] [--grain] [--jobs J] [--force]

Kinds (each ROOT/KIND/cNN/NNNNN.jpg, 10 class folders, baseline JPEG, quality 90, 4:2:0):
  imagenet-like  4000 photos of ImageNet's sizes: shorter side 280-480 px, aspect 4:3 to 16:9
                 either way round (about 0.19 megapixels and 36 KB on average)
  seedlike       2000 photos of exactly 640x408
  large          500 photos of 1-4 megapixels (with --large, or named in --kinds)
--count N makes N photos of each kind instead. --grain adds film grain before encoding, which
brings the entropy near ImageNet's (about 3.8 bits a pixel instead of about 1.2): decode costs
then follow ImageNet's; the kind's folder gets a "-grain" suffix.

Source: the photographs of Debian's mate-backgrounds package (/usr/share/backgrounds/mate/nature,
installed by scripts/deps.sh). Each output photo is its own crop of one of them: the photo, a box
and a flip are drawn from a generator seeded by (kind, index), the box is cut, scaled with
Lanczos and encoded by Pillow. So the output depends only on the arguments and the versions of
Pillow and libjpeg; KIND/photos.json lists the arguments and a SHA-256 over every file, and a
kind whose manifest matches the arguments is kept as it is. A kind is written to a temporary
folder and renamed into place when complete.
Needs python3-pil and python3-numpy (both in scripts/deps.sh).
"""
import argparse
import glob
import hashlib
import json
import os
import random
import shutil
import sys
import time
from multiprocessing import Pool

from PIL import Image

SOURCES = "/usr/share/backgrounds/mate/nature"
CLASSES = 10
KINDS = {"imagenet-like": 4000, "seedlike": 2000, "large": 500}
VERSION = 1  # bump when the drawing below changes


def out_size(kind, rng):
    """(width, height) of one photo of `kind`."""
    if kind == "seedlike":
        return 640, 408
    if kind == "large":
        mp = rng.uniform(1.0, 4.0) * 1e6
        aspect = rng.choice([4 / 3, 3 / 2, 16 / 9])
        w = int(round((mp * aspect) ** 0.5))
        h = int(round(w / aspect))
        return (w, h) if rng.random() < 0.8 else (h, w)
    short = rng.randint(280, 480)
    aspect = rng.choice([4 / 3, 4 / 3, 4 / 3, 3 / 2, 16 / 9, 1.0])
    long_ = int(round(short * aspect))
    return (long_, short) if rng.random() < 0.75 else (short, long_)


_photos = {}


def source(path):
    """A source photo, decoded once per worker process."""
    im = _photos.get(path)
    if im is None:
        im = _photos[path] = Image.open(path).convert("RGB")
    return im


def make_one(job):
    kind, i, paths, grain, dst = job
    rng = random.Random(f"sluice-photos/{VERSION}/{kind}/{i}")
    w, h = out_size(kind, rng)
    src = source(paths[rng.randrange(len(paths))])
    sw, sh = src.size
    # the largest box of the output's aspect that fits, then a random share of it
    scale = min(sw / w, sh / h) * rng.uniform(0.35 if kind != "large" else 0.75, 1.0)
    bw, bh = max(1, int(w * scale)), max(1, int(h * scale))
    x0, y0 = rng.randint(0, sw - bw), rng.randint(0, sh - bh)
    im = src.crop((x0, y0, x0 + bw, y0 + bh)).resize((w, h), Image.LANCZOS)
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    if grain:
        import numpy as np
        noise = np.random.default_rng(rng.getrandbits(64)).normal(0.0, grain, (h, w, 1))
        px = np.asarray(im, dtype=np.float32) + noise.astype(np.float32)
        im = Image.fromarray(np.clip(px + 0.5, 0, 255).astype(np.uint8), "RGB")
    path = os.path.join(dst, f"c{i % CLASSES:02d}", f"{i:05d}.jpg")
    im.save(path, "JPEG", quality=90, subsampling="4:2:0", optimize=False, progressive=False)
    with open(path, "rb") as f:
        return path, hashlib.sha256(f.read()).hexdigest(), w * h


def make_kind(root, kind, count, grain, jobs, force):
    name = kind + ("-grain" if grain else "")
    final = os.path.join(root, name)
    paths = sorted(glob.glob(os.path.join(SOURCES, "*.jpg")))
    if not paths:
        sys.exit(f"make_photos.py: no photographs in {SOURCES}: install Debian's mate-backgrounds "
                 "(bash scripts/deps.sh)")
    want = {"version": VERSION, "kind": kind, "count": count, "grain": grain,
            "sources": [os.path.basename(p) for p in paths]}
    man = os.path.join(final, "photos.json")
    if not force and os.path.exists(man):
        with open(man) as f:
            have = json.load(f)
        if {k: have.get(k) for k in want} == want:
            print(f"{final}: {count} photos, already made", file=sys.stderr)
            return final
    os.makedirs(root, exist_ok=True)
    tmp = os.path.join(root, f".{name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for c in range(CLASSES):
        os.makedirs(os.path.join(tmp, f"c{c:02d}"))
    t0 = time.time()
    jobs_list = [(kind, i, paths, grain, tmp) for i in range(count)]
    with Pool(jobs) as pool:
        done = pool.map(make_one, jobs_list, chunksize=16)
    digest = hashlib.sha256()
    nbytes = 0
    for path, sha, _ in done:
        digest.update(f"{os.path.relpath(path, tmp)} {sha}\n".encode())
        nbytes += os.path.getsize(path)
    mp = sum(px for _, _, px in done) / len(done) / 1e6 if done else 0
    want.update({"sha256": digest.hexdigest(), "bytes": nbytes, "mean_megapixels": round(mp, 3),
                 "pillow": Image.__version__})
    with open(os.path.join(tmp, "photos.json"), "w") as f:
        json.dump(want, f, indent=1)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    print(f"{final}: {count} photos, {nbytes / 1e6:.1f} MB, mean {mp:.2f} MP, "
          f"{time.time() - t0:.1f} s, sha256 {digest.hexdigest()[:16]}", file=sys.stderr)
    return final


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="data/photos", help="where the kinds' folders go")
    ap.add_argument("--kinds", default="imagenet-like,seedlike",
                    help="comma-separated: " + ", ".join(KINDS))
    ap.add_argument("--large", action="store_true", help="also the 1-4 megapixel kind")
    ap.add_argument("--count", type=int, default=0, help="photos per kind (default: the kind's)")
    ap.add_argument("--grain", action="store_true",
                    help="film grain before encoding (ImageNet-like entropy)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--force", action="store_true", help="make the kinds again")
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k] + (["large"] if a.large else [])
    for k in kinds:
        if k not in KINDS:
            ap.error(f"unknown kind {k!r} (kinds: {', '.join(KINDS)})")
    for k in dict.fromkeys(kinds):
        print(make_kind(a.root, k, a.count or KINDS[k], 15.0 if a.grain else 0.0, a.jobs, a.force))


if __name__ == "__main__":
    main()
