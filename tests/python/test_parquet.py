"""The Parquet source against the reference writers: files written by pyarrow
and Hugging Face `datasets` (scripts/make_parquet.py, in the venv of
scripts/parquet_venv.sh), every value read compared with pyarrow's
read_table; pack from Parquet against pack from the same images as an
ImageFolder; damaged, truncated and hostile files; the CLI commands."""
import ctypes
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import sluice

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLUICE = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "build", "sluice"))


def venv_python():
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "parquet_venv.sh")],
                       capture_output=True, text=True)
    if r.returncode != 0:  # the test command allows no skip: fail, saying why
        pytest.fail(f"scripts/parquet_venv.sh failed ({r.returncode}): {r.stderr.strip()}")
    return os.path.join(r.stdout.strip(), "bin", "python")


@pytest.fixture(scope="module")
def writer_python():
    return venv_python()


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, writer_python):
    out = str(tmp_path_factory.mktemp("pq"))
    subprocess.run([writer_python, os.path.join(ROOT, "scripts", "make_parquet.py"), "matrix", out],
                   check=True)
    return out


def make_images(root, classes=3, per=6):
    """A small ImageFolder of real JPEGs and PNGs (PIL), deterministic."""
    from PIL import Image
    rng = np.random.default_rng(7)
    for c in range(classes):
        d = os.path.join(root, f"class{c}")
        os.makedirs(d)
        for k in range(per):
            arr = rng.integers(0, 256, (24 + k, 31 + c, 3), dtype=np.uint8)
            im = Image.fromarray(arr)
            if k % 3 == 2:
                im.save(os.path.join(d, f"img{k}.png"))
            else:
                im.save(os.path.join(d, f"img{k}.jpg"), quality=90)


@pytest.fixture(scope="module")
def hf(tmp_path_factory, writer_python):
    base = tmp_path_factory.mktemp("hf")
    images = str(base / "images")
    make_images(images)
    out = str(base / "hf")
    subprocess.run([writer_python, os.path.join(ROOT, "scripts", "make_parquet.py"), "hf", out,
                    images], check=True)
    return images, out


def rows_of(path, **kw):
    """Every row as sluice reads it, one dict per row (batches of 1 keep
    ragged columns whole)."""
    rows = []
    for b in sluice.parquet(path, **kw).batch(1):
        row = {}
        for k, v in b.items():
            v = v[0]
            row[k] = v if isinstance(v, str) else np.asarray(v)
        rows.append(row)
    return rows


def check_file(path):
    exp = dict(np.load(os.path.splitext(path)[0] + ".npz"))
    names = [k for k in exp if "@" not in k]
    rows = rows_of(path)
    n = len(exp[names[0] + "@valid"])
    assert len(rows) == n
    for name in names:
        valid = exp[name + "@valid"]
        vals = exp[name]
        off = exp.get(name + "@off")
        for i, row in enumerate(rows):
            got = row[name]
            if off is not None:
                want = vals[off[i]:off[i + 1]]
                if isinstance(got, str):
                    assert got.encode() == bytes(want), (path, name, i)
                else:
                    assert got.dtype == want.dtype or got.dtype == np.uint8, (path, name, got.dtype)
                    assert np.array_equal(got.view(want.dtype) if got.dtype != want.dtype else got,
                                          want), (path, name, i, got, want)
                if not valid[i]:
                    assert len(want) == 0
            elif vals.dtype.kind == "f" and not valid[i]:
                assert np.isnan(got), (path, name, i)
            else:
                assert got.item() == vals[i].item(), (path, name, i, got, vals[i])
    return n


MATRIX = ["none-dict-v1", "none-plain-v2", "snappy-dict-v1", "snappy-plain-v2", "gzip-dict-v1",
          "gzip-plain-v2", "zstd-dict-v1", "zstd-plain-v2", "lz4-dict-v1", "lz4-plain-v2",
          "brotli-dict-v1", "brotli-plain-v2", "encodings-v1", "encodings-v2", "small-pages",
          "rows-1", "rows-100", "rows-10000"]


@pytest.mark.parametrize("name", MATRIX)
def test_every_value_equals_pyarrow(matrix, name):
    """Each compression, encoding, page version, dictionary on and off, row
    group size, page index on and off: every value as read_table gives it."""
    assert check_file(os.path.join(matrix, name + ".parquet")) > 0


