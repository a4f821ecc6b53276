"""Mixtures of datasets (sluice.mix, {"source": {"kind": "mix", ...}}).

Proportions within binomial bounds over 10^6 draws (random) and within one
over every window (exact); the same sequence for 1, 2 and 5 reading threads,
read into batch rows or not, and across a mid-epoch resume; upsampling of a
10-record input blended with a 10,000-record one; the three stop rules and
counts per epoch; ranks disjoint, equal and complete; schema mismatches
refused naming both inputs and the column; a mix of an .slr, WebDataset tar
shards and TFRecord files with the same columns, each sample equal to the
record its own reader gives; per-input ops (two photo sets made alike by
their own ops, byte-equal to each input's own pipeline for any thread count
and across a resume; a filter in one input; a mismatch after the ops and a
whole-stream op in an input refused).

Run: PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python/test_mix.py
"""
import json
import math
import os
import subprocess

import numpy as np
import pytest

import sluice

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(path, n, tag, width=2):
    """A .slr of n records: x = [tag, i, ...] (int64[width]), label = tag."""
    cols = [("x", "array", "int64", (width,)), ("label", "int64")]
    with sluice.Writer(str(path), cols, fsync=False) as w:
        for i in range(n):
            x = np.zeros(width, dtype=np.int64)
            x[0], x[1] = tag, i
            w.append({"x": x, "label": tag})
    return str(path)


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    d = tmp_path_factory.mktemp("mix")
    return {"big": write(d / "big.slr", 10000, 0), "small": write(d / "small.slr", 10, 1),
            "mid": write(d / "mid.slr", 3000, 2), "dir": str(d)}


def pairs(ds):
    """The (input, record) of every sample of one epoch, in order."""
    out = []
    for b in ds:
        out.extend(map(tuple, np.asarray(b["x"])[:, :2].tolist()))
    return out


# ---- proportions --------------------------------------------------------------------

def test_random_proportions_within_binomial_bounds():
    n_each = 500000
    ds = sluice.mix([sluice.synthetic(records=n_each).shuffle(),
                     sluice.synthetic(records=n_each).shuffle(),
                     sluice.synthetic(records=n_each)],
                    [0.6, 0.3, 0.1], seed=5, source_column="src", columns=["index"]).batch(50000)
    counts = np.zeros(3, dtype=np.int64)
    for b in ds:
        counts += np.bincount(np.asarray(b["src"]), minlength=3)
    n = int(counts.sum())
    assert n == 3 * n_each   # 1.5 * 10^6 draws
    for k, p in enumerate((0.6, 0.3, 0.1)):
        assert abs(counts[k] - n * p) < 5 * math.sqrt(n * p * (1 - p)), (k, counts)
    mix = ds.stats()["mix"]
    assert [e["samples"] for e in mix["inputs"]] == counts.tolist()
    assert abs(mix["inputs"][0]["share"] - counts[0] / n) < 1e-12


def test_exact_within_one_over_every_window(sets):
    ds = sluice.mix([sluice.records(sets["big"]).shuffle(), sluice.records(sets["mid"]),
                     sluice.records(sets["small"])],
                    [0.5, 0.35, 0.15], schedule="exact", seed=3).batch(1000)
    src = np.array([p[0] for p in pairs(ds)])
    tags = {0: 0.5, 2: 0.35, 1: 0.15}
    for tag, share in tags.items():
        pre = np.concatenate([[0], np.cumsum(src == tag)])
        for n in (1, 2, 3, 7, 10, 64, 100, 999, 5000):
            got = pre[n:] - pre[:-n]
            assert got.min() >= math.floor(n * share) - 1, (tag, n, got.min())
            assert got.max() <= math.ceil(n * share) + 1, (tag, n, got.max())


# ---- determinism and resume -----------------------------------------------------------

