"""Python and the `sluice` command drive the same engine: a spec built in
Python runs in the CLI, a state saved by one resumes in the other, and
stats() has the fields of `sluice bench --json`."""
import json
import os
import subprocess

import numpy as np
import pytest

import sluice
from conftest import REPO


def sluice_bin():
    for p in (os.environ.get("SLUICE_BIN"), os.path.join(REPO, "build", "sluice")):
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip("the sluice command is not built (set SLUICE_BIN)")


def labels_of(batches):
    return [np.array(b["label"]) for b in batches]


def test_cli_state_resumes_in_python(small_slr, tmp_path):
    exe = sluice_bin()
    ds = sluice.records(small_slr).shuffle(seed=11).batch(8)
    spec = tmp_path / "spec.json"
    spec.write_text(ds.to_json())
    state = tmp_path / "state.json"
    subprocess.run([exe, "run", str(spec), "--stop-after", "4", "--save-state", str(state)],
                   check=True, capture_output=True)
    full = labels_of(sluice.from_spec(str(spec)).numpy())
    resumed = sluice.from_spec(str(spec))
    resumed.load_state_dict(json.loads(state.read_text()))
    tail = labels_of(resumed.numpy())
    assert len(tail) == len(full) - 4
    for a, b in zip(tail, full[4:]):
        np.testing.assert_array_equal(a, b)


def test_python_state_resumes_in_cli(small_slr, tmp_path):
    exe = sluice_bin()
    ds = sluice.records(small_slr).shuffle(seed=2).batch(10)
    spec = tmp_path / "spec.json"
    spec.write_text(ds.to_json())
    it = iter(ds.numpy())
    for _ in range(6):
        next(it)
    (tmp_path / "state.json").write_text(json.dumps(ds.state_dict()))
    out = subprocess.run([exe, "run", str(spec), "--resume", str(tmp_path / "state.json"),
                          "--digest"], check=True, capture_output=True, text=True).stdout
    lines = [ln for ln in out.splitlines() if ln[:1].isdigit() and ":" in ln]
    assert len(lines) == 4  # batches 6..9 of 10
    assert lines[0].startswith("0:6")


def test_stats_match_sluice_bench_fields(small_slr, tmp_path):
    exe = sluice_bin()
    ds = sluice.records(small_slr).batch(10)
    spec = tmp_path / "spec.json"
    spec.write_text(ds.to_json())
    for _ in ds.numpy():
        pass
    mine = ds.stats()
    out = subprocess.run([exe, "bench", str(spec), "--seconds", "0.2", "--json"], check=True,
                         capture_output=True, text=True).stdout
    theirs = json.loads(out.splitlines()[0])
    # the throughput timeline is the bench's own (samples/s per step of its run)
    bench_only = {"timeline", "timeline_step_s", "timeline_workers"}
    assert set(theirs) - bench_only <= set(mine), set(theirs) - bench_only - set(mine)
    assert set(theirs["stages"][0]) == set(mine["stages"][0])
    assert mine["verdict"] and mine["bound"] in ("F", "P", "G", "?")