def test_files_read_as_one_source_in_order(matrix):
    paths = [os.path.join(matrix, n + ".parquet") for n in ("gzip-dict-v1", "rows-100")]
    ids = [int(r["id"]) for r in rows_of(paths, columns=["id"])]
    assert ids == list(range(300)) + list(range(10000))
    # a folder, a pattern
    d = os.path.join(matrix, "two")
    os.makedirs(d, exist_ok=True)
    for p in paths:
        shutil.copy(p, d)
    assert len(rows_of(d, columns=["id"])) == 10300
    assert len(rows_of(os.path.join(d, "*.parquet"), columns={"id": "ident"})) == 10300


def test_nulls_fail_their_row_alone(matrix):
    """An integer null and a list with a null element fail their own row,
    naming file, row and column; the rows around them read."""
    path = os.path.join(matrix, "nulls.parquet")
    exp = dict(np.load(os.path.join(matrix, "nulls.npz")))
    ds = sluice.parquet(path, columns=["k", "n"]).batch(1)
    with pytest.raises(sluice.DecodeError, match=r"nulls.parquet: record 1 \(row group 0, row 1\): "
                       r"column 'n' is null"):
        list(ds)
    good = [int(b["n"][0]) for b in sluice.parquet(path, columns=["k", "n"]).batch(1)
            .on_error("skip")]
    assert good == [int(v) for v, ok in zip(exp["n"], exp["n@valid"]) if ok]
    rows = rows_of(path, columns=["k", "u32"])
    assert [int(r["u32"]) for r in rows] == [int(v) for v in exp["u32"]]
    with pytest.raises(sluice.DecodeError, match="record 3 .*column 'v' is a list holding a null"):
        rows_of(path, columns=["v"])


def test_skip_policy_reads_every_good_row(matrix):
    path = os.path.join(matrix, "nulls.parquet")
    spec = {"source": {"parquet": path, "columns": ["k", "n"]}, "on_error": "skip",
            "ops": [{"op": "batch", "size": 1}]}
    ds = sluice.from_spec(spec)
    got = [int(b["k"][0]) for b in ds]
    assert got == [k for k in range(40) if k % 4 != 1]


def test_columns_select_rename_and_unknown(matrix):
    path = os.path.join(matrix, "snappy-dict-v1.parquet")
    rows = rows_of(path, columns={"st.y": "why", "id": "i"})
    assert list(rows[0]) == ["why", "i"] and rows[8]["why"] == "y8" and rows[7]["why"] == ""
    with pytest.raises(sluice.InvalidError, match=r"no column 'tokns' .*columns: tokens"):
        rows_of(path, columns=["tokns"])


def test_filter_pushed_down_from_statistics(matrix):
    """A filter on an int64 column is answered from the source (row-group
    statistics where a chunk is constant, that column alone otherwise)."""
    path = os.path.join(matrix, "rows-100.parquet")
    ds = sluice.parquet(path, columns=["id", "i8"]).filter("i8", [3, 5]).batch(64)
    assert "pushed" in ds.explain()
    got = np.concatenate([b["id"] for b in ds])
    want = np.array([i for i in range(10000) if (i % 200 - 100) in (3, 5)])
    assert np.array_equal(np.sort(got), want)


def test_shuffle_shard_resume(matrix):
    """Global and window shuffles give every row once; ranks are disjoint and
    complete; a resumed run continues exactly."""
    path = os.path.join(matrix, "rows-100.parquet")

    def ids(ds):
        return [int(x) for b in ds for x in b["id"]]
    for mode in ("global", "window"):
        got = ids(sluice.parquet(path, columns=["id"]).shuffle(seed=3, mode=mode).batch(100))
        assert sorted(got) == list(range(10000)) and got != list(range(10000))
    ranks = [ids(sluice.parquet(path, columns=["id"]).shuffle(seed=1).shard(r, 3, equal="none")
                 .batch(50)) for r in range(3)]
    assert sorted(sum(ranks, [])) == list(range(10000))
    ds = sluice.parquet(path, columns=["id"]).shuffle(seed=5).batch(64)
    full = ids(ds)
    ds2 = sluice.parquet(path, columns=["id"]).shuffle(seed=5).batch(64)
    it = iter(ds2)
    first = [int(x) for _ in range(10) for x in next(it)["id"]]
    state = ds2.state_dict()
    ds3 = sluice.parquet(path, columns=["id"]).shuffle(seed=5).batch(64)
    ds3.load_state_dict(state)
    assert first + ids(ds3) == full