def mixed(sets, parallel=None, read_rows=True, schedule="random"):
    ds = sluice.mix([sluice.records(sets["big"]).shuffle(), sluice.records(sets["small"]).shuffle(),
                     sluice.records(sets["mid"]).shuffle()],
                    [0.5, 0.2, 0.3], seed=11, schedule=schedule)
    spec = ds.spec
    if parallel is not None:
        spec["source"]["parallel"] = parallel
    if not read_rows:
        spec["read_rows"] = False
    return sluice.from_spec(spec).batch(64)


@pytest.mark.parametrize("schedule", ["random", "exact"])
def test_same_sequence_for_any_thread_count(sets, schedule):
    want = pairs(mixed(sets, 1, schedule=schedule))
    assert len(want) == 13010
    for parallel in (2, 5):
        for rows in (True, False):
            assert pairs(mixed(sets, parallel, rows, schedule)) == want, (parallel, rows)
    # the next epoch is another blend, the same way again
    ds = mixed(sets, 2, schedule=schedule)
    ds.set_epoch(1)
    other = pairs(ds)
    ds = mixed(sets, 5, schedule=schedule)
    ds.set_epoch(1)
    assert pairs(ds) == other != want


def test_exact_resume_mid_epoch(sets):
    whole = pairs(mixed(sets, 3))
    for stop_after in (1, 57, 150):
        ds = mixed(sets, 3)
        it = iter(ds)
        head = []
        for _ in range(stop_after):
            head.extend(map(tuple, np.asarray(next(it)["x"])[:, :2].tolist()))
        state = ds.state_dict()
        json.dumps(state)   # a plain JSON document
        ds.close()
        again = mixed(sets, 2)
        again.load_state_dict(state)
        assert head + pairs(again) == whole, stop_after


# ---- upsampling, stop rules, counts ---------------------------------------------------

def test_upsampling_small_input_passes_are_permutations(sets):
    ds = sluice.mix([sluice.records(sets["big"]).shuffle(), sluice.records(sets["small"]).shuffle()],
                    [0.5, 0.5], seed=2).batch(100)
    got = pairs(ds)
    assert len(got) == 10010   # never: an epoch is as long as the inputs together
    small = [r for t, r in got if t == 1]
    assert 4500 < len(small) < 5500   # upsampled ~500x
    passes = [small[i:i + 10] for i in range(0, len(small) - 9, 10)]
    assert all(sorted(p) == list(range(10)) for p in passes)   # each pass: every record once
    assert len({tuple(p) for p in passes}) > len(passes) // 2   # a new shuffle per pass
    big = [r for t, r in got if t == 0]
    assert len(set(big)) == len(big)   # the big input is not repeated within the epoch


@pytest.mark.parametrize("schedule", ["random", "exact"])
def test_stop_rules(sets, schedule):
    def run(stop):
        return pairs(sluice.mix([sluice.records(sets["big"]).shuffle(),
                                 sluice.records(sets["small"]).shuffle()],
                                [0.5, 0.5], seed=4, stop=stop, schedule=schedule).batch(32))
    first = run("first_exhausted")
    assert sum(1 for t, _ in first if t == 1) == 10
    assert len(first) < 60   # ended when the small input ran out
    every = run("all_exhausted")
    assert len(every) == 10010
    assert sorted(every) == sorted([(0, i) for i in range(10000)] + [(1, i) for i in range(10)])
    assert every[-100:] == [(0, r) for _, r in every[-100:]]   # the tail: the big one alone
    ds = sluice.mix([sluice.records(sets["big"]), sluice.records(sets["small"])], seed=4,
                    stop="first_exhausted", schedule=schedule).batch(32)
    assert len(pairs(ds)) <= 10010


@pytest.mark.parametrize("schedule", ["random", "exact"])
def test_weights_as_samples_per_epoch(sets, schedule):
    ds = sluice.mix([sluice.records(sets["big"]).shuffle(), sluice.records(sets["small"]).shuffle()],
                    [{"samples": 1000}, {"samples": 25}], seed=9, schedule=schedule).batch(100)
    got = pairs(ds)
    assert len(got) == 1025 and len(ds) == 11
    assert sum(1 for t, _ in got if t == 1) == 25
    assert len({r for t, r in got if t == 0}) == 1000


