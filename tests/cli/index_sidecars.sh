#!/usr/bin/env bash
# `sluice index DIR/*` after an earlier run: the shell lists each shard's
# sidecar index beside it; the sidecars are left out (their files' indexes are
# rebuilt) and the run succeeds, as every other command leaves them out. It
# exited 1. A sidecar given without its data file is refused, naming it.
. "$(dirname "$0")/common.bash"

mkdir "$T/d"
$PY - "$T/d" <<'PYEOF'
import io, sys, tarfile
for s in range(3):
    with tarfile.open(f"{sys.argv[1]}/s{s}.tar", "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(4):
            for ext, d in (("cls", b"%d" % i), ("bin", bytes([s, i]) * 9)):
                ti = tarfile.TarInfo(f"k{s}{i}.{ext}")
                ti.size = len(d)
                t.addfile(ti, io.BytesIO(d))
PYEOF
run 0 "$SLUICE" index "$T"/d/*
[ "$(ls "$T"/d/*.slidx | wc -l)" = 3 ] || fail "the first run did not index the three shards"
run 0 "$SLUICE" index "$T"/d/*
has "$OUT" "indexed $T/d/s2.tar"
has "$OUT" "left out 3 sidecar indexes listed beside their data files (rebuilt with them)"
run 0 "$SLUICE" index "$T"/d/* --json
[ "$(grep -c '"ok":true' "$OUT")" = 3 ] || fail "--json: $(cat "$OUT")"
grep -q slidx "$OUT" && fail "--json names a sidecar as an input: $(cat "$OUT")"
run 0 "$SLUICE" info "$T"/d/*
run 1 "$SLUICE" index "$T/d/s1.tar.slidx"
has "$ERR" "s1.tar.slidx: a sidecar index"
has "$ERR" "give the file it indexes"
finish
