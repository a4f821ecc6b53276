#!/usr/bin/env bash
# kill -INT campaign, short (scripts/campaign_killint.sh): 12 packs, half of
# them Python's sluice.pack, interrupted by SIGINT at seeded random moments
# (and their resumes too) must each stop within a second saying how many
# records are safe, continue with --resume into exactly the clean pack, and
# salvage into a prefix of it; and the campaign's checks must catch a pack
# that differs from the reference. The set is 4,800 records (a clean pack of
# about a quarter second) so that signals drawn over the pack's length land
# inside Python's packs too, not after them: at 960 records (65 ms) the
# interpreter's own latency let whole runs go without one.
. "$(dirname "$0")/common.bash"

KI=$(dirname "$0")/../../scripts/campaign_killint.sh
export KILLINT_DIR=$T/ki KILLINT_IMAGES=120 KILLINT_COPIES=40 KILLINT_SHARD=2M KILLINT_PYTHON=2

run 0 bash "$KI" "$SLUICE" 12 7
has "$OUT" "killint: 12 trials (seed 7; 4800 records in"
has "$OUT" "bad outputs 0"
grep -q " [1-9][0-9]* interruptions (\([1-9]\)" "$OUT" || fail "no interrupted Python pack: $(cat "$OUT")"

# the checks can fail: a source image altered after the reference pack makes
# every trial's finished pack differ
KILLINT_TAMPER=1 run 1 bash "$KI" "$SLUICE" 4 7
has "$ERR" "differs from the clean pack"
grep -q "bad outputs [1-9]" "$OUT" || fail "the tampered campaign reports no bad output"

run 2 bash "$KI"
finish
