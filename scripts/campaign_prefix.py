"""The check the interruption campaigns (scripts/campaign_kill9.sh,
scripts/campaign_killint.sh) make of a salvaged dataset: its records are the
reference pack's first K, frame for frame, and it says it is salvaged.

    /usr/bin/python3 scripts/campaign_prefix.py REF_INFO.json OUT_INFO.json

REF_INFO and OUT_INFO are `sluice info --json` of the clean pack and of the
output of `sluice recover`. Checked: the columns are the reference's; the
metadata is the reference's but for "salvaged" (which must be there: records
= OUT's, planned = the reference's records, or null only when every record
was kept) and "classes" (a prefix of the reference's: the classes the kept
records reach); OUT's K records are the reference's first K, compared as
whole frames (length, checksum seeded with the record number, payload:
docs/FORMAT.md sections 4.1, 6.1 and 7 locate them). Exits 1 with one line
saying what differs."""
import json
import struct
import sys


def frames(info):
    """(path, start, end) of each shard's data region, and each record's frame size."""
    regions, sizes = [], []
    for path in info["shards"]:
        with open(path, "rb") as f:
            header_bytes = struct.unpack("<I", f.read(16)[12:16])[0]
            f.seek(-64, 2)
            index_offset, _, count, _ = struct.unpack("<4Q", f.read(32))
            f.seek(index_offset)
            ent = f.read(24 * count)
        lens = [16 + struct.unpack_from("<Q", ent, 24 * i + 8)[0] for i in range(count)]
        if header_bytes + sum(lens) != index_offset:
            sys.exit(f"{path}: frames do not tile the data region")
        regions.append((path, header_bytes, index_offset))
        sizes += lens
    return regions, sizes


def stream(regions):
    for path, start, end in regions:
        with open(path, "rb") as f:
            f.seek(start)
            left = end - start
            while left:
                b = f.read(min(left, 1 << 20))
                left -= len(b)
                yield b


def main(ref_path, out_path):
    ref, out = (json.load(open(p)) for p in (ref_path, out_path))
    if ref["columns"] != out["columns"]:
        sys.exit(f"columns differ: {out['columns']} vs the reference's {ref['columns']}")
    rm, om = dict(ref["metadata"]), dict(out["metadata"])
    sv = om.pop("salvaged", None)
    if not isinstance(sv, dict) or sv.get("records") != out["records"]:
        sys.exit(f"the output is not marked as salvaged with its {out['records']} records: {sv}")
    if sv.get("planned") != ref["records"] and not (sv.get("planned") is None and
                                                    out["records"] == ref["records"]):
        sys.exit(f"salvaged says {sv.get('planned')} records were planned, the pack had "
                 f"{ref['records']}")
    rc, oc = rm.pop("classes", None), om.pop("classes", None)
    if (rc is None) != (oc is None) or (oc is not None and (not oc or oc != rc[:len(oc)])):
        sys.exit(f"classes {oc} are not a prefix of the reference's {rc}")
    if rm != om:
        sys.exit(f"metadata differ: {om} vs the reference's {rm}")
    (rreg, rsizes), (oreg, osizes) = frames(ref), frames(out)
    k = len(osizes)
    if k != out["records"] or k > len(rsizes) or osizes != rsizes[:k]:
        sys.exit(f"{k} records whose sizes are not the reference's first {k}")
    pos, rs = 0, stream(rreg)
    pending = b""
    for chunk in stream(oreg):
        while len(pending) < len(chunk):
            pending += next(rs)
        if pending[:len(chunk)] != chunk:
            i = 0
            while chunk[i] == pending[i]:
                i += 1
            at, rec = pos + i, 0
            while at >= rsizes[rec]:
                at -= rsizes[rec]
                rec += 1
            sys.exit(f"record {rec} differs from the reference's record {rec}")
        pending = pending[len(chunk):]
        pos += len(chunk)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
