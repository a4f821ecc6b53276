#!/usr/bin/env bash
# sluice explain --params: the keys a spec takes, printed from the parameter
# tables that check them (so the list cannot drift from what is accepted).
. "$(dirname "$0")/common.bash"

run 0 "$SLUICE" explain --params
# every section, and keys from each level: spec, source, a source kind, device
for want in "spec (a JSON object):" "source.shuffle (an object):" "source.shard (an object):" \
    'source with "tfrecord":' 'source with "webdataset":' 'device: "cuda", "host" or an object:' \
    "  memory_limit " "  max_open_shards " "  normalize_on_device " "  compression "; do
    has "$OUT" "$want"
done
# the same fragment documents index and max_open_shards for tar and TFRecord
[ "$(grep -c '^  max_open_shards ' "$OUT")" = 3 ] || fail "max_open_shards not listed for .slr, tar and TFRecord"
has "$OUT" '  index              bool, default "auto": "auto", true or false.'
has "$OUT" '  chunk              int: a whole number from 1 to 256.'
# each key the spec accepts is listed
for key in seed epochs on_error deterministic vectorize read_rows parallel_collate cache_bytes; do
    grep -q "^  $key " "$OUT" || fail "spec key $key not listed"
done
printf '{"source": {"path": "x"}, "epoch": 2}' >"$T/bad.json"
run 1 "$SLUICE" explain "$T/bad.json"
has "$ERR" "epoch: unknown key (keys: epochs, "
run 2 "$SLUICE" explain
finish