# ---- ranks ------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["random", "exact"])
def test_ranks_disjoint_equal_complete(sets, schedule):
    world = 3
    per_rank = []
    for rank in range(world):
        ds = sluice.mix([sluice.records(sets["big"]).shuffle(), sluice.records(sets["mid"])],
                        [0.6, 0.4], seed=1, schedule=schedule, stop="all_exhausted")
        per_rank.append(pairs(ds.shard(rank, world, equal="drop").batch(50)))
    assert len({len(r) for r in per_rank}) == 1   # equal
    seen = [set(r) for r in per_rank]
    for a in range(world):
        for b in range(a + 1, world):
            assert not seen[a] & seen[b]   # disjoint
    union = set().union(*seen)
    # complete: all of mid (3000 = 3 x 1000); of big's 10,000, 9,999 (drop: the one that does
    # not divide, a different one each epoch as the shuffle comes before the shard)
    assert {r for t, r in union if t == 2} == set(range(3000))
    assert len({r for t, r in union if t == 0}) == 9999
    # every rank has the same blend of inputs, position by position
    assert len({tuple(t for t, _ in r) for r in per_rank}) == 1


# ---- schema and spec errors -------------------------------------------------------------

def test_schema_mismatch_names_both_inputs_and_column(sets):
    other = write(os.path.join(sets["dir"], "wide.slr"), 5, 3, width=3)
    ds = sluice.mix([sluice.records(sets["big"]), sluice.records(other)]).batch(4)
    with pytest.raises(sluice.InvalidError) as e:
        next(iter(ds))
    msg = str(e.value)
    assert "big.slr" in msg and "wide.slr" in msg and "'x'" in msg, msg
    ds = sluice.mix([sluice.records(sets["big"]), sluice.synthetic(records=5)])
    with pytest.raises(sluice.InvalidError, match=r"inputs\[1\].*no column 'x'"):
        ds.columns


def test_mix_argument_and_spec_errors(sets):
    a, b = sluice.records(sets["big"]), sluice.records(sets["small"])
    with pytest.raises(ValueError, match="weights"):
        sluice.mix([a, b], [1.0])
    with pytest.raises(ValueError, match="stop"):
        sluice.mix([a, b], stop="never_ever")
    with pytest.raises(sluice.InvalidError, match=r"inputs\[0\]\.ops\[0\]: 'batch' is not a "
                                                  r"per-sample op"):
        sluice.mix([a.batch(2), b])
    with pytest.raises(sluice.InvalidError, match="shuffle each"):
        sluice.mix([a, b]).shuffle().columns
    bad = {"source": {"kind": "mix", "inputs": [{"path": sets["big"]}, {"path": sets["small"]}],
                      "weights": [1, {"samples": 3}]}}
    with pytest.raises(sluice.InvalidError, match="not both"):
        sluice.from_spec(bad).columns
    bad = {"source": {"kind": "mix", "inputs": [{"path": sets["big"], "shard": "env"}]}}
    with pytest.raises(sluice.InvalidError, match=r"inputs\[0\]\.shard"):
        sluice.from_spec(bad).columns


