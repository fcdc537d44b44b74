#!/bin/sh
# Runs each cmocka test binary, then prints one summary line over all of their tests.
pass=0; fail=0; failed=""
log=$(mktemp); rcf=$(mktemp)
for t in "$@"; do
    echo "== $t"
    { "$t"; echo $? > "$rcf"; } 2>&1 | tee "$log"
    rc=$(cat "$rcf")
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    if [ -z "$p" ] && [ -z "$f" ]; then
        f=1; failed="$failed $t(crashed)"
    elif [ -n "$f" ] && [ "$f" -gt 0 ]; then
        failed="$failed $t"
    elif [ "$rc" -ne 0 ]; then
        # Passed every test but exited non-zero: a sanitizer report at exit, say.
        f=1; failed="$failed $t(exit $rc)"
    fi
    pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
done
rm -f "$log" "$rcf"
echo
[ -n "$failed" ] && echo "failed:$failed"
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ -z "$failed" ]
