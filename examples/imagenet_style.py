#!/usr/bin/python3
"""The ImageNet training input pipeline on an ImageFolder, fed by sluice.

    /usr/bin/python3 examples/imagenet_style.py IMAGEFOLDER [--epochs 2] [--batch 64]

The folder has torchvision's layout (ROOT/CLASS/IMAGE.jpg). It is packed once
into a .slr file beside a temporary directory (or --workdir), then read with
the standard training transforms — RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor + Normalize — which the engine runs as a fused
decode+crop (only the needed region, at the smallest DCT scale) on worker
threads. Batches arrive as torch tensors without a copy; the loop here only
counts them and prints images/s and the engine's verdict on what bounds the
run (F: storage, P: CPU, G: the consumer).

Under torchrun each rank reads its own shard (.shard() reads RANK and
WORLD_SIZE).
"""
import argparse
import json
import os
import tempfile
import time

import sluice

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def train_pipeline(path, batch, seed=0):
    return (sluice.records(path)
            .shuffle(seed=seed)
            .shard()
            .decode("image")
            .random_resized_crop("image", 224)
            .flip("image")
            .normalize("image", mean=MEAN, std=STD, layout="chw")
            .select("image", "label")
            .batch(batch, drop_remainder=True)
            .prefetch(4))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--numpy", action="store_true", help="iterate numpy arrays instead of torch")
    a = ap.parse_args(argv)

    work = a.workdir or tempfile.mkdtemp(prefix="sluice-imagenet-")
    slr = os.path.join(work, os.path.basename(os.path.normpath(a.folder)) + ".slr")
    if not os.path.exists(slr):
        t0 = time.perf_counter()
        rep = sluice.pack(a.folder, slr)
        print(json.dumps({"packed": rep["records"], "classes": rep["classes"],
                          "seconds": round(time.perf_counter() - t0, 1)}), flush=True)

    ds = train_pipeline(slr, a.batch).epochs(a.epochs)
    print(ds.explain())
    for epoch in range(a.epochs):
        ds.set_epoch(epoch)
        t0 = time.perf_counter()
        seen = 0
        for batch in (ds.numpy() if a.numpy else ds.torch()):
            images, labels = batch["image"], batch["label"]
            seen += images.shape[0]
        dt = time.perf_counter() - t0
        st = ds.stats()
        print(json.dumps({"epoch": epoch, "images": seen, "img_s": round(seen / dt, 1),
                          "shape": list(images.shape), "dtype": str(images.dtype),
                          "bound": st.get("bound"), "verdict": st.get("verdict")}), flush=True)
    ds.close()


if __name__ == "__main__":
    main()
