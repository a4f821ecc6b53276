#!/usr/bin/env bash
# s3:// against a real S3-compatible server on localhost: moto's server
# (PyPI moto[server], in a virtual environment) with request authentication
# on, so that every request after the set-up must carry a valid Signature V4
# from a key moto's IAM knows. The client is build/sluice_s3_get
# (tests/io/s3_get/s3_get.c: the signer and helpers of src/io/s3.c over
# libcurl).
#
#   bash tests/io/s3_moto.sh [BUILD_DIR]        (default: build)
#
# Checks: signed GET (whole, Range) and HEAD of keys with spaces, '+', UTF-8,
# '~=&%' and "//", "./", "../" in them (S3 does not normalise paths);
# ListObjectsV2 of a prefix in one page and in pages of 2 (continuation
# tokens); a session token (STS AssumeRole) sent and signed, and refused
# when left out or changed; a wrong secret refused (SignatureDoesNotMatch);
# a missing key is a 404 NoSuchKey; without credentials the request goes
# unsigned (moto refuses it: the bucket is private). Then the HTTP provider
# itself (build/sluice): `sluice run` of a .slr at s3:// (fetched into the
# cache, and read by ranges) and of WebDataset shards named by their s3://
# prefix (ListObjectsV2) gives the local run's batches, every request signed
# and checked; unsigned, a 403 naming the s3:// name. Last, stored checksums:
# shards uploaded with a CRC32C, a SHA-256 or none (then the MD5 ETag),
# read through tests/remote/httpfix.py's proxy flipping one bit of a body:
# caught before the cache, fetched again, the same batches; flipped on every
# fetch, an error naming the s3:// name and both tries.
#
# The venv is kept in ${SLUICE_MOTO_VENV:-~/.cache/sluice-tools/moto-venv} (made on
# first use by tests/io/moto_venv.sh; needs PyPI). Exit 77 when moto cannot be installed.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$REPO/build}
GET=$BUILD/sluice_s3_get
SLUICE=$BUILD/sluice
PY=${PY:-/usr/bin/python3}
fail() { echo "FAIL s3_moto: $*" >&2; [ -f "${LOG:-}" ] && tail -20 "$LOG" >&2; exit 1; }
[ -x "$GET" ] || fail "$GET not built (it needs libcurl: libcurl4-openssl-dev)"

rc=0
VENV=$(bash "$REPO/tests/io/moto_venv.sh" 2>"${TMPDIR:-/tmp}/sluice-moto-venv.$$") || rc=$?
if [ $rc -ne 0 ]; then
  why=$(cat "${TMPDIR:-/tmp}/sluice-moto-venv.$$")
  rm -f "${TMPDIR:-/tmp}/sluice-moto-venv.$$"
  [ $rc -eq 77 ] && { echo "SKIP s3_moto: $why" >&2; exit 77; }
  fail "tests/io/moto_venv.sh failed ($rc): $why"
fi
rm -f "${TMPDIR:-/tmp}/sluice-moto-venv.$$"
MOTO_VERSION=$("$VENV/bin/python" -c 'import moto; print(moto.__version__)')

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-s3.XXXXXX")
LOG=$WORK/moto.log
PID=
PXPID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null
  [ -n "$PXPID" ] && kill "$PXPID" 2>/dev/null || true
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# The first 4 requests (the IAM user, its key, its policy, the bucket) go
# without authentication; every later one is checked.
INITIAL_NO_AUTH_ACTION_COUNT=4 "$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" >"$LOG" 2>&1 &
PID=$!
for _ in $(seq 100); do
  "$PY" -c "import socket; socket.create_connection(('127.0.0.1',$PORT),0.2)" 2>/dev/null && break
  kill -0 "$PID" 2>/dev/null || fail "moto_server did not start"
  sleep 0.1
done
EP=http://127.0.0.1:$PORT

