#!/usr/bin/env bash
# What a clone's own tools make is ignored by git: a virtual environment
# (.venv/, as `python3 -m venv .venv` makes it: it was not ignored) and the
# build folders.
. "$(dirname "$0")/common.bash"

REPO=$(cd "$(dirname "$0")/../.." && pwd)
for p in .venv/bin/python build/sluice build-asan/x build-tsan/x; do
    if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$REPO" check-ignore -q "$p" || fail "git does not ignore $p"
    else
        # a source tree without git: the rule is there all the same
        top=${p%%/*}
        grep -qE "^/?(${top}|${top%%-*}\*)/?$" "$REPO/.gitignore" || fail ".gitignore has no rule for $top/"
    fi
done
finish
