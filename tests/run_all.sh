#!/bin/sh
# Runs each cmocka test binary, then prints one summary line over all of them.
pass=0; fail=0; failed=""
for t in "$@"; do
    echo "== $t"
    if "$t"; then pass=$((pass + 1)); else fail=$((fail + 1)); failed="$failed $t"; fi
done
echo
[ -n "$failed" ] && echo "failed binaries:$failed"
echo "test binaries: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
