#!/usr/bin/env bash
# Remote .slr against local: the ImageNet-style training pipeline reading the
# same sharded .slr dataset
#   local      from the local file system (page cache warm)
#   http       from nginx on localhost, shard cache off (SLUICE_CACHE_BYTES=0:
#              records read by range requests, read ahead in the shuffle's order)
#   proxy0     the same through tests/remote/delayproxy.c adding nothing: what
#              the proxy itself costs (one C thread copying bytes; it stands in
#              for network latency because netem is not available here, and
#              httpfix.py's Python proxy cost so much CPU on 2 cores that the
#              proxy alone, adding nothing, took 0.60x of local)
#   http+20ms  the same through delayproxy holding every request 20 ms;
#              "latency hidden" is http+20ms / proxy0: the same proxy, so the
#              ratio is what read-ahead leaves of the 20 ms
#   warm       from nginx with the shard cache already holding every shard
# Each run is `sluice run SPEC` of EPOCHS epochs, timed whole (start, HEADs,
# fetches, every batch); samples/s = records * epochs / seconds; CPU s =
# the run's user + system time (sluice alone: not nginx's, nor the proxy's).
# The proxies count the requests they passed (printed at the end). Runs are
# interleaved (local, http, proxy0, http+20ms, warm, then again) and medians compared
# as ratios to local.
#
#   bench/remote_bench.sh [BUILD] [REPEATS] [PHOTOS] [EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
DATA=${3:-data/photos/imagenet-like}
EPOCHS=${4:-2}
case $BUILD in /*) SLUICE=$BUILD/sluice ;; *) SLUICE=$PWD/$BUILD/sluice ;; esac
PY=/usr/bin/python3
# shellcheck source=bench/bench_lib.sh
. bench/bench_lib.sh
bench_need_photos "$DATA"
W=$(mktemp -d)
trap 'bench_stop_servers; rm -rf "$W"' EXIT
median() { bench_median; }
now() { date +%s.%N; }

bench_machine
mkdir -p "$W/root"
"$SLUICE" pack "$DATA" "$W/root/train" --shard-size 16M >/dev/null
N=$("$SLUICE" info "$W/root/train" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["records"])')
echo "data: $DATA, $N records in $(ls "$W/root/train" | grep -c slr) shards ($(du -sh "$W/root/train" | cut -f1))"

cc -O2 -Wall -Wextra -Werror -o "$W/delayproxy" tests/remote/delayproxy.c
# nginx, and tests/remote/delayproxy.c in front of it adding 0 and 20 ms a request
bench_serve plain "$W/root" "$W" --delayproxy "$W/delayproxy:0" --delayproxy "$W/delayproxy:20"
U=$(sed -n 1p "$W/plain.url" | cut -d' ' -f1)
UP=$(sed -n 2p "$W/plain.url")
UD=$(sed -n 3p "$W/plain.url")

spec() { bench_train_spec "{\"path\": \"$1\", \"shuffle\": true}" image label "$EPOCHS"; }
spec "$W/root/train" >"$W/local.json"
spec "$U/train" >"$W/http.json"
spec "$UP/train" >"$W/proxy.json"
spec "$UD/train" >"$W/slow.json"
cp "$W/http.json" "$W/warm.json"
export SLUICE_CACHE_DIR="$W/cache"
SLUICE_CACHE_BYTES=64G "$SLUICE" run "$W/warm.json" --epochs 1 >/dev/null  # fill the cache

one() {  # one NAME CACHE_BYTES: samples/s of one run (its CPU seconds into $W/c_NAME)
  local t0 t1
  t0=$(now)
  SLUICE_CACHE_BYTES=$2 /usr/bin/time -f "%U %S" -o "$W/cpu" "$SLUICE" run "$W/$1.json" >/dev/null
  t1=$(now)
  awk '{printf "%.2f\n", $1 + $2}' "$W/cpu" >>"$W/c_$1"
  awk -v n="$N" -v e="$EPOCHS" -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f\n", n*e/(b-a)}'
}
echo
echo "== training pipeline (decode, RRC 224, flip, normalize, batch 64; $EPOCHS epochs a run), samples/s"
for r in $(seq "$REPEATS"); do
  one local 0 >>"$W/r_local"
  one http 0 >>"$W/r_http"
  one proxy 0 >>"$W/r_proxy"
  one slow 0 >>"$W/r_slow"
  one warm 64G >>"$W/r_warm"
  echo "round $r: local $(tail -1 "$W/r_local")  http $(tail -1 "$W/r_http")  proxy0 $(tail -1 "$W/r_proxy")  http+20ms $(tail -1 "$W/r_slow")  warm $(tail -1 "$W/r_warm")"
done
ml=$(median <"$W/r_local")
ratio() { awk -v a="$1" -v b="$ml" 'BEGIN{printf "%.3f", a/b}'; }
mh=$(median <"$W/r_http"); mp=$(median <"$W/r_proxy"); md=$(median <"$W/r_slow"); mw=$(median <"$W/r_warm")
echo "median: local $ml  http $mh ($(ratio "$mh")x)  proxy0 $mp ($(ratio "$mp")x)  http+20ms $md ($(ratio "$md")x)  warm cache $mw ($(ratio "$mw")x)"
echo "latency hidden: http+20ms / proxy0 = $(awk -v a="$md" -v b="$mp" 'BEGIN{printf "%.3f", a/b}')x"
echo "CPU s a run (user+sys of sluice), median: local $(median <"$W/c_local")  http $(median <"$W/c_http")  proxy0 $(median <"$W/c_proxy")  http+20ms $(median <"$W/c_slow")  warm $(median <"$W/c_warm")"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
kill -TERM "$(cat "$W/plain.pid")"  # the proxies stop and print their counts
wait "$(cat "$W/plain.pid")" 2>/dev/null || true
grep '^delayproxy' "$W/plain.log"