def test_small_cache_default_shuffle_reads_row_groups_in_blocks(matrix):
    """With a cache too small for the file, "shuffle" reads in window order,
    blocks of a row group's rows (explain says so), and still every row."""
    path = os.path.join(matrix, "rows-100.parquet")
    ds = sluice.parquet(path, columns=["id", "b"], cache_bytes=20000).shuffle(seed=2).batch(100)
    assert "window" in ds.explain()
    got = [int(x) for b in ds for x in b["id"]]
    assert sorted(got) == list(range(10000))


def test_hugging_face_image_classlabel(hf):
    """A datasets Image + ClassLabel dataset: info shows rows, columns and the
    class names; image is the Image struct's bytes (encoded), label its
    ClassLabel; the push_to_hub-style shards read as one source."""
    images, out = hf
    r = subprocess.run([SLUICE, "info", os.path.join(out, "hf.parquet"), "--json"],
                       capture_output=True, text=True, check=True)
    info = json.loads(r.stdout)
    assert info["kind"] == "parquet" and info["records"] == 18
    assert [c["name"] for c in info["columns"]] == ["image", "image.path", "label"]
    assert info["columns"][0].get("encoded") is True
    assert info["metadata"]["classes"] == ["class0", "class1", "class2"]
    text = subprocess.run([SLUICE, "info", os.path.join(out, "hf.parquet")], capture_output=True,
                          text=True, check=True).stdout
    assert "class0" in text and "18" in text
    shards = sorted(glob.glob(os.path.join(out, "data", "train-*.parquet")))
    assert len(shards) == 2
    a = rows_of(os.path.join(out, "hf.parquet"))
    b = rows_of(os.path.join(out, "data"))
    assert len(a) == len(b) == 18
    for x, y in zip(a, b):
        assert bytes(x["image"]) == bytes(y["image"]) and int(x["label"]) == int(y["label"])
    # the bytes are the files'; "image.bytes" names the same column
    first = sorted(glob.glob(os.path.join(images, "class0", "*")))[0]
    assert bytes(a[0]["image"]) == open(first, "rb").read()
    c = rows_of(os.path.join(out, "hf.parquet"), columns={"image.bytes": "img"})
    assert bytes(c[0]["img"]) == bytes(a[0]["image"])
    # decoded through the pipeline's ops
    ds = (sluice.parquet(os.path.join(out, "hf.parquet")).decode().resize("image", 16)
          .center_crop("image", 16).batch(6))
    assert next(iter(ds))["image"].shape == (6, 16, 16, 3)


def digests(path):
    """Every record of a .slr dataset: its columns' bytes."""
    r = sluice.Reader(path)
    return [tuple((k, v if isinstance(v, (int, float, str, bytes)) else bytes(np.asarray(v)))
                  for k, v in sorted(r[i].items())) for i in range(len(r))]


def test_pack_from_parquet_equals_pack_from_imagefolder(hf, tmp_path):
    """pack of the datasets Parquet file (image bytes as image, the Image's
    path as path, label) gives the records pack of the same ImageFolder
    gives, record for record; and the class names."""
    images, out = hf
    a, b = str(tmp_path / "folder.slr"), str(tmp_path / "pq.slr")
    subprocess.run([SLUICE, "pack", images, a], check=True, capture_output=True)
    subprocess.run([SLUICE, "pack", os.path.join(out, "hf.parquet"), b, "--features",
                    "image=image,label=label,image.path=path"], check=True, capture_output=True)
    assert digests(a) == digests(b)
    ra, rb = sluice.Reader(a), sluice.Reader(b)
    assert json.loads(ra.meta["classes"]) == json.loads(rb.meta["classes"])
    # and the digest of a whole training epoch over both
    spec = lambda p: {"source": {"path": p, "shuffle": True}, "seed": 4, "ops": [
        {"op": "decode"}, {"op": "random_resized_crop", "size": [32, 32]}, {"op": "flip"},
        {"op": "batch", "size": 6}]}
    outs = []
    for p in (a, b):
        f = str(tmp_path / (os.path.basename(p) + ".json"))
        with open(f, "w") as fh:
            json.dump(spec(p), fh)
        outs.append(subprocess.run([SLUICE, "run", f, "--digest"], capture_output=True, text=True,
                                   check=True).stdout)
    assert outs[0] == outs[1] and outs[0].count(":") >= 3


