"""The chainable builder produces the pipeline spec, and checks arguments."""
import json

import pytest

import sluice


def test_chain_builds_the_spec():
    ds = (sluice.records("/data/train.slr")
          .shuffle(seed=7)
          .shard(rank=1, world_size=4)
          .decode("image")
          .random_resized_crop("image", 224)
          .flip("image")
          .normalize("image", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], layout="chw")
          .batch(256)
          .prefetch(4))
    spec = ds.spec
    assert spec["source"] == {"path": "/data/train.slr", "shuffle": True,
                              "shard": {"index": 1, "count": 4}}
    assert spec["seed"] == 7
    assert [o["op"] for o in spec["ops"]] == ["decode", "random_resized_crop", "flip",
                                              "normalize", "batch", "prefetch"]
    assert spec["ops"][5] == {"op": "prefetch", "depth": 4}
    assert spec["ops"][1]["size"] == 224
    assert spec["ops"][0] == {"op": "decode", "column": "image", "mode": "rgb"}
    assert spec["ops"][3]["layout"] == "chw"
    assert spec["ops"][4] == {"op": "batch", "size": 256, "drop_remainder": False}
    assert json.loads(ds.to_json()) == spec


def test_chain_is_immutable():
    base = sluice.records("a.slr")
    shuffled = base.shuffle(seed=1)
    batched = base.batch(8)
    assert "shuffle" not in base.spec["source"]
    assert base.spec["ops"] == []
    assert shuffled.spec["ops"] == []
    assert batched.spec["ops"] == [{"op": "batch", "size": 8, "drop_remainder": False}]


def test_shard_reads_torchrun_env(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert sluice.records("a.slr").shard().spec["source"]["shard"] == {"index": 3, "count": 8}
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    for var in ("SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert sluice.records("a.slr").shard().spec["source"]["shard"] == {"index": 0, "count": 1}


@pytest.mark.parametrize("call, exc, word", [
    (lambda d: d.batch("8"), TypeError, "batch_size"),
    (lambda d: d.batch(0), ValueError, "batch_size"),
    (lambda d: d.batch(True), TypeError, "batch_size"),
    (lambda d: d.shuffle(seed=-1), ValueError, "seed"),
    (lambda d: d.shuffle(seed=1.5), TypeError, "seed"),
    (lambda d: d.shard(rank=4, world_size=4), ValueError, "rank"),
    (lambda d: d.shard(rank=0), TypeError, "shard"),
    (lambda d: d.decode(3), TypeError, "column"),
    (lambda d: d.decode("image", mode="cmyk"), ValueError, "mode"),
    (lambda d: d.resize("image", 256, interpolation="cubic"), ValueError, "interpolation"),
    (lambda d: d.resize("image", (0, 3)), ValueError, "size"),
    (lambda d: d.one_hot("label"), TypeError, "classes"),
    (lambda d: d.random_resized_crop("image", 0), ValueError, "size"),
    (lambda d: d.random_resized_crop("image", "big"), TypeError, "size"),
    (lambda d: d.random_resized_crop("image", 224, scale=(1.0, 0.5)), ValueError, "scale"),
    (lambda d: d.flip("image", p=2), ValueError, "p"),
    (lambda d: d.normalize("image", mean=[0.5], std=[0.0]), ValueError, "std"),
    (lambda d: d.normalize("image", layout="nchw"), ValueError, "layout"),
    (lambda d: d.normalize("image", mean="x"), TypeError, "mean"),
    (lambda d: d.prefetch(0), ValueError, "n"),
    (lambda d: d.on_error("ignore"), ValueError, "on_error"),
    (lambda d: d.decode("image", warnings="loud"), ValueError, r"ops\[0\]\.warnings"),
    (lambda d: d.normalize("image", dtype="int8"), ValueError, r"ops\[0\]\.dtype"),
    (lambda d: d.normalize("image", mean=[0.1] * 5, std=[1] * 5), ValueError, "mean"),
    (lambda d: d.batch(4).resize("image", 9, interpolation="cubic"), ValueError,
     r"ops\[1\]\.interpolation"),
    (lambda d: d.device("tpu"), ValueError, "device.kind"),
    (lambda d: d.map(42), TypeError, "fn"),
    (lambda d: d.set_epoch(-1), ValueError, "epoch"),
    (lambda d: d.load_state_dict([1, 2]), TypeError, "state"),
    (lambda d: d.load_state_dict({"position": 3}), ValueError, "epoch"),
])
def test_bad_arguments_name_the_argument(call, exc, word):
    with pytest.raises(exc, match=word):
        call(sluice.records("a.slr"))


def test_from_spec_dict_json_and_file(tmp_path):
    spec = {"source": {"path": "x.slr"}, "ops": [{"op": "batch", "size": 4}], "seed": 3}
    assert sluice.from_spec(spec).spec == spec
    assert sluice.from_spec(json.dumps(spec)).spec == spec
    p = tmp_path / "spec.json"
    p.write_text(json.dumps(spec))
    # read from a file, a relative path is the file's folder's (as sluice run reads it)
    beside = dict(spec, source={"path": str(tmp_path / "x.slr")})
    assert sluice.from_spec(str(p)).spec == beside
    assert sluice.from_spec(p).spec == beside
    with pytest.raises(ValueError, match="spec"):
        sluice.from_spec("{not json")
    with pytest.raises(TypeError, match="spec"):
        sluice.from_spec(42)


def test_records_source_options():
    assert sluice.records("a.slr", parallel="auto", chunk=64).spec["source"] == {
        "path": "a.slr", "parallel": "auto", "chunk": 64}
    with pytest.raises(ValueError, match="chunk"):
        sluice.records("a.slr", chunk=1000)
    with pytest.raises(TypeError, match="parallel"):
        sluice.records("a.slr", parallel="many")
    with pytest.raises(TypeError, match="path"):
        sluice.records(42)


def test_records_accepts_pathlike(tmp_path):
    assert sluice.records(tmp_path / "a.slr").spec["source"]["path"] == str(tmp_path / "a.slr")
