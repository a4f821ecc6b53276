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
