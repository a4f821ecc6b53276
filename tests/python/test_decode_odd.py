"""Odd image files through sluice's decoder in each warnings mode and through
Pillow, checked file by file against the decision table of docs/OPS.md
("Decoder warnings"), with identical pixels wherever both decode. Also the
EXIF orientation option against PIL's ImageOps.exif_transpose (exact), the
decode op's warnings=/exif_orientation= kwargs through a pipeline, and every
file of the decode fuzz corpus followed by a good file on the same decoder.

The files are made here at run time (PIL + byte surgery); nothing binary is
kept. Run with -s to see the summary table.
Run: PYTHONPATH=build/python SLUICE_LIB=build/libsluice.so /usr/bin/python3 -m pytest tests/python/test_decode_odd.py
"""
import ctypes as C
import io
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops_ref_lib as R  # noqa: E402

pytest.importorskip("PIL.Image")
from PIL import Image, ImageOps  # noqa: E402

_ops = R.load()
pytestmark = pytest.mark.skipif(_ops is None, reason="libsluice not built at %s" % R.LIB_PATH)

SL_DECODE_WARNINGS, SL_DECODE_EXIF_ORIENTATION = 3, 4
MODES = {"default": 0, "strict": 1, "lenient": 2}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def jpeg(img, **kw):
    b = io.BytesIO()
    img.save(b, "JPEG", **kw)
    return b.getvalue()


def segment_offset(data, marker):
    """Offset of the first header segment with `marker` (before SOS)."""
    p = 2
    while p + 4 <= len(data) and data[p] == 0xFF:
        if data[p + 1] == marker:
            return p
        if data[p + 1] == 0xDA:
            break
        p += 2 + int.from_bytes(data[p + 2:p + 4], "big")
    raise ValueError("marker %02x not found" % marker)


def scan_start(data):
    p = segment_offset(data, 0xDA)
    return p + 2 + int.from_bytes(data[p + 2:p + 4], "big")


def exif_bytes(orientation):
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()


