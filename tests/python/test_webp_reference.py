"""WebP decoding against PIL: sluice's decode must equal
Image.open(f).convert("RGB") (and "L") for lossy and lossless WebP, with and
without alpha; an animated WebP is refused; pack --check decode finds a WebP
whose header is fine but whose data is damaged.

Tolerance: exact (0 levels) for every case, lossy included. Both decode with
the system's libwebp and its default (fancy) chroma upsampling; PIL asks for
RGBA and drops alpha, sluice asks for RGB, and libwebp computes the colour
channels the same way for both.
Run: SLUICE_LIB=build/libsluice.so /usr/bin/python3 -m pytest tests/python/test_webp_reference.py
"""
import io
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops_ref_lib as R  # noqa: E402

PIL = pytest.importorskip("PIL.Image")
from PIL import Image, features  # noqa: E402

_ops = R.load()
pytestmark = [
    pytest.mark.skipif(_ops is None, reason="libsluice with image ops not built (set SLUICE_LIB)"),
    pytest.mark.skipif(not features.check("webp"), reason="PIL built without WebP"),
]


def webp_bytes(img, **kw):
    b = io.BytesIO()
    img.save(b, "WEBP", **kw)
    return b.getvalue()


def pil(data, mode):
    return np.asarray(Image.open(io.BytesIO(data)).convert(mode))


@pytest.mark.parametrize("w,h", [(1, 1), (17, 33), (97, 61), (640, 427), (1, 300)])
@pytest.mark.parametrize("kind", ["lossy", "lossy_q30", "lossless", "lossy_alpha",
                                  "lossless_alpha"])
def test_decode_webp_equals_pil(w, h, kind):
    rgb = R.natural_image(w, h, w * 3 + h)
    if "alpha" in kind:
        a = (np.arange(w * h).reshape(h, w) * 37 % 256).astype(np.uint8)
        img = Image.fromarray(np.dstack([rgb, a]), "RGBA")
    else:
        img = Image.fromarray(rgb)
    kw = {"lossless": True} if kind.startswith("lossless") else {
        "quality": 30 if kind.endswith("q30") else 85}
    data = webp_bytes(img, **kw)
    got = _ops.decode(data, R.RGB)
    np.testing.assert_array_equal(got, pil(data, "RGB"))
    np.testing.assert_array_equal(_ops.decode(data, R.GRAY)[:, :, 0], pil(data, "L"))
    if kind == "lossless":
        np.testing.assert_array_equal(got, rgb)  # and lossless means lossless


def test_animated_webp_refused():
    frames = [Image.fromarray(R.natural_image(20, 16, s)) for s in (1, 2)]
    b = io.BytesIO()
    frames[0].save(b, "WEBP", save_all=True, append_images=frames[1:], duration=50)
    with pytest.raises(Exception, match="animated WebP is not supported"):
        _ops.decode(b.getvalue(), R.RGB)


def test_pack_check_decode_webp(tmp_path):
    import sluice
    root = tmp_path / "f"
    (root / "a").mkdir(parents=True)
    good = webp_bytes(Image.fromarray(R.natural_image(64, 48, 3)), quality=80)
    (root / "a" / "1.webp").write_bytes(good)
    (root / "a" / "2.webp").write_bytes(good[: len(good) * 2 // 3])  # header intact
    (root / "a" / "3.bmp").write_bytes(b"BM" + bytes(60))
    rep = sluice.pack(str(root), str(tmp_path / "h.slr"), skip_bad=True)
    assert rep["records"] == 2 and rep["skipped"] == 1, rep
    assert "3.bmp: BMP images are not supported by decode" in rep["bad"][0]
    rep = sluice.pack(str(root), str(tmp_path / "d.slr"), skip_bad=True, check="decode", jobs=2)
    assert rep["records"] == 1 and rep["skipped"] == 2, rep
    assert "2.webp: decode: webp: " in rep["bad"][0], rep["bad"]
    with pytest.raises(sluice.DecodeError, match="2.webp"):
        sluice.pack(str(root / ".." / "f"), str(tmp_path / "e.slr"), check="decode")
    with pytest.raises(ValueError, match="check"):
        sluice.pack(str(root), str(tmp_path / "x.slr"), check="pixels")
