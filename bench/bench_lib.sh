# bench_lib.sh — what the bench shell scripts share (sourced, not run):
# the machine line, medians and ratios, the training chain's spec, and real
# servers on localhost.

# The machine and its load, the line every figure is reported with.
bench_machine() {
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# The median of the numbers on stdin, one a line.
bench_median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# bench_ratio A B: A/B with two decimals.
bench_ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }

# bench_train_spec SOURCE_JSON [IMAGE_COL [LABEL_COL [EPOCHS]]] > file: the
# training chain the source comparisons run (decode, RandomResizedCrop 224,
# flip, normalize to CHW float32, the image and label selected, batch 64,
# prefetch 4) over SOURCE_JSON, seed 0, one epoch unless EPOCHS.
bench_train_spec() {
  local im=${2:-image} lb=${3:-label} ep=${4:-1}
  cat <<JSON
{"source": $1, "seed": 0, "epochs": $ep, "ops": [
  {"op": "decode", "column": "$im"},
  {"op": "random_resized_crop", "column": "$im", "size": [224, 224]},
  {"op": "flip", "column": "$im", "p": 0.5},
  {"op": "normalize", "column": "$im", "mean": [0.485, 0.456, 0.406],
   "std": [0.229, 0.224, 0.225], "layout": "chw", "dtype": "float32"},
  {"op": "select", "columns": ["$im", "$lb"]},
  {"op": "batch", "size": 64}, {"op": "prefetch", "depth": 4}]}
JSON
}

# bench_serve NAME ROOT DIR [httpfix.py serve options...]: nginx on a free
# localhost port serving ROOT (tests/remote/httpfix.py), with any proxies
# its options ask for; their URLs in DIR/NAME.url, one a line, the server's
# pid in DIR/NAME.pid. The servers run until bench_stop_servers (or the
# script's end: their input is a pipe the script holds).
BENCH_SERVER_PIDS=()
bench_serve() {
  local name=$1 root=$2 dir=$3 fd
  shift 3
  mkfifo "$dir/$name.in"
  /usr/bin/python3 tests/remote/httpfix.py serve "$root" "$@" <"$dir/$name.in" >"$dir/$name.url" \
    2>"$dir/$name.log" &
  BENCH_SERVER_PIDS+=($!)
  echo $! >"$dir/$name.pid"
  exec {fd}>"$dir/$name.in"  # held open: the servers run until the script ends
  for _ in $(seq 100); do [ -s "$dir/$name.url" ] && break; sleep 0.1; done
  [ -s "$dir/$name.url" ] || { echo "servers did not start: $(cat "$dir/$name.log")" >&2; return 1; }
}

bench_stop_servers() {
  local p
  for p in "${BENCH_SERVER_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
}

# bench_need_photos DIR: stop with what to do when the photo set DIR is missing.
bench_need_photos() {
  [ -d "$1" ] || { echo "no photos at $1: make them with /usr/bin/python3 bench/make_photos.py" \
    "--root $(dirname "$1")" >&2; exit 1; }
}
