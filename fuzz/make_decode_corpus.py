#!/usr/bin/env python3
"""Write the seed corpus of fuzz_decode into DIR (default build/fuzz_corpus/decode).

Each file is an image made here with PIL followed by trailing parameter bytes
(read by fuzz/fuzz_data_producer.h, last byte first; see fuzz_decode.c): JPEG
baseline/progressive/gray/CMYK/4:4:4, restart markers, PNG in every colour type
and depth, WebP lossy/lossless/alpha/animated, plus damaged variants (truncated, a
flipped byte, an oversized header). With --damage TOOL (build/sluice_jpeg_damage),
also JPEGs whose entropy-coded data has runs of bytes overwritten by stuffed
0xFF 0x00 pairs (tests/ops/jpeg_damage.h), baseline and progressive, each with
the plain and the fused decode in every decoder mode. Deterministic: the same
files each run.
Usage: /usr/bin/python3 fuzz/make_decode_corpus.py [--damage TOOL] [DIR]
"""
import io
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
from PIL import Image


def picture(w, h, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1),
                     (xx + yy) * 127 // max(w + h - 2, 1)], -1)
    noise = rng.integers(0, 40, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def save(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def seeds():
    rgb = Image.fromarray(picture(48, 40, 1))
    small = Image.fromarray(picture(9, 7, 2))
    yield "jpeg_420", save(rgb, "JPEG", quality=85)
    yield "jpeg_444", save(rgb, "JPEG", quality=95, subsampling=0)
    yield "jpeg_prog", save(rgb, "JPEG", quality=80, progressive=True)
    yield "jpeg_gray", save(rgb.convert("L"), "JPEG")
    yield "jpeg_cmyk", save(rgb.convert("CMYK"), "JPEG")
    yield "jpeg_tiny", save(small, "JPEG")
    yield "jpeg_1x1", save(Image.new("RGB", (1, 1), (9, 80, 200)), "JPEG")
    for mode in ("RGB", "RGBA", "L", "LA", "1"):
        yield "png_" + mode, save(rgb.convert(mode), "PNG")
    yield "png_P", save(rgb.convert("P", palette=Image.ADAPTIVE, colors=16), "PNG")
    yield "png_P_trns", save(small.convert("P", palette=Image.ADAPTIVE, colors=4), "PNG",
                             transparency=1)
    yield "png_I16", save(Image.fromarray((np.arange(63).reshape(7, 9) * 1000).astype(np.int32),
                                          "I").convert("I;16"), "PNG")
    good = save(rgb, "JPEG", quality=85)
    yield "jpeg_truncated", good[: len(good) * 2 // 3]
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x5A
    yield "jpeg_flipped", bytes(flipped)
    big = bytearray(save(small, "JPEG"))
    i = big.index(b"\xff\xc0")
    big[i + 5:i + 9] = struct.pack(">HH", 30000, 30000)
    yield "jpeg_huge_header", bytes(big)
    png = bytearray(save(small, "PNG"))
    png[16:24] = struct.pack(">II", 30000, 30000)
    png[29:33] = struct.pack(">I", zlib.crc32(bytes(png[12:29])) & 0xffffffff)
    yield "png_huge_header", bytes(png)
    # WebP: lossy, lossless, with alpha, animated (refused), damaged
    rgba = rgb.convert("RGBA")
    a = np.asarray(rgba).copy()
    a[..., 3] = np.arange(a.shape[0] * a.shape[1]).reshape(a.shape[:2]) % 256
    rgba = Image.fromarray(a, "RGBA")
    yield "webp_lossy", save(rgb, "WEBP", quality=80)
    yield "webp_lossless", save(rgb, "WEBP", lossless=True)
    yield "webp_lossy_alpha", save(rgba, "WEBP", quality=60)
    yield "webp_lossless_alpha", save(rgba, "WEBP", lossless=True)
    yield "webp_tiny", save(small, "WEBP")
    yield "webp_animated", save(small, "WEBP", save_all=True, append_images=[rgb.resize((9, 7))],
                                duration=40)
    wgood = save(rgb, "WEBP", quality=80)
    yield "webp_truncated", wgood[: len(wgood) * 2 // 3]
    wflip = bytearray(wgood)
    wflip[len(wgood) // 2] ^= 0x5A
    yield "webp_flipped", bytes(wflip)
    wbig = bytearray(save(small, "WEBP", lossless=True))
    # VP8L header after "RIFF" size "WEBP" "VP8L" size and the 0x2f signature:
    # 14-bit width-1 and height-1, set to the maximum
    bits = int.from_bytes(wbig[21:25], "little")
    bits = (bits & ~((1 << 28) - 1)) | (16383 << 14) | 16383
    wbig[21:25] = bits.to_bytes(4, "little")
    yield "webp_huge_header", bytes(wbig)


def params(*draws):
    """Trailing parameter bytes: draws = (value, nbytes) in the order
    fuzz_decode draws them; each is consumed from the end, most significant
    byte first."""
    tail = b""
    for value, nbytes in draws:
        tail = value.to_bytes(nbytes, "little") + tail
    return tail


def decode_params(call, rgb, interp, out_h, out_w, fracs=(0, 0, 0, 0), raw=None, mode=0):
    """call: 0 sl_decode, 1 fused with a box, 2 fused on the whole image;
    interp 0..2 (bilinear, area, nearest); fracs: box h, w, y, x as fractions
    of the image (0..65535); raw: a box (y, x, h, w) taken as it is; mode:
    warnings 0 default, 1 strict, 2 lenient, 3 default + check_entropy."""
    draws = [(call, 1), (rgb, 1), (interp, 1), (out_h - 1, 1), (out_w - 1, 1),
             (0 if raw else 1, 1)] + [(f, 2) for f in fracs]
    if raw:
        draws += [(v & 0xffffffff, 4) for v in raw]
    draws += [(mode, 1)]
    return params(*draws)


PARAMS = (
    decode_params(0, 1, 0, 1, 1),
    decode_params(0, 0, 0, 1, 1),
    decode_params(1, 1, 0, 40, 24, (0x8000, 0xc000, 0x1000, 0xf000)),
    decode_params(1, 0, 1, 7, 96, (0xffff, 0xffff, 0, 0)),
    decode_params(2, 1, 2, 16, 16),
    decode_params(1, 1, 0, 10, 10, (0x4000, 0x4000, 0x4000, 0x4000), raw=(-1, 3, 5, 5)),
)

# Damaged entropy data: the plain decode and the fused decode of the whole
# image, in each decoder mode.
DAMAGE_PARAMS = tuple(decode_params(call, 1, 0, 24, 24, mode=mode)
                      for call in (0, 2) for mode in range(4))


def damaged_seeds(tool):
    """The damaged JPEGs sluice_jpeg_damage makes from a baseline and a
    progressive photo-like JPEG (large enough that most of the scan is read
    on libjpeg-turbo's fast Huffman path)."""
    rgb = Image.fromarray(picture(240, 160, 5))
    with tempfile.TemporaryDirectory() as tmp:
        srcs = []
        for name, kw in (("base", {}), ("prog", {"progressive": True})):
            path = os.path.join(tmp, name + ".jpg")
            with open(path, "wb") as f:
                f.write(save(rgb, "JPEG", quality=90, **kw))
            srcs.append(path)
        out = os.path.join(tmp, "damaged")
        subprocess.run([tool, out] + srcs, check=True, stdout=subprocess.DEVNULL)
        for name in sorted(os.listdir(out)):
            with open(os.path.join(out, name), "rb") as f:
                yield "jpeg_entropy_" + name[:-4], f.read()


# A format sl_image_sniff learns next (AVIF, ...) gets its seeds in seeds()
# (valid, truncated, flipped, oversized header) and is fuzzed with the rest.


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = sys.argv[1:]
    tool = None
    if args[:1] == ["--damage"]:
        tool, args = args[1], args[2:]
    out = args[0] if args else os.path.join(repo, "build", "fuzz_corpus", "decode")
    os.makedirs(out, exist_ok=True)
    n = 0
    groups = [(seeds(), PARAMS)]
    if tool:
        groups.append((damaged_seeds(tool), DAMAGE_PARAMS))
    for named, tails in groups:
        for name, data in named:
            for k, tail in enumerate(tails):
                with open(os.path.join(out, "%s_%d" % (name, k)), "wb") as f:
                    f.write(data + tail)
                n += 1
    print("wrote %d files to %s" % (n, out))


if __name__ == "__main__":
    main()