# Data for the provider's checks (section 5): two WebDataset shards and a
# .slr made from them by sluice pack.
"$PY" - "$WORK" <<'PYDATA' || fail "making the datasets failed"
import io, sys, tarfile
w = sys.argv[1]
for s in range(2):
    with tarfile.open(f"{w}/wds-{s:05d}.tar", "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(s * 40, s * 40 + 40):
            for ext, data in (("cls", str(i).encode()), ("bin", bytes((i * 7 + k) % 256 for k in range(300 + i)))):
                ti = tarfile.TarInfo(f"s{i:05d}.{ext}")
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
PYDATA
"$SLUICE" pack "$WORK"/wds-0000{0,1}.tar "$WORK/one.slr" >/dev/null || fail "sluice pack failed"

# Set-up with boto3 (moto's own dependency): the objects, their bytes in
# $WORK/obj/N, and the credentials.
"$VENV/bin/python" - "$EP" "$WORK" <<'EOF' >"$WORK/creds" 2>>"$LOG" || fail "set-up with boto3 failed"
import json, os, random, sys
import boto3
ep, work = sys.argv[1], sys.argv[2]
anon = dict(endpoint_url=ep, region_name="us-east-1",
            aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="unused")
iam = boto3.client("iam", **anon)
iam.create_user(UserName="sluice")
key = iam.create_access_key(UserName="sluice")["AccessKey"]
allow = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
iam.put_user_policy(UserName="sluice", PolicyName="all", PolicyDocument=json.dumps(allow))
boto3.client("s3", **anon).create_bucket(Bucket="sluice-test")
# from here on, signed with the new key
kw = dict(endpoint_url=ep, region_name="us-east-1",
          aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
s3 = boto3.client("s3", **kw)
rng = random.Random(0)
objs = {
    "d/plain.bin": bytes(rng.getrandbits(8) for _ in range(100_000)),
    "d/a b+c.txt": b"hello s3 world",
    "d/\u00fcn\u00ef/~x=y&z%.bin": b"utf-8 and reserved characters",
    "d//double/./dot/../x": b"dots are kept",
}
for i in range(5):
    objs[f"many/{i:02d}"] = b"m" * i
os.makedirs(f"{work}/obj")
with open(f"{work}/keys.tsv", "w") as f:
    for n, (k, v) in enumerate(sorted(objs.items())):
        s3.put_object(Bucket="sluice-test", Key=k, Body=v)
        open(f"{work}/obj/{n}", "wb").write(v)
        f.write(f"{n}\t{k}\t{len(v)}\n")
s3.create_bucket(Bucket="sluice-data")  # section 5's, apart from the listings above
for f in ("wds-00000.tar", "wds-00001.tar", "one.slr"):
    s3.upload_file(f"{work}/{f}", "sluice-data", ("ds/" if f.endswith(".slr") else "wds/") + f)
# section 6's: the shards with a stored CRC32C and SHA-256, and with no
# stored checksum at all (then the single-part upload's MD5 ETag is the check)
from botocore.config import Config
bare = boto3.client("s3", config=Config(request_checksum_calculation="when_required"), **kw)
s3.create_bucket(Bucket="sluice-sums")
def crc32c(b):  # given precomputed (botocore computes CRC32C only with its crt extra)
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF
import base64, hashlib
for f, alg in (("wds-00000.tar", "CRC32C"), ("wds-00001.tar", "SHA256")):
    body = open(f"{work}/{f}", "rb").read()
    val = (crc32c(body).to_bytes(4, "big") if alg == "CRC32C" else hashlib.sha256(body).digest())
    # the header an SDK that computes the checksum sends, by which moto
    # knows the algorithm to store
    c = boto3.client("s3", **kw)
    c.meta.events.register("before-sign.s3.PutObject", lambda request, alg=alg, **_:
                           request.headers.__setitem__("x-amz-sdk-checksum-algorithm", alg))
    c.put_object(Bucket="sluice-sums", Key="sums/" + f, Body=body,
                 **{"Checksum" + alg: base64.b64encode(val).decode()})
    bare.put_object(Bucket="sluice-sums", Key="etag/" + f, Body=open(f"{work}/{f}", "rb").read())
trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                 "Action": "sts:AssumeRole"}]}
iam2 = boto3.client("iam", **kw)
arn = iam2.create_role(RoleName="reader", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
iam2.put_role_policy(RoleName="reader", PolicyName="all", PolicyDocument=json.dumps(allow))
tmp = boto3.client("sts", **kw).assume_role(RoleArn=arn, RoleSessionName="sluice")["Credentials"]
print(key["AccessKeyId"], key["SecretAccessKey"])
print(tmp["AccessKeyId"], tmp["SecretAccessKey"], tmp["SessionToken"])
EOF
{ read -r ID SECRET; read -r TID TSECRET TTOKEN; } <"$WORK/creds"

run() { env -u AWS_SESSION_TOKEN -u AWS_ENDPOINT_URL_S3 -u AWS_S3_ADDRESSING_STYLE \
          AWS_ENDPOINT_URL="$EP" AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID="$ID" \
          AWS_SECRET_ACCESS_KEY="$SECRET" "$@"; }
n_ok=0
ok() { n_ok=$((n_ok + 1)); }

# 1. every object, whole, then a range of it, then HEAD
while IFS=$'\t' read -r n key size; do
  run "$GET" "s3://sluice-test/$key" >"$WORK/got" 2>"$WORK/err" || fail "GET $key: $(cat "$WORK/err")"
  cmp -s "$WORK/got" "$WORK/obj/$n" || fail "GET $key: bytes differ"
  ok
  if [ "$size" -ge 4 ]; then
    run "$GET" "s3://sluice-test/$key" "bytes=1-3" >"$WORK/got" 2>"$WORK/err" ||
      fail "GET $key bytes=1-3: $(cat "$WORK/err")"
    cmp -s "$WORK/got" <(tail -c +2 "$WORK/obj/$n" | head -c 3) || fail "GET $key bytes=1-3: bytes differ"
    ok
  fi
  [ "$(run "$GET" -H "s3://sluice-test/$key")" = "200 $size" ] || fail "HEAD $key"
  ok
done <"$WORK/keys.tsv"

# 2. listings: one page, then pages of 2
cut -f2,3 "$WORK/keys.tsv" | grep '^d/' >"$WORK/want_d"
run "$GET" -l s3://sluice-test/d/ >"$WORK/list" 2>"$WORK/err" || fail "list d/: $(cat "$WORK/err")"
diff "$WORK/want_d" "$WORK/list" >&2 || fail "list d/ differs"
ok
cut -f2,3 "$WORK/keys.tsv" | grep '^many/' >"$WORK/want_many"
S3_GET_MAX_KEYS=2 run "$GET" -l s3://sluice-test/many/ >"$WORK/list" 2>"$WORK/err" ||
  fail "list many/ in pages of 2: $(cat "$WORK/err")"
diff "$WORK/want_many" "$WORK/list" >&2 || fail "list many/ in pages of 2 differs"
ok
cut -f2,3 "$WORK/keys.tsv" >"$WORK/want_all"
S3_GET_MAX_KEYS=3 run "$GET" -l s3://sluice-test >"$WORK/list" 2>"$WORK/err" || fail "list all: $(cat "$WORK/err")"
diff "$WORK/want_all" "$WORK/list" >&2 || fail "list of the whole bucket differs"
ok

# 3. a session token: signed and sent; refused without it or changed
K="s3://sluice-test/d/a b+c.txt"
[ "$(run env AWS_ACCESS_KEY_ID="$TID" AWS_SECRET_ACCESS_KEY="$TSECRET" AWS_SESSION_TOKEN="$TTOKEN" \
      "$GET" "$K")" = "hello s3 world" ] || fail "GET with a session token"
ok
if run env AWS_ACCESS_KEY_ID="$TID" AWS_SECRET_ACCESS_KEY="$TSECRET" "$GET" "$K" >/dev/null 2>&1; then
  fail "temporary credentials without their token were accepted"
fi
if run env AWS_ACCESS_KEY_ID="$TID" AWS_SECRET_ACCESS_KEY="$TSECRET" AWS_SESSION_TOKEN="${TTOKEN}x" \
      "$GET" "$K" >/dev/null 2>&1; then
  fail "a changed session token was accepted"
fi
ok

# 4. refusals the server makes, and that they reach the message
run env AWS_SECRET_ACCESS_KEY="${SECRET}x" "$GET" "$K" >/dev/null 2>"$WORK/err" &&
  fail "a wrong secret was accepted"
{ grep -q "HTTP 403" "$WORK/err" && grep -q SignatureDoesNotMatch "$WORK/err"; } || fail "wrong secret: $(cat "$WORK/err")"
ok
run "$GET" s3://sluice-test/d/none >/dev/null 2>"$WORK/err" && fail "a missing key was found"
{ grep -q "HTTP 404" "$WORK/err" && grep -q NoSuchKey "$WORK/err"; } || fail "missing key: $(cat "$WORK/err")"
ok
run env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$GET" "$K" >/dev/null 2>"$WORK/err" &&
  fail "an unsigned request to a private bucket was accepted"
grep -q "HTTP 403" "$WORK/err" || fail "unsigned: $(cat "$WORK/err")"
ok

# 5. the remote provider itself (src/io/io_remote.c): sluice run over s3://
#    names, every request signed and checked by moto; batches equal the
#    local run's
spec() { printf '{"source": {%s, "shuffle": true}, "seed": 1, "epochs": 2, "ops": [{"op": "batch", "size": 8}]}' "$1"; }
spec "\"path\": \"$WORK/one.slr\"" >"$WORK/l1.json"
spec "\"path\": \"s3://sluice-data/ds/one.slr\"" >"$WORK/r1.json"
spec "\"webdataset\": \"$WORK/wds-{00000..00001}.tar\"" >"$WORK/l2.json"
spec "\"webdataset\": \"s3://sluice-data/wds/\"" >"$WORK/r2.json"
"$SLUICE" run "$WORK/l1.json" --digest >"$WORK/want1" || fail "local run"
"$SLUICE" run "$WORK/l2.json" --digest >"$WORK/want2" || fail "local run"
for cache in 1G 0; do  # fetched whole into the cache; read by ranges
  run env SLUICE_CACHE_DIR="$WORK/cache" SLUICE_CACHE_BYTES=$cache "$SLUICE" run "$WORK/r1.json" --digest \
    >"$WORK/got" 2>"$WORK/err" || fail "sluice run s3:// .slr (cache $cache): $(cat "$WORK/err")"
  cmp -s "$WORK/got" "$WORK/want1" || fail "sluice run s3:// .slr (cache $cache): batches differ"
  ok
done
# read by ranges, its open bringing 4 KiB of each end (a suffix range,
# bytes=-4096, signed; moto's 206 places it): records by range requests
run env SLUICE_CACHE_DIR="$WORK/cache" SLUICE_CACHE_BYTES=0 SLUICE_HTTP_OPEN_BYTES=4096 "$SLUICE" run \
  "$WORK/r1.json" --digest >"$WORK/got" 2>"$WORK/err" ||
  fail "sluice run s3:// .slr (open bytes 4096): $(cat "$WORK/err")"
cmp -s "$WORK/got" "$WORK/want1" || fail "sluice run s3:// .slr (open bytes 4096): batches differ"
ok
# the shards named by their prefix: listed with ListObjectsV2, then read
run env SLUICE_CACHE_DIR="$WORK/cache" "$SLUICE" run "$WORK/r2.json" --digest >"$WORK/got" 2>"$WORK/err" ||
  fail "sluice run s3:// prefix: $(cat "$WORK/err")"
cmp -s "$WORK/got" "$WORK/want2" || fail "sluice run s3:// prefix: batches differ"
ok
run env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY SLUICE_CACHE_DIR="$WORK/cache2" \
  "$SLUICE" run "$WORK/r1.json" >/dev/null 2>"$WORK/err" && fail "sluice read a private bucket unsigned"
grep -q "s3://sluice-data/ds/one.slr.*HTTP 403" "$WORK/err" || fail "unsigned sluice run: $(cat "$WORK/err")"
ok

# 6. stored checksums (x-amz-checksum-mode: ENABLED, signed): through
#    tests/remote/httpfix.py's proxy, which flips one bit of a shard's body
#    once, the damage is caught before the shard enters the cache (by the
#    stored CRC32C or SHA-256, or by the MD5 ETag where nothing is stored),
#    the shard is fetched again and the batches equal the local run's; a
#    shard flipped on every fetch fails naming its s3:// name and both tries.
mkfifo "$WORK/hold"
exec 4<>"$WORK/hold"
proxy() {  # proxy ARGS...: start the fault proxy in front of moto; sets PX, PXPID
  rm -f "$WORK/px.url"
  "$PY" "$REPO/tests/remote/httpfix.py" proxy "$PORT" --forward-all "$@" <"$WORK/hold" \
    >"$WORK/px.url" 2>"$WORK/px.err" &
  PXPID=$!
  for _ in $(seq 100); do [ -s "$WORK/px.url" ] && break; sleep 0.1; done
  PX=$(cat "$WORK/px.url")
  [ -n "$PX" ] || fail "the fault proxy did not start: $(cat "$WORK/px.err")"
}
n=0
for pre in sums etag; do
  for k in 0 1; do
    n=$((n + 1))
    proxy --flip "/sluice-sums/$pre/wds-0000$k.tar" --flip-max 1
    spec "\"webdataset\": \"s3://sluice-sums/$pre/\"" >"$WORK/r6.json"
    run env AWS_ENDPOINT_URL="$PX" SLUICE_CACHE_DIR="$WORK/cache6-$n" "$SLUICE" run "$WORK/r6.json" \
      --digest >"$WORK/got" 2>"$WORK/err" || fail "s3 $pre/$k flipped once: $(cat "$WORK/err")"
    cmp -s "$WORK/got" "$WORK/want2" || fail "s3 $pre/$k flipped once: batches differ"
    case $pre/$k in
      sums/0) want="CRC32C the server gives for the object (x-amz-checksum-crc32c)" ;;
      sums/1) want="SHA-256 the server gives for the object (x-amz-checksum-sha256)" ;;
      *) want="MD5 the server gives for the object (ETag)" ;;
    esac
    grep -qF "$want" "$WORK/err" && grep -q "fetched again" "$WORK/err" ||
      fail "s3 $pre/$k flipped once: no '$want' warning: $(cat "$WORK/err")"
    kill "$PXPID"; wait "$PXPID" 2>/dev/null || true
    grep -q '"flip": 1' "$WORK/px.err" || fail "s3 $pre/$k: the proxy flipped nothing: $(cat "$WORK/px.err")"
    ok
  done
done
proxy --flip "/sluice-sums/sums/wds-00001.tar"
spec "\"webdataset\": \"s3://sluice-sums/sums/\"" >"$WORK/r6.json"
run env AWS_ENDPOINT_URL="$PX" SLUICE_CACHE_DIR="$WORK/cache6-x" "$SLUICE" run "$WORK/r6.json" \
  >/dev/null 2>"$WORK/err" && fail "a shard damaged on every fetch was read"
grep -q "s3://sluice-sums/sums/wds-00001.tar: damaged twice" "$WORK/err" ||
  fail "damaged twice: $(cat "$WORK/err")"
kill "$PXPID"; wait "$PXPID" 2>/dev/null || true
ok

echo "ok   s3_moto: $n_ok checks against moto $MOTO_VERSION on $EP (signatures verified)"
