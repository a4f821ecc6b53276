#!/usr/bin/env bash
# kill -9 campaign, short: 10 packs killed at seeded random moments must each
# leave a dataset equal to a clean pack or a partial write that recovers to a
# prefix of it (scripts/campaign_kill9.sh); and the campaign's checks must
# catch a pack that differs from the reference.
. "$(dirname "$0")/common.bash"

K9=$(dirname "$0")/../../scripts/campaign_kill9.sh
export KILL9_DIR=$T/k9 KILL9_IMAGES=120 KILL9_COPIES=8 KILL9_SHARD=2M

run 0 bash "$K9" "$SLUICE" 10 7
has "$OUT" "kill9: 10 trials (seed 7; 960 records in"
has "$OUT" "bad outputs 0"

# the checks can fail: a source image altered after the reference pack makes
# every trial that wrote a record bad (5 trials: all five killed before the
# first record is very unlikely)
KILL9_TAMPER=1 run 1 bash "$K9" "$SLUICE" 5 7
has "$ERR" "differs from the reference"
grep -q "bad outputs [1-9]" "$OUT" || fail "the tampered campaign reports no bad output"

run 2 bash "$K9"
finish
