#!/usr/bin/env bash
# libsluice.so exports the API of include/sluice.h and nothing else: no
# internal sl__* function (fault injection included), and every exported
# name is declared in the header (src/sluice.map; rule R8).
. "$(dirname "$0")/common.bash"

LIB=$(dirname "$SLUICE")/libsluice.so
HDR=$(cd "$(dirname "$0")/../../include" && pwd)/sluice.h
[ -f "$LIB" ] || { fail "no $LIB next to the sluice binary"; finish; }
nm -D --defined-only "$LIB" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed 's/@.*//' | sort -u >"$T/exports"
[ -s "$T/exports" ] || fail "nm found no exported symbols in $LIB"
grep '^sl__' "$T/exports" >"$T/internal" && fail "internal symbols exported: $(tr '\n' ' ' <"$T/internal")"
while read -r sym; do
    case $sym in
        sl_*) grep -qE "\\b$sym\\b" "$HDR" || fail "$sym is exported but not declared in sluice.h" ;;
        *) fail "$sym is exported but is not an sl_ name" ;;
    esac
done <"$T/exports"
grep -q '^sl_reader_open$' "$T/exports" || fail "sl_reader_open is not exported"
finish
