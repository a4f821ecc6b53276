#!/usr/bin/env python3
"""Markdown table of bench/peers/run.py output (one JSON object per line):
loader, samples/s, x sluice (the loader's rate over sluice's), peak RSS,
CPU per sample, threads, version; a row that did not run shows its reason.
Rows of --remote-latency-ms get the remote and latency columns, the rate over
the local sluice row's ("of local"), and for a peer, sluice's rate over the
same remote (HTTP or s3://) divided by the peer's ("sluice ÷ loader").

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
    if any("remote" in r for r in rows):
        return remote_table(rows)
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


def remote_table(rows):
    local = next((r["samples_per_s"] for r in rows
                  if r["loader"] == "sluice" and r.get("remote") is None), None)
    same = {r["remote"]: r["samples_per_s"] for r in rows
            if r["loader"] == "sluice" and r.get("remote")}
    print("| loader | remote | latency ms | samples/s | of local | sluice ÷ loader | peak RSS MB | "
          "CPU ms/sample | threads | version |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        rem, lat, rate = r.get("remote"), r.get("latency_ms"), r["samples_per_s"]
        where = f"| {r['loader']} | {rem or 'local'} | {'—' if lat is None else lat} |"
        if rate is None:
            print(f"{where} — | — | — | — | — | — | {r['note']} |")
            continue
        of_local = f"{rate / local:.2f}×" if local else "—"
        peer = r["loader"] not in ("sluice", "sluice-restart")
        ratio = f"{same[rem] / rate:.2f}×" if peer and same.get(rem) else "—"
        print(f"{where} {rate:,.0f} | {of_local} | {ratio} | {r['peak_rss_mb']:,.0f} | "
              f"{r['cpu_s_per_sample'] * 1000:.3g} | {r['threads']} | {r['version']} |")


if __name__ == "__main__":
    main()