def test_spec_round_trip_and_cli(sets, tmp_path):
    ds = sluice.mix([sluice.records(sets["big"]).shuffle(), sluice.records(sets["small"])],
                    [0.7, 0.3], seed=6, schedule="exact", source_column="src").batch(100)
    spec = json.loads(ds.to_json())
    assert spec["source"]["kind"] == "mix" and spec["source"]["schedule"] == "exact"
    again = sluice.from_spec(json.loads(json.dumps(spec)))
    assert pairs(again) == pairs(ds)
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(spec))
    cli = os.environ.get("SLUICE_BIN") or os.path.join(REPO, "build", "sluice")
    if not os.access(cli, os.X_OK):
        pytest.skip("the sluice command is not built (set SLUICE_BIN)")
    out = subprocess.run([cli, "explain", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "source mix of 2 inputs (schedule exact" in out.stdout
    assert "input 1, share 0.3000: source slr small.slr" in out.stdout
    out = subprocess.run([cli, "bench", str(path), "--json", "--seconds", "0.5"], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, SLUICE_NO_PROGRESS="1"))
    assert out.returncode == 0, out.stderr
    assert '"mix"' in out.stdout and '"share"' in out.stdout


# ---- a mix of three formats --------------------------------------------------------------

def test_slr_webdataset_tfrecord_mix(tmp_path):
    pytest.importorskip("crc32c")
    pytest.importorskip("google.protobuf")
    pytest.importorskip("PIL.Image")
    import test_sources as ts
    pb = ts.tf_messages(tmp_path)
    tf_paths, tf_rows, _ = ts.write_tfrecords(pb, str(tmp_path))
    shards, samples = ts.write_shards(str(tmp_path))
    slr = str(tmp_path / "packed.slr")
    sluice.pack(shards, slr)
    tf = sluice.tfrecord(tf_paths, features={"image/encoded": "jpg", "image/class/label": "cls"})
    inputs = [sluice.records(slr).shuffle(), sluice.webdataset(shards).shuffle(), tf.shuffle()]
    ds = sluice.mix(inputs, [0.5, 0.25, 0.25], seed=8, columns=["jpg", "cls"],
                    source_column="src")
    assert ds.columns == ["jpg", "cls", "src"]
    want = {0: [(s["jpg"], s["cls"]) for s in samples],
            1: [(s["jpg"], s["cls"]) for s in samples],
            2: [(r["image/encoded"], r["image/class/label"]) for r in tf_rows]}
    n = 0
    for s in ds:
        k = int(s["src"])
        assert (np.asarray(s["jpg"]).tobytes(), int(s["cls"])) in want[k]
        n += 1
    assert n == 2 * len(samples) + len(tf_rows)
    # decoded and batched like any source
    imgs = ds.decode("jpg").resize("jpg", (16, 16)).batch(8)
    assert sum(len(b["cls"]) for b in imgs) == n


# ---- per-input ops ------------------------------------------------------------------------

def photos(path, n, lo, hi, tag, seed):
    """An .slr of n JPEGs of random sizes in [lo, hi) and label tag*1000 + i."""
    import io
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(seed)
    with sluice.Writer(str(path), [("jpg", "bytes"), ("label", "int64")], fsync=False) as w:
        for i in range(n):
            h, wd = (int(v) for v in rng.integers(lo, hi, size=2))
            img = (rng.random((h, wd, 3)) * 255).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, "JPEG", quality=90)
            w.append({"jpg": buf.getvalue(), "label": tag * 1000 + i})
    return str(path)


@pytest.fixture(scope="module")
def photo_sets(tmp_path_factory):
    d = tmp_path_factory.mktemp("mixops")
    return photos(d / "a.slr", 60, 40, 120, 0, 1), photos(d / "b.slr", 45, 80, 160, 1, 2)


def photo_inputs(photo_sets):
    a, b = photo_sets
    return [sluice.records(a).shuffle().decode("jpg").resize("jpg", (64, 64)),
            sluice.records(b).shuffle().decode("jpg").center_crop("jpg", 72)
            .resize("jpg", (64, 64))]


def photo_mix(photo_sets, parallel):
    ds = sluice.mix(photo_inputs(photo_sets), [0.6, 0.4], seed=4, source_column="src")
    spec = ds.spec
    spec["source"]["parallel"] = parallel
    spec["ops"] = [{"op": "flip", "column": "jpg", "p": 0.5}, {"op": "batch", "size": 8}]
    return sluice.from_spec(spec)


