#!/usr/bin/env python3
"""Markdown table of bench/peers/run.py output (one JSON object per line):
loader, samples/s, x sluice (the loader's rate over sluice's), peak RSS,
CPU per sample, threads, version; a row that did not run shows its reason.

    PY bench/peers/run.py ... --json > train.jsonl
    python3 bench/peers/table.py train.jsonl
"""
import json
import sys


def main():
    rows = []
    for path in sys.argv[1:] or ["-"]:
        with (sys.stdin if path == "-" else open(path)) as f:
            rows += [json.loads(l) for l in f if l.strip().startswith("{")]
    base = next((r["samples_per_s"] for r in rows if r["loader"] == "sluice"), None)
    print("| loader | samples/s | sluice ÷ loader | peak RSS MB | CPU ms/sample | threads | version |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        rate = r["samples_per_s"]
        if rate is None:
            print(f"| {r['loader']} | — | — | — | — | — | {r['note']} |")
            continue
        ratio = f"{base / rate:.2f}×" if base else "—"
        cpu = r["cpu_s_per_sample"] * 1000
        print(f"| {r['loader']} | {rate:,.0f} | {ratio} | {r['peak_rss_mb']:,.0f} | "
              f"{cpu:.3g} | {r['threads']} | {r['version']} |")


if __name__ == "__main__":
    main()
