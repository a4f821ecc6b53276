#!/usr/bin/python3
"""Make WebDataset tar shards with GNU tar for tests/source/test_tar.c.

    make_tar_shards.py OUT_DIR

Writes sample files under OUT_DIR/src (real JPEGs from PIL, labels as .cls
text with and without a trailing newline, .json, .txt, a two-dot extension),
archives them with GNU tar in each format, and writes OUT_DIR/expected.json:

    {"<shard name>": [{"key": KEY, "members": {EXT: FILE}, "cls": INT}, ...]}

The expected samples come from what this script put in each archive and in
which order (an explicit member list, or the order --sort=name gives), not
from reading the archives: the C test compares sluice against these.
"""
import io
import json
import os
import subprocess
import sys

from PIL import Image

out = sys.argv[1]
src = os.path.join(out, "src")
os.makedirs(src, exist_ok=True)

LONG_DIR = "a_rather_long_directory_name_" + "x" * 60 + "/and_a_second_level_" + "y" * 30
assert len(LONG_DIR) > 100


def jpeg(i, w, h):
    img = Image.new("RGB", (w, h))
    img.putdata([((x * 7 + i * 31) & 255, (y * 5 + i) & 255, (x + y + i * 3) & 255)
                 for y in range(h) for x in range(w)])
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=80 + i % 15)
    return buf.getvalue()


def write(rel, data):
    path = os.path.join(src, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return rel


def make_sample(i, directory):
    """Files of one sample; returns (key, {ext: rel path}, label) and the
    member order: the extensions in a fixed, non-alphabetical order."""
    key = "%s/img%03d" % (directory, i) if directory else "img%03d" % i
    label = (i * 37) % 1000 - (100 if i % 5 == 0 else 0)
    cls_text = "%d\n" % label if i % 2 else (" %d" % label if i % 3 else "%d" % label)
    members = {
        "jpg": write(key + ".jpg", jpeg(i, 8 + i % 5, 6 + i % 3)),
        "cls": write(key + ".cls", cls_text),
        "json": write(key + ".json", json.dumps({"i": i, "name": "sample %d" % i})),
        "txt": write(key + ".txt", "a caption for sample %d\n" % i * (1 + i % 3)),
        "seg.png": write(key + ".seg.png", bytes(range(i % 7, 40 + i % 7))),
    }
    order = ["jpg", "cls", "json", "txt", "seg.png"]
    return key, members, label, order


def tar(name, fmt, members, extra=()):
    path = os.path.join(out, name)
    listfile = path + ".list"
    with open(listfile, "w") as f:
        f.write("".join(m + "\n" for m in members))
    subprocess.run(["tar", "--format=" + fmt, "--no-recursion", "-cf", path, "-C", src,
                    "-T", listfile] + list(extra), check=True)
    os.unlink(listfile)


expected = {}


def shard(name, fmt, samples, extra=()):
    members, exp = [], []
    for key, m, label, order in samples:
        members += [m[e] for e in order]
        exp.append({"key": key, "members": {e: os.path.join(src, m[e]) for e in order},
                    "cls": label})
    tar(name, fmt, members, extra)
    expected[name] = exp


# Three shards of one dataset (brace pattern), one format each; nested
# directories, and names over 100 bytes (GNU long-name entries, pax path
# records, the ustar prefix field).
n = 0
for k, fmt in enumerate(["gnu", "posix", "ustar"]):
    samples = []
    for j in range(6):
        if fmt == "ustar":
            d = "nested/deeper/%d" % k if j % 2 else ""
            if j == 4:  # name over 100 bytes through the prefix field
                d = "p" * 60 + "/" + "q" * 40
        else:
            d = LONG_DIR if j % 3 == 0 else ("nested/deeper/%d" % k if j % 3 == 1 else "")
        samples.append(make_sample(n, d))
        n += 1
    shard("shard-%03d.tar" % k, fmt, samples)

# A shard written with --sort=name from a directory: tar walks it and sorts
# each directory's entries; directory members come along (and are skipped).
sorted_samples = [make_sample(100 + i, "sorted/%s" % ("b" if i % 2 else "a")) for i in range(5)]
names = []
for key, m, label, order in sorted_samples:
    names += [m[e] for e in order]
path = os.path.join(out, "sorted.tar")
subprocess.run(["tar", "--format=gnu", "--sort=name", "-cf", path, "-C", src, "sorted"], check=True)
exp = []
for key, m, label, order in sorted(sorted_samples, key=lambda s: s[0].split("/")):
    # within a sample, by extension name: cls, jpg, json, seg.png, txt
    exp.append({"key": key, "members": {e: os.path.join(src, m[e]) for e in sorted(order)},
                "cls": label})
expected["sorted.tar"] = exp

# Bad input made by tar itself (the C test does the byte surgery).
good = [make_sample(200 + i, "bad") for i in range(4)]
write("bad/.hidden", "no key here")
write("bad/notnum.cls", "seven\n")
write("bad/notnum.jpg", jpeg(7, 8, 8))


def members_of(samples):
    r = []
    for key, m, label, order in samples:
        r += [m[e] for e in order]
    return r


# a member without a key in the middle
shard_members = members_of(good[:2]) + ["bad/.hidden"] + members_of(good[2:])
tar("nokey.tar", "gnu", shard_members)
# a non-numeric label in the middle
tar("notnum.tar", "gnu", members_of(good[:2]) + ["bad/notnum.jpg", "bad/notnum.cls"] +
    members_of(good[2:]))
# a key that comes back after another sample
tar("dupkey.tar", "gnu", members_of(good[:2]) + [good[0][1]["txt"]] + members_of(good[2:]),
    ["--hard-dereference"])
# two members with one extension in a sample: the same name from two roots
# (the second root holds another bad/img201.jpg)
os.makedirs(os.path.join(out, "root2", "bad"), exist_ok=True)
with open(os.path.join(out, "root2", good[1][1]["jpg"]), "wb") as f:
    f.write(jpeg(11, 9, 9))
subprocess.run(["tar", "--format=gnu", "--no-recursion", "-cf", os.path.join(out, "twice.tar"),
                "-C", src] + members_of(good[:2]) + ["-C", os.path.join(out, "root2"),
                good[1][1]["jpg"], "-C", src] + members_of(good[2:]), check=True)
# for truncation and pax surgery: plain copies in the two formats
tar("good-gnu.tar", "gnu", members_of(good))
tar("good-posix.tar", "posix", members_of(good))
expected["good"] = [{"key": key, "members": {e: os.path.join(src, m[e]) for e in order},
                     "cls": label} for key, m, label, order in good]

with open(os.path.join(out, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1)
