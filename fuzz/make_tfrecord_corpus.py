#!/usr/bin/python3
"""Write the seed corpus of fuzz_tfrecord.

    make_tfrecord_corpus.py OUT_DIR

Seeds are TFRecord payloads (Examples and SequenceExamples encoded here by
hand from the protobuf wire format, framed with CRC-32C computed here) plus
three trailing parameter bytes read by fuzz/fuzz_data_producer.h from the end
(verify, gzip, index: the last byte is drawn first). Valid files of every
feature kind, then damaged ones: flipped data and length checksums, a
truncated tail, a length past the end, a payload that does not parse, a
feature whose type changes, an empty file, unpacked repeated numbers.
Deterministic: the same files each run. Needs only the standard library.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from tfrecord_wire import field, frame, masked, varint  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
count = 0


def feature(value, packed=True):
    """Feature from a Python value: bytes list, float list, int list."""
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return field(1, b"".join(field(1, v) for v in value))
    if isinstance(value, list) and value and isinstance(value[0], float):
        if packed:
            return field(2, field(1, b"".join(struct.pack("<f", v) for v in value)))
        return field(2, b"".join(varint(1 << 3 | 5) + struct.pack("<f", v) for v in value))
    if isinstance(value, list):
        if packed:
            return field(3, field(1, b"".join(varint(v) for v in value)))
        return field(3, b"".join(varint(1 << 3 | 0) + varint(v) for v in value))
    raise TypeError(value)


def features(d, packed=True):
    return b"".join(field(1, field(1, k.encode()) + field(2, feature(v, packed)))
                    for k, v in d.items())


def example(d, packed=True):
    return field(1, features(d, packed))


def seq_example(ctx, lists):
    fl = b"".join(field(1, field(1, k.encode()) + field(2, b"".join(field(1, feature(s))
                                                                    for s in steps)))
                  for k, steps in lists.items())
    return field(1, features(ctx)) + field(2, fl)


def params(verify, gz, index):
    return bytes([index, gz, verify])


def emit(name, data, verify=1, gz=0, index=0):
    global count
    with open(os.path.join(out, name), "wb") as f:
        f.write(data + params(verify, gz, index))
    count += 1


JPEG = bytes([0xFF, 0xD8, 0xFF, 0xE0]) + bytes(range(40))
recs = [example({"image/encoded": [JPEG + bytes([i])], "label": [i], "score": [0.5 * i],
                 "ids": list(range(i % 4)), "name": [b"n%d" % i]}) for i in range(6)]
plain = b"".join(frame(r) for r in recs)
for v in (0, 1):
    for g in (0, 1):
        for ix in (0, 1):
            emit("examples_v%d_g%d_i%d" % (v, g, ix), plain, v, g, ix)
emit("unpacked", b"".join(frame(example({"label": [i], "f": [1.0, 2.0]}, packed=False))
                          for i in range(3)), index=1)
seq = b"".join(frame(seq_example({"label": [i]}, {"frames": [[t, -t] for t in range(i + 1)],
                                                  "vec": [[0.5, float(i)]]}))
               for i in range(4))
emit("sequence", seq)
emit("sequence_index", seq, index=1)
emit("one_record", frame(example({"x": [7]})))
emit("empty_feature", frame(field(1, field(1, field(1, b"e") + field(2, b"")))))
emit("empty_file", b"")
emit("empty_example", frame(b""))

# damage
b = bytearray(plain)
b[40] ^= 1
emit("bad_data_crc", bytes(b))
b = bytearray(plain)
second = len(frame(recs[0]))
b[second + 9] ^= 0x10
emit("bad_length_crc", bytes(b))
emit("bad_length_crc_index", bytes(b), index=1)
emit("truncated_tail", plain[:-7])
emit("truncated_header", plain + plain[:5])
big = bytearray(plain)
big[second:second + 8] = struct.pack("<Q", 1 << 40)
big[second + 8:second + 12] = struct.pack("<I", masked(bytes(big[second:second + 8])))
emit("length_past_eof", bytes(big))
emit("not_protobuf", frame(b"\xff" * 20) + plain)
emit("type_change", b"".join(frame(example({"label": [i]})) for i in range(33)) +
     frame(example({"label": [1.5]})) + frame(example({"label": [1, 2]})), index=1)
emit("gzip_magic_plain", b"\x1f\x8b\x08\x00" + bytes(60))
emit("deep_nesting", frame(field(1, field(1, field(2, field(3, field(1, b"\x80" * 11)))))))
print("wrote %d tfrecord seeds to %s" % (count, out))
