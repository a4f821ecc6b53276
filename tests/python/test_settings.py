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