def test_cli_commands(matrix, tmp_path):
    path = os.path.join(matrix, "zstd-dict-v1.parquet")

    def run(*args, rc=0):
        r = subprocess.run([SLUICE, *args], capture_output=True, text=True)
        assert r.returncode == rc, (args, r.stdout, r.stderr)
        return r
    assert json.loads(run("info", path, "--json").stdout)["records"] == 300
    run("verify", path)
    assert run("cat", path, "-i", "8", "-c", "st.y").stdout == "y8"
    assert run("cat", path, "-i", "7", "-c", "id").stdout.strip() == "7"
    assert json.loads(run("scan", path, "--json").stdout)["records"] == 300
    run("index", path)
    dst = str(tmp_path / "o.slr")
    run("pack", path, dst, "--features", "id,s,tokens")
    r = sluice.Reader(dst)
    assert len(r) == 300 and r[9]["s"] == rows_of(path, columns=["s"])[9]["s"]
    spec = str(tmp_path / "s.json")
    with open(spec, "w") as f:
        json.dump({"source": {"parquet": path, "columns": ["id", "f32"], "shuffle": True},
                   "seed": 1, "ops": [{"op": "batch", "size": 32}]}, f)
    one = run("run", spec, "--digest", "--threads", "1").stdout
    two = run("run", spec, "--digest", "--threads", "2").stdout
    assert one == two and one
    run("bench", spec)
    assert "parquet" in run("explain", spec).stdout


# ---- damaged, truncated, hostile -------------------------------------------------------

def read_all_or_error(path):
    """Every row, or the first error (never a crash: the subprocess's exit
    status says). Returns ("ok", rows) or ("error", message)."""
    code = ("import sluice, sys\n"
            "n = 0\n"
            "try:\n"
            "    for b in sluice.parquet(sys.argv[1]).batch(7):\n"
            "        n += 1\n"
            "    print('ok', n)\n"
            "except sluice.Error as e:\n"
            "    print('error', type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ))
    assert r.returncode == 0, (path, r.returncode, r.stderr[-2000:])
    return r.stdout


def test_truncated_files_fail_naming_the_file(matrix, tmp_path):
    src = open(os.path.join(matrix, "snappy-dict-v1.parquet"), "rb").read()
    for cut in sorted({0, 1, 4, 8, 11, 12, len(src) // 3, len(src) // 2, len(src) - 9,
                       len(src) - 8, len(src) - 5, len(src) - 1}):
        p = str(tmp_path / f"cut{cut}.parquet")
        with open(p, "wb") as f:
            f.write(src[:cut])
        out = read_all_or_error(p)
        assert out.startswith("error"), (cut, out)
        assert f"cut{cut}.parquet" in out, out


def test_damaged_bytes_give_an_error_or_the_right_data(matrix, tmp_path):
    """Every 97th byte flipped in turn: each read gives the right rows or an
    error naming the file; page CRCs catch damage in pages that have one."""
    name = "snappy-dict-v1"  # written with page CRCs
    src = bytearray(open(os.path.join(matrix, name + ".parquet"), "rb").read())
    ok = errors = 0
    for pos in range(4, len(src) - 8, 97):
        bad = bytearray(src)
        bad[pos] ^= 0x5A
        p = str(tmp_path / "flip.parquet")
        with open(p, "wb") as f:
            f.write(bad)
        out = read_all_or_error(p)
        if out.startswith("ok"):
            ok += 1
        else:
            errors += 1
            assert "flip.parquet" in out, out
    assert errors > 0


def test_crc_mismatch_names_page_and_verify_off_reads(matrix, tmp_path):
    src = bytearray(open(os.path.join(matrix, "none-dict-v1.parquet"), "rb").read())
    # the last byte of the first data page of the first chunk: a value byte
    import struct
    i = src.find(b"x" * 40)
    assert i > 0
    src[i + 5] ^= 1
    p = str(tmp_path / "crc.parquet")
    with open(p, "wb") as f:
        f.write(src)
    with pytest.raises(sluice.CorruptError, match=r"crc.parquet: record \d+: row group \d+, column 's': page \d+: "
                       r"CRC mismatch"):
        rows_of(p)
    rows = rows_of(p, verify=False)
    assert len(rows) == 300


def test_hostile_footers(tmp_path):
    """Footers made by hand: a huge list count, deep nesting, a length past the
    file, a schema whose children run past its end, wrong magic."""
    def file_with_footer(name, footer):
        p = str(tmp_path / name)
        with open(p, "wb") as f:
            f.write(b"PAR1" + b"\x00" * 16 + footer + len(footer).to_bytes(4, "little") + b"PAR1")
        return p
    cases = {
        "huge_list.parquet": bytes([0x19, 0xfc]) + b"\xff\xff\xff\xff\x0f",  # schema: list of 2^32 structs
        "deep.parquet": bytes([0x19, 0x1c]) * 40 + b"\x00" * 40,
        "children.parquet": bytes([0x15, 0x00, 0x19, 0x1c, 0x48, 0x01, 0x72, 0x15, 0x0a, 0x00,
                                   0x16, 0x00, 0x19, 0x0c, 0x00]),
        "empty_footer.parquet": b"",
        "garbage.parquet": bytes(range(256)) * 3,
    }
    for name, footer in cases.items():
        p = file_with_footer(name, footer)
        out = read_all_or_error(p)
        assert out.startswith("error"), (name, out)
        assert name in out, out
    p = str(tmp_path / "len.parquet")
    with open(p, "wb") as f:
        f.write(b"PAR1" + b"\x00" * 8 + (10 ** 6).to_bytes(4, "little") + b"PAR1")
    assert "footer length" in read_all_or_error(p)
    p = str(tmp_path / "magic.parquet")
    with open(p, "wb") as f:
        f.write(b"PAR1" + b"\x00" * 30 + b"PAR2")
    assert "does not end with PAR1" in read_all_or_error(p)


def test_good_file_after_bad_ones(matrix, tmp_path):
    """A damaged file among good ones: its rows fail, the others' read."""
    good = os.path.join(matrix, "none-dict-v1.parquet")  # uncompressed, with page CRCs
    bad = bytearray(open(good, "rb").read())
    i = bad.find(b"x" * 40)
    bad[i + 5] ^= 1
    p = str(tmp_path / "bad.parquet")
    with open(p, "wb") as f:
        f.write(bad)
    spec = {"source": {"parquet": [p, good], "columns": ["id", "s"]}, "on_error": "skip",
            "ops": [{"op": "batch", "size": 10}]}
    got = [int(x) for b in sluice.from_spec(spec) for x in b["id"]]
    # the bad file's damaged row group (100 rows) is skipped, its other two
    # read, then the good file whole
    assert len(got) == 500, len(got)
    assert got[-300:] == list(range(300))
    bad_rows = sorted(set(range(300)) - set(got[:200]))
    assert len(bad_rows) == 100 and bad_rows[-1] - bad_rows[0] == 99


def test_cache_counted_in_memory_limit(matrix):
    """The cache of decoded row groups is memory the pipeline counts: a limit
    below it fails at creation, saying so; a smaller cache fits."""
    path = os.path.join(matrix, "rows-100.parquet")
    ds = sluice.parquet(path, columns=["id", "b", "s"], cache_bytes="1G").memory_limit("600K")
    with pytest.raises(sluice.LimitError, match="source's cache"):
        next(iter(ds.batch(8)))
    ds = sluice.parquet(path, columns=["id", "b", "s"], cache_bytes="100K").memory_limit("600K")
    assert len(list(ds.batch(8))) == 1250


# ---- remote: http:// and s3:// through the IO layer -------------------------------------

sys.path.insert(0, os.path.join(ROOT, "tests", "remote"))
import httpfix  # noqa: E402


def remote_env(tmp, **extra):
    e = dict(os.environ)
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy",
              "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
              "AWS_S3_ADDRESSING_STYLE"):
        e.pop(k, None)
    e["SLUICE_CACHE_DIR"] = str(tmp / "cache")
    e["SLUICE_HTTP_BACKOFF_MS"] = "20"
    e.update({k: str(v) for k, v in extra.items()})
    return e


def digest_run(tmp, source, env):
    spec = {"source": dict(source, shuffle=True), "seed": 3, "epochs": 1,
            "ops": [{"op": "batch", "size": 50}]}
    p = tmp / f"spec-{len(os.listdir(tmp))}.json"
    p.write_text(json.dumps(spec))
    r = subprocess.run([SLUICE, "run", str(p), "--digest"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def web(matrix):
    if not httpfix.have_nginx():
        pytest.fail("nginx is missing (scripts/deps.sh installs it)")
    os.symlink(".", os.path.join(matrix, "bkt"))
    with httpfix.Nginx(matrix) as ng:
        yield ng


def test_remote_values_equal_local(matrix, web, tmp_path):
    """Over http:// and s3://, the same values as the local file: the footer
    from the object's tail with the open, column chunks by range requests."""
    name = "rows-100"  # 1.2 MB: more than the open's edges, so chunks are ranges
    cols = ["id", "s", "tokens", "st.y"]
    local = digest_run(tmp_path, {"parquet": os.path.join(matrix, name + ".parquet"),
                                  "columns": cols}, remote_env(tmp_path))
    px = httpfix.FaultProxy(web.port)
    try:
        env = remote_env(tmp_path, SLUICE_CACHE_BYTES=0)
        got = digest_run(tmp_path, {"parquet": f"{px.url}/{name}.parquet", "columns": cols}, env)
        assert got == local
        gets = [p for m, p in px.requests if m == "GET"]
        # the open's edges, then one range per chunk read (100 row groups x 4
        # columns), never the whole object
        assert 100 <= len(gets) <= 100 * len(cols) + 10, len(gets)
    finally:
        px.close()
    env = remote_env(tmp_path, AWS_ENDPOINT_URL=web.url, AWS_REGION="us-east-1")
    got = digest_run(tmp_path, {"parquet": f"s3://bkt/{name}.parquet", "columns": cols}, env)
    assert got == local


def crc_big(matrix):
    """A file past the open's edges (1.6 MB), with page CRCs."""
    big = os.path.join(matrix, "crcbig.parquet")
    if not os.path.exists(big):
        subprocess.run([venv_python(), "-c", (
            "import pyarrow.parquet as pq, sys; t = pq.read_table(sys.argv[1]);"
            "pq.write_table(t, sys.argv[2], row_group_size=1000, write_page_checksum=True,"
            " compression='NONE')"), os.path.join(matrix, "rows-10000.parquet"), big], check=True)
    return big


def test_remote_damage_heals_and_faults_retry(matrix, web, tmp_path):
    """A chunk whose bytes arrive damaged (a bit flipped by a faulty proxy)
    fails its page CRC and is read once more; 5xx, drops and cut bodies are
    retried by the IO layer: the run's batches equal the local run's."""
    name = "rows-100"
    cols = ["id", "b"]
    local = digest_run(tmp_path, {"parquet": os.path.join(matrix, name + ".parquet"),
                                  "columns": cols}, remote_env(tmp_path))
    # rows-100 has no page CRCs: damage heals where a check sees it, so use a
    # file written with them
    crc = "snappy-dict-v1"
    local_crc = digest_run(tmp_path, {"parquet": os.path.join(matrix, crc + ".parquet")},
                           remote_env(tmp_path))
    px = httpfix.FaultProxy(web.port, seed=3, err503=0.05, drop=0.03, truncate=0.03)
    try:
        env = remote_env(tmp_path, SLUICE_CACHE_BYTES=0)
        assert digest_run(tmp_path, {"parquet": f"{px.url}/{name}.parquet", "columns": cols},
                          env) == local
        assert sum(v for k, v in px.counts.items() if k not in ("ok", "flip", "stall", "etag")) > 0
    finally:
        px.close()
    big = crc_big(matrix)
    local_big = digest_run(tmp_path, {"parquet": big, "columns": ["id", "s", "b"]},
                           remote_env(tmp_path))
    px = httpfix.FaultProxy(web.port, flip="crcbig.parquet", flip_max=2)
    try:
        env = remote_env(tmp_path, SLUICE_CACHE_BYTES=0)
        got = digest_run(tmp_path, {"parquet": f"{px.url}/crcbig.parquet",
                                    "columns": ["id", "s", "b"]}, env)
        assert px.counts["flip"] >= 1
        assert got == local_big
    finally:
        px.close()
    assert local_crc


# --- the types of Hugging Face datasets beyond numbers, strings and structs -----------------

TYPES = ["types-flba", "types-int"]


@pytest.mark.parametrize("name", TYPES)
def test_types_equal_pyarrow(matrix, name):
    """Lists of strings (the bytes and their lengths), lists of lists (a 2-D
    array a row), DECIMAL (scale 0 and <= 18 digits as int64, others as the
    decimal rounded to a float64; stored as INT32, INT64 and
    FIXED_LEN_BYTE_ARRAY), INT96 timestamps (int64 nanoseconds, before 1970
    too) and maps (keys, their lengths, values): every value of every row as
    pyarrow's read_table gives it."""
    path = os.path.join(matrix, name + ".parquet")
    with open(os.path.join(matrix, name + ".json")) as f:
        exp = json.load(f)
    src = sluice.parquet(path)
    assert sorted(src.columns) == sorted(exp), (src.columns, sorted(exp))
    rows = rows_of(path)
    assert len(rows) == 500
    kinds = {c["name"]: c for c in json.loads(
        subprocess.run([SLUICE, "info", path, "--json"], capture_output=True, text=True,
                       check=True).stdout)["columns"]}
    assert kinds["qty"]["type"] == "int64" and kinds["huge"]["type"] == "int64"
    assert kinds["price"]["type"] == "float64" and kinds["wide"]["type"] == "float64"
    assert kinds["ts"]["type"] == "int64"
    for name_, want in exp.items():
        for i, row in enumerate(rows):
            got, w = row[name_], want[i]
            if name_ in ("tags", "m.key"):
                assert bytes(np.asarray(got, dtype=np.uint8)).hex() == w, (name_, i)
            elif name_ == "boxes":
                g = np.asarray(got)
                assert g.dtype == np.float32 and g.shape == ((len(w), 4) if w else (0, 0)), \
                    (i, g.shape)
                assert np.array_equal(g, np.array(w, np.float32).reshape(g.shape)), (i, g, w)
            elif name_ == "grid":
                g = np.asarray(got)
                assert g.dtype == np.int64
                assert g.tolist() == (w if w else []) or (not w and g.size == 0), (i, g, w)
            elif isinstance(w, list):
                assert np.asarray(got).tolist() == w, (name_, i, got, w)
            elif w is None:
                assert np.isnan(got), (name_, i)
            else:
                g = np.asarray(got).item()
                assert type(g) is type(w) and g == w, (name_, i, g, w)


def test_types_refused_name_file_and_column(matrix):
    """What sluice cannot give faithfully fails with the file, the row and the
    column named: inner lists of different lengths and a null inner list fail
    their rows alone; a list of lists of strings and a DECIMAL past 38 digits
    are not columns (left out with a warning, an error when named)."""
    path = os.path.join(matrix, "types-refused.parquet")
    r = subprocess.run([SLUICE, "info", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "column 'words' left out: a list of lists of strings is not supported" in r.stderr
    assert "column 'd256' left out: DECIMAL(40, 2) is not supported" in r.stderr
    for col, why in (("words", "a list of lists of strings"), ("d256", "DECIMAL(40, 2)")):
        with pytest.raises(sluice.UnsupportedError) as e:
            rows_of(path, columns=[col])
        assert "types-refused.parquet" in str(e.value) and f"'{col}'" in str(e.value)
        assert why in str(e.value)
    rows = [np.asarray(b["grid"][0]).tolist() for b in
            sluice.parquet(path, columns=["grid"]).batch(1).on_error("skip")]
    assert rows == [[[1, 2], [3, 4]], [[5]], [], [], [[7, 8]]]
    with pytest.raises(sluice.DecodeError, match=r"types-refused.parquet: record 1 \(row group 0, "
                       r"row 1\): column 'grid' is a list of lists of different lengths \(2 and 1\)"):
        rows_of(path, columns=["grid"])
    rows = [np.asarray(b["holed"][0]).tolist() for b in
            sluice.parquet(path, columns=["holed"]).batch(1).on_error("skip")]
    assert rows == [[[1]], [[2]], [[3]], [[4]], [[5], [6]]]
    with pytest.raises(sluice.DecodeError, match=r"types-refused.parquet: record 3 .*column 'holed' "
                       r"is a list of lists holding a null"):
        rows_of(path, columns=["holed"])


# --- random access through the page index --------------------------------------------------

class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("nbytes", ctypes.c_size_t), ("buf", ctypes.c_void_p),
                ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32), ("shape", ctypes.c_int64 * 8),
                ("device", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _Sample(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint64), ("ncols", ctypes.c_uint32), ("col", _Tensor * 16)]


def _lib():
    lib = ctypes.CDLL(os.environ.get("SLUICE_LIB") or os.path.join(ROOT, "build", "libsluice.so"))
    lib.sl_source_open.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    lib.sl_source_read.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(_Sample)]
    lib.sl_source_describe.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_size_t)]
    lib.sl_sample_clear.argtypes = [ctypes.POINTER(_Sample)]
    lib.sl_source_free.argtypes = [ctypes.c_void_p]
    lib.sl_errmsg.restype = ctypes.c_char_p
    return lib


