"""The TFRecord framing (length, masked CRC-32C of the length, data, masked
CRC-32C of the data) and the protobuf wire-format pieces a tf.train.Example
needs, written by hand so that the scripts that make TFRecord files need
neither TensorFlow nor the protobuf package: scripts/demo_shards.py and
fuzz/make_tfrecord_corpus.py. CRC-32C comes from the crc32c module
(python3-crc32c, scripts/deps.sh) when it is there, else from a table here
(the same values, slower: fine for small files such as the fuzz seeds).
"""
import struct

try:
    from crc32c import crc32c
except ImportError:
    _table = []
    for _i in range(256):
        _c = _i
        for _ in range(8):
            _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
        _table.append(_c)

    def crc32c(data):
        c = 0xFFFFFFFF
        for b in data:
            c = _table[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF


def masked(data):
    """TFRecord's masked CRC-32C of `data`."""
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(payload):
    """One TFRecord record holding `payload`."""
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked(head)) + payload + struct.pack("<I", masked(payload))


def varint(v):
    """A protobuf varint (negative numbers as their 64-bit two's complement)."""
    v &= (1 << 64) - 1
    b = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            b.append(byte | 0x80)
        else:
            b.append(byte)
            return bytes(b)


def field(num, payload):
    """A length-delimited protobuf field."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload
