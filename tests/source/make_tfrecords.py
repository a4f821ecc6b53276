#!/usr/bin/python3
"""Write TFRecord files with Google's protobuf runtime and the crc32c module,
independently of sluice, plus the values a reader must find in them.

    make_tfrecords.py OUT_DIR

The messages come from src/source/tf_example.proto compiled here with
`protoc --python_out` (the same description the C side is generated from,
but serialized by Google's code). Files written to OUT_DIR:

  plain.tfrecord     12 tf.train.Examples: a real JPEG (PIL), a label, a
                     file name, a float scalar, variable-length float and
                     int64 lists (some empty or missing)
  plain.tfrecord.gz  the same records, gzip-compressed
  seq.tfrecord       5 SequenceExamples: context label + two feature lists
  expected.json      {file: [{column: value}]}: bytes as hex, float32
                     values as the doubles they widen to, lists as lists

Exit status 3 when python3-protobuf, protoc or crc32c is missing (the C test
then skips with that message).
"""
import gzip
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "src", "source", "tf_example.proto")


def missing(what):
    print("make_tfrecords.py: %s is missing (apt-get install python3-protobuf "
          "protobuf-compiler python3-crc32c python3-pil)" % what, file=sys.stderr)
    sys.exit(3)


try:
    import crc32c
except ImportError:
    missing("python3-crc32c")
try:
    import google.protobuf  # noqa: F401
except ImportError:
    missing("python3-protobuf")
try:
    from PIL import Image
except ImportError:
    missing("python3-pil")
if not shutil.which("protoc"):
    missing("protoc")


def load_messages(tmp):
    subprocess.check_call(["protoc", "--proto_path=" + os.path.dirname(PROTO),
                           "--python_out=" + tmp, os.path.basename(PROTO)])
    sys.path.insert(0, tmp)
    import tf_example_pb2
    return tf_example_pb2


def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(payload):
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked(head)) + payload + struct.pack("<I", masked(payload))


def f32(x):
    """x as the float32 a FloatList stores, widened back to a double."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def jpeg(i):
    w, h = 8 + 3 * i, 6 + 2 * i
    img = Image.new("RGB", (w, h))
    img.putdata([((x * 31 + i * 7) & 255, (y * 17) & 255, (x * y + i) & 255)
                 for y in range(h) for x in range(w)])
    out = io.BytesIO()
    img.save(out, "JPEG", quality=85)
    return out.getvalue()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="sluice-proto-")
    pb = load_messages(tmp)
    expected = {}

    # ---- Examples -------------------------------------------------------
    frames, rows = [], []
    for i in range(12):
        ex = pb.Example()
        feat = ex.features.feature
        img = jpeg(i)
        feat["image/encoded"].bytes_list.value.append(img)
        feat["image/class/label"].int64_list.value.append(i * 37 - 100)
        name = ("img_%03d.jpg" % i).encode()
        feat["image/filename"].bytes_list.value.append(name)
        weight = 0.1 * i - 0.35
        feat["weight"].float_list.value.append(weight)
        scores = [0.5 * k + i / 3.0 for k in range(i % 4)]
        # "scores" is missing from every third record (a list column reads it as empty)
        if i % 3 != 2:
            feat["scores"].float_list.value.extend(scores)
        else:
            scores = []
        ids = [i * 1000 + k - (1 << 40) for k in range((i * 5) % 7)]
        feat["ids"].int64_list.value.extend(ids)
        frames.append(frame(ex.SerializeToString()))
        rows.append({
            "image/encoded": img.hex(),
            "image/class/label": i * 37 - 100,
            "image/filename": name.hex(),
            "weight": f32(weight),
            "scores": [f32(x) for x in scores],
            "ids": ids,
        })
    data = b"".join(frames)
    with open(os.path.join(out, "plain.tfrecord"), "wb") as f:
        f.write(data)
    with open(os.path.join(out, "plain.tfrecord.gz"), "wb") as f:
        f.write(gzip.compress(data, 6))
    expected["plain.tfrecord"] = rows
    expected["plain.tfrecord.gz"] = rows
    expected["plain_offsets"] = []
    pos = 0
    for fr in frames:
        expected["plain_offsets"].append(pos)
        pos += len(fr)

    # ---- SequenceExamples ------------------------------------------------
    frames, rows = [], []
    for i in range(5):
        se = pb.SequenceExample()
        se.context.feature["label"].int64_list.value.append(i)
        steps = [[i * 10 + t, -t] for t in range(i + 1)]
        fl = se.feature_lists.feature_list["frames"]
        for st in steps:
            fl.feature.add().int64_list.value.extend(st)
        vec = [[f32(0.25 * t + i), f32(-1.5 * t)] for t in range(2)]
        fv = se.feature_lists.feature_list["vec"]
        for st in vec:
            fv.feature.add().float_list.value.extend(st)
        frames.append(frame(se.SerializeToString()))
        rows.append({"label": i, "frames": steps, "vec": vec})
    with open(os.path.join(out, "seq.tfrecord"), "wb") as f:
        f.write(b"".join(frames))
    expected["seq.tfrecord"] = rows

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