def photo_samples(ds, it=None):
    out = []
    for b in (it if it is not None else ds):
        for img, lab, src in zip(np.asarray(b["jpg"]), np.asarray(b["label"]),
                                 np.asarray(b["src"])):
            out.append((int(src), int(lab), img.tobytes()))
    return out


def test_per_input_ops_equal_each_inputs_own_pipeline(photo_sets):
    # each input's samples, by label, from its own pipeline with its ops
    own = {}
    for k, inp in enumerate(photo_inputs(photo_sets)):
        for s in inp:
            own[(k, int(s["label"]))] = np.asarray(s["jpg"])
    ds = sluice.mix(photo_inputs(photo_sets), [0.6, 0.4], seed=4, source_column="src").batch(8)
    assert ds.columns == ["jpg", "label", "src"]
    assert ("mix inputs' ops: input 0: decode, resize (running as decode_resize); input 1: "
            "decode, center_crop, resize") in ds.explain()
    n = 0
    for b in ds:
        assert np.asarray(b["jpg"]).shape[1:] == (64, 64, 3)
        for img, lab, src in zip(np.asarray(b["jpg"]), np.asarray(b["label"]),
                                 np.asarray(b["src"])):
            assert int(lab) // 1000 == int(src)
            assert np.array_equal(own[(int(src), int(lab))], img), (src, lab)
            n += 1
    assert n == 105
    # with a random op on the blend: the same bytes for 1, 2 and 5 readers,
    # and across a mid-epoch resume
    want = photo_samples(photo_mix(photo_sets, 1))
    assert len(want) == 105
    flipped = sum(not np.array_equal(own[(k, lab)], np.frombuffer(img, np.uint8)
                                     .reshape(64, 64, 3)) for k, lab, img in want)
    assert 0 < flipped < 105
    for parallel in (2, 5):
        assert photo_samples(photo_mix(photo_sets, parallel)) == want, parallel
    for stop_after in (1, 6):
        ds = photo_mix(photo_sets, 3)
        it = iter(ds)
        head = photo_samples(ds, [next(it) for _ in range(stop_after)])
        state = ds.state_dict()
        ds.close()
        again = photo_mix(photo_sets, 2)
        again.load_state_dict(state)
        assert head + photo_samples(again) == want, stop_after


def test_per_input_filter_and_spec_round_trip(photo_sets):
    a, b = photo_sets
    keep = list(range(0, 60, 3))
    ia = sluice.records(a).filter("label", keep).decode("jpg").resize("jpg", (32, 32))
    ib = sluice.records(b).decode("jpg").resize("jpg", (32, 32))
    ds = sluice.mix([ia, ib], stop="all_exhausted", source_column="src").batch(10)
    batches = [(np.asarray(bt["src"]), np.asarray(bt["label"]), np.asarray(bt["jpg"]).tobytes())
               for bt in ds]
    got = sorted((int(s), int(l)) for src, lab, _ in batches for s, l in zip(src, lab))
    assert got == sorted([(0, i) for i in keep] + [(1, 1000 + i) for i in range(45)])
    spec = json.loads(ds.to_json())
    assert [o["op"] for o in spec["source"]["inputs"][0]["ops"]] == ["filter", "decode", "resize"]
    again = sluice.from_spec(spec)
    assert [np.asarray(x["jpg"]).tobytes() for x in again] == [img for _, _, img in batches]


