"""The table of SLUICE_* settings seen from Python: a bad value in the
environment fails where the engine is built, with sluice.InvalidError (a
ValueError) worded as a bad parameter is; unset again, the same Dataset
runs."""
import pytest

import sluice


def first_batch(ds):
    for b in ds:
        return b
    return None


@pytest.mark.parametrize("var,value,says", [
    ("SLUICE_HTTP_TRIES", "abc", "a whole number from 1 to 100"),
    ("SLUICE_CACHE_BYTES", "12Q", 'a whole number of bytes >= 0 or a string such as "512M"'),
    ("SLUICE_LOG", "loud", '"error", "warn", "info" or "debug"'),
    ("SLUICE_SIMD", "neon", '"scalar", "sse4.1", "avx2" or "avx512"'),
])
def test_a_bad_environment_value_raises(monkeypatch, var, value, says):
    ds = sluice.synthetic(8).batch(4)
    monkeypatch.setenv(var, value)
    with pytest.raises(sluice.InvalidError) as e:
        first_batch(ds)
    assert isinstance(e.value, ValueError)
    assert f'{var}: must be {says}' in str(e.value), str(e.value)
    assert f'(got "{value}")' in str(e.value), str(e.value)
    monkeypatch.delenv(var)
    assert first_batch(sluice.synthetic(8).batch(4)) is not None


def test_the_wording_is_a_bad_parameters():
    """The same words as a spec's bad value: `KEY: must be RANGE (got V)`."""
    with pytest.raises(sluice.InvalidError) as e:
        first_batch(sluice.Dataset({"source": {"synthetic": {"records": 8}}, "epochs": 0}))
    assert "epochs: must be a whole number >= 1 (got 0)" in str(e.value), str(e.value)


def test_settings_are_sluice_envs_table():
    """_sluice.settings() is `sluice env --json`, row for row (values aside:
    the command's say where a value comes from)."""
    import json
    import os
    import subprocess
    rows = sluice._sluice.settings()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    out = subprocess.run([os.environ.get("SLUICE_BIN", "sluice"), "env", "--json"], env=env,
                         capture_output=True, text=True, check=True).stdout
    keys = ("name", "kind", "type", "range", "default", "layer", "doc")
    assert [tuple(r[k] for k in keys) for r in rows] == \
        [tuple(r[k] for k in keys) for r in json.loads(out)]
    assert {r["kind"] for r in rows} == {"setting", "spec"}


def table():
    return {r["name"]: r for r in sluice._sluice.settings() if r["kind"] == "spec"}


def test_python_defaults_are_the_tables():
    """Every Python argument that stands for a spec parameter defaults to
    the table's default, or to None (the engine's default then)."""
    import inspect
    t = table()
    as_json = {True: "true", False: "false"}
    args = [  # (function, argument, the spec parameter it sets)
        (sluice.Dataset.deterministic, "flag", "deterministic"),
        (sluice.Dataset.shuffle, "seed", "seed"),
        (sluice.Dataset.shuffle, "mode", "source.shuffle.mode"),
        (sluice.Dataset.shuffle, "window", "source.shuffle.window"),
        (sluice.Dataset.shuffle, "block", "source.shuffle.block"),
        (sluice.Dataset.shard, "equal", "source.shard.equal"),
        (sluice.records, "parallel", "source.parallel"),
        (sluice.records, "chunk", "source.chunk"),
        (sluice.synthetic, "parallel", "source.parallel"),
        (sluice.synthetic, "chunk", "source.chunk"),
    ]
    for fn, arg, name in args:
        default = inspect.signature(fn).parameters[arg].default
        if default is None:
            continue
        want = t[name]["default"]
        assert as_json.get(default, default) == want, (fn.__name__, arg, default, want)


@pytest.mark.parametrize("call,name,got", [
    (lambda: sluice.synthetic(4).epochs(0), "epochs", "0"),
    (lambda: sluice.synthetic(4).shuffle(window=0), "source.shuffle.window", "0"),
    (lambda: sluice.synthetic(4).shuffle(seed=-1), "seed", "-1"),
    (lambda: sluice.synthetic(4, chunk=300), "source.chunk", "300"),
    (lambda: sluice.synthetic(4).shard(-1, 2), "source.shard.index", "-1"),
    (lambda: sluice.synthetic(4).memory_limit(0), "memory_limit", None),
    (lambda: sluice.synthetic(4).cache_bytes(-1), "cache_bytes", None),
    (lambda: sluice.synthetic(4).shuffle(mode="local"), "source.shuffle.mode", None),
])
def test_python_checks_are_the_tables(call, name, got):
    """A bad argument raises the engine's message, with the table's range."""
    with pytest.raises(sluice.InvalidError) as e:
        call()
    want = f"{name}: must be {table()[name]['range']}"
    if got is not None:
        want += f" (got {got})"
    assert str(e.value).endswith(want), str(e.value)