def odd_files():
    """name -> bytes, and the expected outcome (Pillow, default, strict,
    lenient): True decodes, False fails."""
    rng = np.random.default_rng(3)
    pic = R.natural_image(64, 48, 9)
    rgb = Image.fromarray(pic)
    base = jpeg(rgb, quality=90)
    s0 = scan_start(base)
    f = {}

    def add(name, data, expect):
        f[name] = (data, expect)

    ok4, fail4 = (True,) * 4, (False,) * 4
    add("cmyk", jpeg(rgb.convert("CMYK"), quality=90), ok4)
    cm = jpeg(rgb.convert("CMYK"), quality=90)
    a = segment_offset(cm, 0xEE)  # without the Adobe marker: still read inverted, as PIL
    add("cmyk_no_adobe", cm[:a] + cm[a + 2 + int.from_bytes(cm[a + 2:a + 4], "big"):], ok4)
    add("gray", jpeg(rgb.convert("L")), ok4)
    add("progressive", jpeg(rgb, quality=85, progressive=True), ok4)
    b = io.BytesIO()
    rgb.save(b, "PNG")
    add("png_named_jpg", b.getvalue(), ok4)
    add("junk_after_eoi", base + bytes(rng.integers(0, 256, 40, dtype=np.uint8)), ok4)
    q = segment_offset(base, 0xDB)
    add("extraneous_before_marker", base[:q] + b"\x00\x11\x22" + base[q:],
        (True, True, False, True))
    add("truncated_mid_scan", base[:s0 + (len(base) - s0) // 2], fail4)
    d = bytearray(base)
    for i in range(s0 + 40, len(d) - 40, 97):
        d[i] = 0xFE if d[i] != 0xFF and d[i - 1] != 0xFF else d[i]
    add("corrupt_entropy", bytes(d), (True, False, False, True))
    d = bytearray(base)
    m = s0 + (len(d) - s0) // 2
    d[m:m + 2] = b"\xff\xd5"
    add("stray_marker_mid_scan", bytes(d), (True, False, False, True))
    d = bytearray(base)
    a0 = segment_offset(base, 0xE0)
    d[a0 + 9] = 3  # JFIF version 3.01
    add("jfif_major_3", bytes(d), (True, True, False, True))
    # transform code 5, and no JFIF marker (it would decide the colour space first)
    adobe = b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00\x05"
    no_jfif = base[:a0] + base[a0 + 2 + int.from_bytes(base[a0 + 2:a0 + 4], "big"):]
    add("adobe_unknown_transform", no_jfif[:2] + adobe + no_jfif[2:], (True, True, False, True))
    add("bad_icc_profile", jpeg(rgb, quality=90, icc_profile=b"not an ICC profile" * 3), ok4)
    add("exif_present", jpeg(rgb, quality=90, exif=exif_bytes(6)), ok4)
    add("subsampling_422", jpeg(rgb, quality=90, subsampling=1), ok4)
    add("zero_length", b"", fail4)
    d = bytearray(base)
    sof = segment_offset(base, 0xC0)
    d[sof + 5:sof + 7] = b"\x00\x00"
    add("sof_height_zero", bytes(d), fail4)
    add("1x1", jpeg(Image.new("RGB", (1, 1), (200, 30, 90))), ok4)
    add("wide_2000x1", jpeg(Image.fromarray(R.natural_image(2000, 1, 4))), ok4)
    return f


def pillow(data):
    try:
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    except Exception:
        return None


class Dec:
    """A decoder with settings, through the C API."""

    def __init__(self, warnings=0, exif=0):
        self.ops = R.Ops(_ops.lib)
        lib = _ops.lib
        lib.sl_decoder_set.argtypes = [C.c_void_p, C.c_int, C.c_int64]
        assert lib.sl_decoder_set(self.ops.dec, SL_DECODE_WARNINGS, warnings) == 0
        assert lib.sl_decoder_set(self.ops.dec, SL_DECODE_EXIF_ORIENTATION, exif) == 0

    def decode(self, data):
        try:
            return self.ops.decode(data)
        except R.SluiceError:
            return None

    def close(self):
        self.ops.close()


@pytest.fixture(scope="module")
def table():
    rows = []
    decs = {m: Dec(v) for m, v in MODES.items()}
    for name, (data, expect) in odd_files().items():
        rows.append((name, data, expect, pillow(data),
                     {m: decs[m].decode(data) for m in MODES}))
    for d in decs.values():
        d.close()
    print("\n%-26s %-7s %-7s %-7s %-7s" % ("file", "Pillow", "default", "strict", "lenient"))
    for name, _, _, p, got in rows:
        cell = lambda a: "pixels" if a is not None else "error"  # noqa: E731
        print("%-26s %-7s %-7s %-7s %-7s" % (name, cell(p), cell(got["default"]),
                                             cell(got["strict"]), cell(got["lenient"])))
    return rows


def test_decisions_follow_the_table(table):
    for name, _, expect, p, got in table:
        seen = (p is not None,) + tuple(got[m] is not None for m in MODES)
        assert seen == expect, "%s: (Pillow, default, strict, lenient) = %s, documented %s" % (
            name, seen, expect)


def test_pixels_equal_pillow_wherever_both_decode(table):
    for name, _, _, p, got in table:
        for m, a in got.items():
            if a is not None and p is not None:
                np.testing.assert_array_equal(a, p, err_msg="%s (%s)" % (name, m))


def test_lenient_accepts_what_pillow_accepts(table):
    for name, _, _, p, got in table:
        assert (got["lenient"] is not None) == (p is not None), name


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("subsampling", [0, 2])
def test_exif_orientation_equals_exif_transpose(orientation, subsampling):
    img = Image.fromarray(R.natural_image(37, 22, orientation))
    data = jpeg(img, quality=90, subsampling=subsampling, exif=exif_bytes(orientation))
    ref = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    on, off = Dec(exif=1), Dec(exif=0)
    np.testing.assert_array_equal(on.decode(data), ref)
    np.testing.assert_array_equal(off.decode(data), pillow(data))
    info = on.ops.info(data)
    assert (info.height, info.width) == ref.shape[:2]
    on.close()
    off.close()


def _one_image(data):
    """A Dataset of one sample: the file's bytes as a 1-D uint8 column (pack
    would refuse the files whose point is a warning)."""
    import sluice
    return sluice.from_arrays({"image": np.frombuffer(data, np.uint8)[None]})


def test_pipeline_kwargs(tmp_path):
    sluice = pytest.importorskip("sluice")
    files = odd_files()
    with pytest.raises(ValueError):
        sluice.records("x.slr").decode("image", warnings="loose")
    assert sluice.records("x.slr").decode("image").spec["ops"] == [
        {"op": "decode", "column": "image", "mode": "rgb"}]
    for name, mode, ok in [("extraneous_before_marker", "default", True),
                           ("extraneous_before_marker", "strict", False),
                           ("corrupt_entropy", "default", False),
                           ("corrupt_entropy", "lenient", True)]:
        data = files[name][0]
        for fused in (False, True):
            ds = _one_image(data).decode("image", warnings=mode)
            if fused:
                ds = ds.resize("image", (8, 8))
            ds = ds.select("image").batch(1).on_error("skip")
            got = [np.asarray(b["image"])[0] for b in ds.numpy()]
            assert len(got) == int(ok), (name, mode, fused)
            if ok and not fused:
                np.testing.assert_array_equal(got[0], pillow(data))
    # exif_orientation through the plain and the fused op
    img = Image.fromarray(R.natural_image(30, 20, 1))
    data = jpeg(img, quality=90, exif=exif_bytes(8))
    ref = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    ds = _one_image(data).decode("image", exif_orientation=True).select("image").batch(1)
    np.testing.assert_array_equal(np.asarray(next(iter(ds.numpy()))["image"])[0], ref)
    ds = (_one_image(data).decode("image", exif_orientation=True).resize("image", (10, 6))
          .select("image").batch(1))
    out = np.asarray(next(iter(ds.numpy()))["image"])[0]
    expect = np.asarray(Image.fromarray(ref).resize((6, 10), Image.BILINEAR))
    np.testing.assert_array_equal(out, expect)


def test_fuzz_corpus_neighbours(tmp_path):
    """Each corpus file (bad or good), then a good file on the same decoder:
    the good file's pixels equal a fresh decoder's, plain and fused."""
    out = tmp_path / "corpus"
    subprocess.run([sys.executable, os.path.join(ROOT, "fuzz", "make_decode_corpus.py"),
                    str(out)], check=True, capture_output=True)
    names = sorted(os.listdir(out))
    assert len(names) >= 10
    goods = [jpeg(Image.fromarray(R.natural_image(40, 30, 2)), quality=90),
             jpeg(Image.fromarray(R.natural_image(40, 30, 3)), quality=80, progressive=True)]
    for mode in MODES.values():
        fresh = Dec(mode)
        refs = [(fresh.ops.decode(g), fresh.ops.decode_crop_resize(g, (3, 5, 20, 30), 6, 7))
                for g in goods]
        fresh.close()
        for n in names:
            data = (out / n).read_bytes()[4:]  # 4 parameter bytes lead each file
            for gi, g in enumerate(goods):
                d = Dec(mode)
                d.decode(data)
                np.testing.assert_array_equal(d.ops.decode(g), refs[gi][0], err_msg=n)
                d.decode(data)
                np.testing.assert_array_equal(d.ops.decode_crop_resize(g, (3, 5, 20, 30), 6, 7),
                                              refs[gi][1], err_msg=n)
                d.close()