def _random_reads(path, rows, cache_bytes):
    """Rows `rows` of `path` (id, s, tokens) read one at a time through
    sl_source_read, and the source's description after them."""
    lib = _lib()
    src = ctypes.c_void_p()
    spec = {"parquet": path, "columns": ["id", "s", "tokens"], "cache_bytes": cache_bytes}
    assert lib.sl_source_open(ctypes.byref(src), json.dumps(spec).encode()) == 0, lib.sl_errmsg()
    out, smp = [], _Sample()
    try:
        for i in rows:
            assert lib.sl_source_read(src, i, ctypes.byref(smp)) == 0, lib.sl_errmsg()
            c = smp.col
            ident = ctypes.c_int64.from_address(c[0].data).value
            s = ctypes.string_at(c[1].data, c[1].nbytes) if c[1].nbytes else b""
            tok = list((ctypes.c_int64 * c[2].shape[0]).from_address(c[2].data)) \
                if c[2].shape[0] else []
            out.append((ident, s, tok))
            lib.sl_sample_clear(ctypes.byref(smp))
        n = ctypes.c_size_t()
        lib.sl_source_describe(src, None, 0, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value + 1)
        assert lib.sl_source_describe(src, buf, n.value + 1, None) == 0
        return out, json.loads(buf.value)
    finally:
        lib.sl_source_free(src)


