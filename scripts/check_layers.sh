#!/usr/bin/env bash
# The layer check (rule R1 of docs/ARCHITECTURE.md): every #include and every call between the folders of src/
# follows the dependency order that docs/ARCHITECTURE.md states ("Layers":
# `core → io → ops → record → source → device → pipeline`; a layer uses only
# itself and the layers before it). The document is the one source of the
# order: change it there and this check follows. The C files of tools/,
# python/ and bench/ use the library through include/sluice.h only: no header
# of src/, no sl_ function the public header does not declare.
#
#   bash scripts/check_layers.sh [ROOT]      (ROOT: a sluice tree, default this one)
#
# A call is a use of an sl_ function that a .c/.cu file of another folder
# defines with external linkage (static functions stay in their file). Each
# violation is printed as
#   src/source/x.c:12: includes pipeline/pipeline.h (source may not use pipeline)
#   src/ops/y.c:40: calls sl_pipeline__pools_tensor (defined in src/pipeline/pools.c; ops may not use pipeline)
# Known violations being worked off are listed in ROOT/scripts/layers.allow
# (`FILE TARGET` a line, with a comment saying why and until when); a line
# there that no longer matches anything fails the check, so the list only
# shrinks. Exit status 0: clean; 1: violations; 2: usage, or no order in the document.
# The work is done by scripts/check_layers.py (Debian's python3, nothing else).
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
[ -d "$ROOT/src" ] || { echo "check_layers.sh: $ROOT has no src/ folder" >&2; exit 2; }
ALLOW=()
[ -f "$ROOT/scripts/layers.allow" ] && ALLOW=(--allow "$ROOT/scripts/layers.allow")
exec /usr/bin/python3 "$(dirname "$0")/check_layers.py" "${ALLOW[@]}" "$ROOT"
