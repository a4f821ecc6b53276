#!/usr/bin/python3
"""Foundation benchmarks of the record layer, each side by side with its peer in one run.

  /usr/bin/python3 bench/foundation.py [--build build-release] [--data data/photos/imagenet-like]
                                       [--repeats 5] [--work /tmp/sluice-bench]

1. read: `sluice scan` (one pass over every record, checksums verified; 1 thread and all
   cores) against `cat SHARDS > /dev/null` of the same, page-cached files. Both are timed
   as whole processes (start-up, open, read, exit), interleaved, medians; ratio = cat
   time / scan time (>= 1 means sluice reads the dataset at least as fast as cat).
2. random access: records/s for uniformly random indices, 1 thread and all cores
   (`sluice scan --random`, as many reads as records).
3. pack: `sluice pack` of the ImageFolder against `tar -cf` of the same folder, page-cached,
   both writing to the same filesystem; MB/s of input and the ratio of times. sluice pack
   makes its output durable (fsync of the file and directory before the rename), so the
   like-for-like peer is `tar -cf` followed by `sync FILE`; plain `tar -cf` is shown too.
Prints a table and one JSON line. Speed is measured here, never asserted in a test.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, time


def run_time(cmd, **kw):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t0


def folder_bytes(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--data", default="data/photos/imagenet-like")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--work", default="/tmp/sluice-bench")
    a = ap.parse_args()
    sluice = os.path.join(a.build, "sluice")
    if not os.path.exists(sluice):
        sys.exit(f"no {sluice}: build first (cmake -S . -B {a.build} -DCMAKE_BUILD_TYPE=Release && cmake --build {a.build})")
    if not os.path.isdir(a.data):
        sys.exit(f"no {a.data}: make it with /usr/bin/python3 bench/make_photos.py --root data/photos")
    ncpu = os.cpu_count()
    os.makedirs(a.work, exist_ok=True)
    slr = os.path.join(a.work, "bench.slr")
    tar = os.path.join(a.work, "bench.tar")
    subprocess.run([sluice, "pack", a.data, slr, "--force"], check=True, stdout=subprocess.DEVNULL)
    info = json.loads(subprocess.run([sluice, "info", slr, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    nrec = info["records"]
    shards = [slr] if os.path.isfile(slr) else sorted(
        os.path.join(slr, f) for f in os.listdir(slr) if f.endswith(".slr"))
    slr_bytes = sum(os.path.getsize(s) for s in shards)
    src_bytes = folder_bytes(a.data)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"machine: {ncpu} cores, {cpu}; load {open('/proc/loadavg').read().split()[:3]}")
    print(f"data: {a.data} ({src_bytes/1e6:.1f} MB, {nrec} records; .slr {slr_bytes/1e6:.1f} MB)")

    # warm the page cache
    for _ in range(2):
        run_time(["cat", *shards])
        run_time(["tar", "-cf", "/dev/null", "-C", a.data, "."])

    t = {k: [] for k in ("cat", "scan1", "scanN", "rand1", "randN", "pack", "tar", "tarsync")}
    rnd = {"rand1": [], "randN": []}
    for _ in range(a.repeats):
        t["cat"].append(run_time(["cat", *shards]))
        t["scan1"].append(run_time([sluice, "scan", slr, "--threads", "1"]))
        t["scanN"].append(run_time([sluice, "scan", slr, "--threads", str(ncpu)]))
        for key, th in (("rand1", 1), ("randN", ncpu)):
            out = subprocess.run([sluice, "scan", slr, "--random", "--threads", str(th), "--json"],
                                 check=True, capture_output=True, text=True).stdout
            rnd[key].append(json.loads(out)["records_per_s"])
        t["pack"].append(run_time([sluice, "pack", a.data, os.path.join(a.work, "p.slr"), "--force"]))
        t["tar"].append(run_time(["tar", "-cf", tar, "-C", a.data, "."]))
        os.unlink(tar)
        t["tarsync"].append(run_time(["sh", "-c", 'tar -cf "$1" -C "$2" . && sync "$1"', "sh", tar, a.data]))
        os.unlink(tar)
    med = {k: statistics.median(v) for k, v in t.items() if v}
    spread = {k: (min(v), max(v)) for k, v in t.items() if v}
    res = {
        "bench": "foundation", "cores": ncpu, "records": nrec, "slr_mb": slr_bytes / 1e6,
        "cat_s": med["cat"], "scan_1thread_s": med["scan1"], "scan_allcores_s": med["scanN"],
        "read_ratio_1thread": med["cat"] / med["scan1"], "read_ratio_allcores": med["cat"] / med["scanN"],
        "random_records_per_s_1thread": statistics.median(rnd["rand1"]),
        "random_records_per_s_allcores": statistics.median(rnd["randN"]),
        "pack_s": med["pack"], "tar_s": med["tar"], "pack_mb_per_s": src_bytes / 1e6 / med["pack"],
        "tar_mb_per_s": src_bytes / 1e6 / med["tar"], "pack_ratio": med["tar"] / med["pack"],
        "tarsync_s": med["tarsync"], "pack_ratio_vs_tar_sync": med["tarsync"] / med["pack"],
    }
    print(f"\n{'work':<44} {'median':>9} {'spread':>17}")
    for k, label in (("cat", "cat shards > /dev/null"), ("scan1", "sluice scan, 1 thread (checksums)"),
                     ("scanN", f"sluice scan, {ncpu} threads (checksums)"), ("tar", "tar -cf of the folder"), ("tarsync", "tar -cf of the folder + sync FILE"),
                     ("pack", "sluice pack of the folder")):
        lo, hi = spread[k]
        print(f"{label:<44} {med[k]*1e3:>7.1f}ms {lo*1e3:>7.1f}-{hi*1e3:.1f}ms")
    print(f"\nread, sequential: {res['read_ratio_1thread']:.2f}x cat (1 thread), "
          f"{res['read_ratio_allcores']:.2f}x cat ({ncpu} threads)   [target >= 0.8x]")
    print(f"random access: {res['random_records_per_s_1thread']:,.0f} records/s (1 thread), "
          f"{res['random_records_per_s_allcores']:,.0f} records/s ({ncpu} threads)")
    print(f"pack: {res['pack_mb_per_s']:.0f} MB/s vs tar {res['tar_mb_per_s']:.0f} MB/s: "
          f"{res['pack_ratio']:.2f}x tar; {res['pack_ratio_vs_tar_sync']:.2f}x tar + sync (same durability)")
    print(json.dumps(res))
    shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
