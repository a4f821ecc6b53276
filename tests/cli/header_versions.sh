#!/usr/bin/env bash
# include/sluice.h's versions are true: SL_VERSION_* equal the project's
# version (CMakeLists.txt) and `sluice --version`, and no declaration says it
# exists "Since" a version after the library's own (every function of the
# header has been there since the version it names, the first being 0.1).
. "$(dirname "$0")/common.bash"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
H=$SRC/include/sluice.h

maj=$(sed -n 's/^#define SL_VERSION_MAJOR \([0-9]*\)$/\1/p' "$H")
min=$(sed -n 's/^#define SL_VERSION_MINOR \([0-9]*\)$/\1/p' "$H")
pat=$(sed -n 's/^#define SL_VERSION_PATCH \([0-9]*\)$/\1/p' "$H")
str=$(sed -n 's/^#define SL_VERSION_STRING "\(.*\)"$/\1/p' "$H")
proj=$(sed -n 's/^project(sluice VERSION \([0-9.]*\) .*/\1/p' "$SRC/CMakeLists.txt")
[ -n "$maj" ] && [ -n "$min" ] && [ -n "$pat" ] || fail "sluice.h lacks SL_VERSION_MAJOR/MINOR/PATCH"
[ "$maj.$min.$pat" = "$str" ] || fail "SL_VERSION_STRING '$str' is not $maj.$min.$pat"
[ "$proj" = "$str" ] || fail "CMakeLists.txt's project version '$proj' is not sluice.h's '$str'"
run 0 "$SLUICE" --version
has "$OUT" "sluice $str"

# every "Since X.Y" names a version the library has reached
n=0
while IFS=: read -r line since; do
    n=$((n + 1))
    sm=${since%%.*}; sn=${since#*.}
    if [ "$sm" -gt "$maj" ] || { [ "$sm" = "$maj" ] && [ "$sn" -gt "$min" ]; }; then
        fail "include/sluice.h:$line says 'Since $since', but the version is $str"
    fi
done < <(grep -no 'Since [0-9]*\.[0-9]*' "$H" | sed 's/Since //')
[ "$n" -gt 100 ] || fail "only $n 'Since' notes found in sluice.h: did the pattern change?"
# nor do the docs speak of a version the library has not reached ("before 0.2")
while IFS=: read -r file line ver; do
    vm=${ver%%.*}; vn=${ver#*.}
    if [ "$vm" -gt "$maj" ] || { [ "$vm" = "$maj" ] && [ "$vn" -gt "$min" ]; }; then
        fail "${file#"$SRC"/}:$line names version $ver, but the version is $str"
    fi
done < <(grep -noE '([Bb]efore|[Ss]ince|[Uu]ntil) (version |sluice )?[0-9]+\.[0-9]+\b' \
             "$SRC"/docs/*.md "$SRC/README.md" "$H" | grep -vE '\b[0-9]+\.[0-9]+\.[0-9]|[0-9]\.[0-9]+ *(%|s\b|ms|us|µs|MB|GB|KB|x|×)' \
         | sed -E 's/^([^:]*):([0-9]*):.* ([0-9]+\.[0-9]+)$/\1:\2:\3/')
finish
