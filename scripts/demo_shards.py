#!/usr/bin/python3
"""Write an ImageFolder's JPEGs as WebDataset tar shards and as TFRecord
files of tf.train.Example, for the README's quick tour (scripts/demo.sh runs
it; tests/cli/readme_tour.sh too):

    demo_shards.py IMAGEFOLDER OUT_DIR [SHARDS]

OUT_DIR/wds/shard-000000.tar ...: one sample per image, members KEY.jpg (the
file's bytes) and KEY.cls (the class's position among the sorted class
folders), written by Python's tarfile.
OUT_DIR/tfr/train-00000.tfrecord ...: one tf.train.Example per image,
features image/encoded (bytes) and image/class/label (int64); the framing
is the TFRecord format's (length, masked CRC-32C of the length, data,
masked CRC-32C of the data) and the Example encoded from its .proto
(src/source/tf_example.proto), both by scripts/tfrecord_wire.py. Samples are
dealt to the SHARDS shards (default 4) in order. Made once: existing outputs are kept.
"""
import io
import os
import sys
import tarfile

from tfrecord_wire import field, frame, varint


def example(image, label):
    """tf.train.Example{features{feature: {"image/encoded": bytes_list},
    {"image/class/label": int64_list}}} (Features.feature is a map: each
    entry a message of key = 1, value = 2)."""
    def entry(key, feature):
        return field(1, field(1, key) + field(2, feature))
    feats = entry(b"image/encoded", field(1, field(1, image)))           # Feature.bytes_list
    feats += entry(b"image/class/label", field(3, field(1, varint(label))))  # int64_list, packed
    return field(1, feats)


def samples(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            if name.lower().endswith((".jpg", ".jpeg")):
                with open(os.path.join(root, cls, name), "rb") as f:
                    yield f"{cls}_{os.path.splitext(name)[0]}", f.read(), label


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    root, out = sys.argv[1], sys.argv[2]
    nshards = int(sys.argv[3]) if len(sys.argv) == 4 else 4
    items = list(samples(root))
    if not items:
        sys.exit(f"{root}: no JPEGs in class folders")
    wds, tfr = os.path.join(out, "wds"), os.path.join(out, "tfr")
    if not os.path.isdir(wds):
        os.makedirs(wds + ".tmp", exist_ok=True)
        for s in range(nshards):
            with tarfile.open(os.path.join(wds + ".tmp", "shard-%06d.tar" % s), "w",
                              format=tarfile.USTAR_FORMAT) as t:
                for key, data, label in items[s::nshards]:
                    for ext, body in (("jpg", data), ("cls", b"%d" % label)):
                        info = tarfile.TarInfo(f"{key}.{ext}")
                        info.size = len(body)
                        t.addfile(info, io.BytesIO(body))
        os.rename(wds + ".tmp", wds)
    if not os.path.isdir(tfr):
        os.makedirs(tfr + ".tmp", exist_ok=True)
        for s in range(nshards):
            with open(os.path.join(tfr + ".tmp", "train-%05d.tfrecord" % s), "wb") as f:
                for _, data, label in items[s::nshards]:
                    f.write(frame(example(data, label)))
        os.rename(tfr + ".tmp", tfr)
    print(f"{len(items)} images as {nshards} tar shards in {wds}/ and {nshards} TFRecord "
          f"files in {tfr}/")


if __name__ == "__main__":
    main()
