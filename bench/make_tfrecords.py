#!/usr/bin/python3
"""Write an ImageFolder as TFRecord shards of tf.train.Example, with Google's
protobuf runtime and the crc32c module (not sluice), for benchmarks.

    make_tfrecords.py ROOT OUT_DIR [--shards N] [--gzip]

Records follow torchvision's ImageFolder order (sorted classes, then sorted
paths), split into N consecutive shards train-0000K-of-0000N.tfrecord, each
an Example {"image/encoded": bytes, "image/class/label": int64}.
"""
import argparse
import gzip
import os
import struct
import subprocess
import sys
import tempfile


def masked(data):
    import crc32c  # here: listing() is used where crc32c is not installed
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def proto_module(tmp):
    here = os.path.dirname(os.path.abspath(__file__))
    proto_dir = os.path.join(here, "..", "src", "source")
    subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={tmp}",
                    "tf_example.proto"], check=True)
    sys.path.insert(0, tmp)
    import tf_example_pb2
    return tf_example_pb2


def listing(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    ext = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
    out = []
    for label, c in enumerate(classes):
        files = []
        for d, _, names in os.walk(os.path.join(root, c), followlinks=True):
            files += [os.path.join(d, n) for n in names if n.lower().endswith(ext)]
        out += [(p, label) for p in sorted(files)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("out")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--gzip", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pb = proto_module(tmp)
        items = listing(a.root)
        per = (len(items) + a.shards - 1) // a.shards
        for k in range(a.shards):
            name = f"train-{k:05d}-of-{a.shards:05d}.tfrecord" + (".gz" if a.gzip else "")
            opener = gzip.open if a.gzip else open
            with opener(os.path.join(a.out, name), "wb") as f:
                for path, label in items[k * per:(k + 1) * per]:
                    ex = pb.Example()
                    feat = ex.features.feature
                    with open(path, "rb") as img:
                        feat["image/encoded"].bytes_list.value.append(img.read())
                    feat["image/class/label"].int64_list.value.append(label)
                    data = ex.SerializeToString()
                    head = struct.pack("<Q", len(data))
                    f.write(head + struct.pack("<I", masked(head)) + data +
                            struct.pack("<I", masked(data)))
    print(f"{len(items)} records in {a.shards} shards under {a.out}")


if __name__ == "__main__":
    main()
