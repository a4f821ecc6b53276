"""Figures one page quotes from another must agree: docs/PYTHON.md's Python
iteration overhead (its "Speed" table) is the run bench/README.md reports
(they disagreed: 2.5% / 5.4% in one, 9.4% / 12.1% in the other)."""
import os
import re

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def read(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


def test_python_overhead_figures_agree():
    bench = read("bench/README.md")
    m = re.search(r"Python iteration overhead\s*\(`[^`]*bench/py_overhead\.py[^`]*--batch 256[^)]*\):"
                  r"\s*numpy ([\d.]+)%, torch ([\d.]+)% below the C consumer\s*\(C ([\d,]+) batches/s",
                  bench, re.S)
    assert m, "bench/README.md: no 'Python iteration overhead ...: numpy X%, torch Y%' paragraph"
    numpy, torch, c = m.group(1), m.group(2), m.group(3)
    py = read("docs/PYTHON.md")
    row = next((l for l in py.splitlines() if l.startswith("| Python iteration overhead")), None)
    assert row, "docs/PYTHON.md: no 'Python iteration overhead' row in its Speed table"
    assert f"numpy {numpy}% / torch {torch}% slower" in row, (row, numpy, torch)
    assert f"C consumer {c} batches/s" in row, (row, c)


def test_transforms_against_native_figures_agree():
    """docs/PYTHON.md quotes the thread loader's ratio to the native pipeline
    with sluice.transforms from bench/README.md's "Both cuts together" table,
    and that ratio is the table's own thread / native figures."""
    bench = read("bench/README.md")
    sec = bench.split("### Both cuts together", 1)
    assert len(sec) == 2, "bench/README.md: no 'Both cuts together' subsection"
    ratios = {}
    for py in ("3.11", "3.13t"):
        row = next((l for l in sec[1].splitlines() if l.startswith(f"| {py} |")), None)
        assert row, f"bench/README.md 'Both cuts together': no {py} row"
        cells = [c.strip() for c in row.strip("|").split("|")]
        thread = int(cells[3].split()[0].replace(",", ""))
        native = int(cells[5].split()[0].replace(",", ""))
        ratio = cells[6].strip("*")
        assert f"{thread / native:.2f}" == ratio, (py, thread, native, ratio)
        ratios[py] = ratio
    doc = " ".join(read("docs/PYTHON.md").split())
    assert (f"{ratios['3.11']}× on 3.11 and {ratios['3.13t']}× on 3.13t" in doc), ratios