def test_per_input_ops_mismatch_and_stream_ops_refused(photo_sets):
    a, b = photo_sets
    ds = sluice.mix([sluice.records(a).decode("jpg").resize("jpg", (64, 64)),
                     sluice.records(b).decode("jpg").resize("jpg", (32, 32))]).batch(4)
    with pytest.raises(sluice.InvalidError) as e:
        next(iter(ds))
    msg = str(e.value)
    assert "a.slr" in msg and "b.slr" in msg and "'jpg'" in msg and "after their ops" in msg, msg
    assert "[64x64x3] vs [32x32x3]" in msg, msg
    # one input decoded, the other not: refused too
    ds = sluice.mix([sluice.records(a).decode("jpg"), sluice.records(b)])
    with pytest.raises(sluice.InvalidError, match="'jpg' after their ops: decoded vs encoded"):
        ds.columns
    for op in ({"op": "batch", "size": 2}, {"op": "take", "count": 3},
               {"op": "shuffle_buffer", "size": 8}, {"op": "repeat", "count": 2}):
        spec = {"source": {"kind": "mix", "inputs": [{"path": a, "ops": [op]}, {"path": b}]}}
        with pytest.raises(sluice.InvalidError,
                           match=r"source\.inputs\[0\]\.ops\[0\]: '%s' is not a per-sample op"
                           % op["op"]):
            sluice.from_spec(spec).columns
    spec = {"source": {"kind": "mix", "inputs": [{"path": a, "ops": [{"op": "resize",
                                                                      "column": "jpg"}]}]}}
    with pytest.raises(sluice.InvalidError, match=r"source\.inputs\[0\]\.ops\[0\]\.size"):
        sluice.from_spec(spec).columns
    with pytest.raises(ValueError, match="Python function"):
        sluice.mix([sluice.records(a).map(lambda s: s), sluice.records(b)])


def test_per_input_op_failure_names_input_file_and_record(tmp_path, photo_sets):
    a, _ = photo_sets
    bad = tmp_path / "bad.slr"
    with sluice.Writer(str(bad), [("jpg", "bytes"), ("label", "int64")], fsync=False) as w:
        w.append({"jpg": b"not a jpeg at all", "label": 1000})
    ds = sluice.mix([sluice.records(a).decode("jpg").resize("jpg", (16, 16)),
                     sluice.records(str(bad)).decode("jpg").resize("jpg", (16, 16))],
                    stop="all_exhausted").batch(4)
    with pytest.raises(sluice.Error) as e:
        for _ in ds:
            pass
    msg = str(e.value)
    assert "bad.slr" in msg and "record 0" in msg and "source.inputs[1].ops[0] (decode" in msg, msg
    spec = ds.spec
    spec["on_error"] = "skip"
    ds = sluice.from_spec(spec)
    assert sum(len(b["label"]) for b in ds) == 60   # every good sample, the bad one counted
    assert ds.stats()["skipped"] == 1


def test_per_input_random_ops_draw_apart_from_the_blends(photo_sets):
    """A flip in an input and the same flip on the blend draw from different
    generators (docs/PIPELINE.md: positions 2^30 + 2^16 k + j): the samples
    they flip differ; each is the same on a second run."""
    a, _ = photo_sets

    def flipped(where):
        inp = sluice.records(a).decode("jpg").resize("jpg", (16, 16))
        plain = {int(s["label"]): np.asarray(s["jpg"]) for s in inp}
        if where == "input":
            ds = sluice.mix([inp.flip("jpg", 0.5)], seed=9)
        else:
            ds = sluice.mix([inp], seed=9).flip("jpg", 0.5)
        return sorted(int(s["label"]) for s in ds
                      if not np.array_equal(np.asarray(s["jpg"]), plain[int(s["label"])]))
    in_input, on_blend = flipped("input"), flipped("blend")
    assert 0 < len(in_input) < 60 and 0 < len(on_blend) < 60
    assert in_input != on_blend
    assert flipped("input") == in_input


def test_default_weights_are_equal_shares(sets):
    ds = sluice.mix([sluice.records(sets["big"]), sluice.records(sets["small"])]).batch(10)
    next(iter(ds))
    mix = ds.stats()["mix"]
    assert [e["weight"] for e in mix["inputs"]] == [0.5, 0.5]
    assert [e["expected_samples"] for e in mix["inputs"]] == [5005, 5005]
    assert "input 1, share 0.5000" in ds.explain()