def test_page_index_random_rows_decode_their_pages(matrix):
    """With a cache too small for the file, a random row of a file with the
    page index decodes the page that holds it (one per column, and the
    dictionary) instead of its row group; without the index, its row group.
    Both give every value as pyarrow does; a row group asked for page by page
    as many times as it has pages is then decoded whole."""
    exp = dict(np.load(os.path.join(matrix, "page-index-on.npz")))
    rng = np.random.default_rng(4)
    rows = [int(r) for r in rng.choice(10000, 8, replace=False)]
    want = []
    for i in rows:
        so, to = exp["s@off"], exp["tokens@off"]
        want.append((int(exp["id"][i]), bytes(exp["s"][so[i]:so[i + 1]]),
                     [int(v) for v in exp["tokens"][to[i]:to[i + 1]]]))
    on, d_on = _random_reads(os.path.join(matrix, "page-index-on.parquet"), rows, 1)
    off, d_off = _random_reads(os.path.join(matrix, "page-index-off.parquet"), rows, 1)
    assert on == want and off == want
    assert d_on["page_index"] is True and d_on["random_access"] == "page", d_on
    assert d_on["row_groups_decoded"] == 0 and 0 < d_on["pages_decoded"] <= len(rows), d_on
    assert d_off["page_index"] is False and d_off["random_access"] == "row_group", d_off
    assert d_off["pages_decoded"] == 0 and d_off["row_groups_decoded"] >= 4, d_off
    # every row of row group 1 in a random order: page by page, then whole
    rg1 = [int(r) for r in rng.permutation(np.arange(2500, 5000))]
    got, d = _random_reads(os.path.join(matrix, "page-index-on.parquet"), rg1, 1)
    assert [g[0] for g in got] == rg1
    assert d["row_groups_decoded"] == 1 and d["pages_decoded"] >= 1, d


def test_remote_cached_whole_checked_and_healed(matrix, web, tmp_path):
    """With the shard cache on, a remote Parquet file is fetched whole into
    it once (a few requests, not one a chunk) and read from there by later
    runs; a cached copy damaged on disk fails the check on the next open
    (the cache's own, or the footer and every page CRC) and is fetched again:
    every run's batches equal the local file's."""
    big = crc_big(matrix)
    cols = ["id", "s", "b"]
    local = digest_run(tmp_path, {"parquet": big, "columns": cols}, remote_env(tmp_path))
    env = remote_env(tmp_path)  # the cache on, in tmp_path/cache

    def run(px):
        n = len(px.requests)
        got = digest_run(tmp_path, {"parquet": f"{px.url}/crcbig.parquet", "columns": cols}, env)
        return got, [h.get("range", "whole") for (m, _), h in
                     zip(px.requests[n:], px.seen_headers[n:]) if m == "GET"]
    px = httpfix.FaultProxy(web.port)
    try:
        got, gets = run(px)
        # the open's edges and the footer, then the file whole (not 30 chunks by ranges)
        assert got == local and gets.count("whole") == 1 and len(gets) <= 6, gets
        got, gets = run(px)
        assert got == local and "whole" not in gets, gets  # from the cache
        # damaged on disk: the cached copy's middle byte flipped
        copies = glob.glob(str(tmp_path / "cache" / "*-crcbig.parquet"))
        assert len(copies) == 1, copies  # the object's bytes, then the cache's own trailer
        with open(copies[0], "r+b") as f:
            f.seek(os.path.getsize(big) // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x10]))
        got, gets = run(px)
        assert got == local and gets.count("whole") == 1, gets
        with open(copies[0], "rb") as f, open(big, "rb") as g:
            want = g.read()
            assert f.read(len(want)) == want  # healed
    finally:
        px.close()
