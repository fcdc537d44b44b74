#!/bin/sh
# Runs each cmocka test binary, then prints one summary line over all of their tests:
# "tests: N passed, N failed, N skipped", summed over every group a binary runs.
pass=0; fail=0; skip=0; failed=""
log=$(mktemp); rcf=$(mktemp)
# Sums the counts of cmocka's "[  WORD  ] N test(s)" lines in the log, one per group.
count() {
    sed -n "s/^\[ *$1 *\] \([0-9][0-9]*\) test.*/\1/p" "$log" | awk '{ s += $1 } END { print s + 0 }'
}
for t in "$@"; do
    echo "== $t"
    { "$t"; echo $? > "$rcf"; } 2>&1 | tee "$log"
    rc=$(cat "$rcf")
    n_groups=$(grep -c '^\[==========\] [0-9]* test(s) run\.' "$log")
    p=$(count PASSED); f=$(count FAILED); s=$(count SKIPPED)
    if [ "$n_groups" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
        f=1; failed="$failed $t(crashed)"
    elif [ "$f" -gt 0 ]; then
        failed="$failed $t"
    elif [ "$rc" -ne 0 ]; then
        # Passed every test but exited non-zero: a sanitizer report at exit, say.
        f=1; failed="$failed $t(exit $rc)"
    fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
done
rm -f "$log" "$rcf"
echo
[ -n "$failed" ] && echo "failed:$failed"
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ -z "$failed" ]
