#!/usr/bin/env bash
# grpo-questions.sh BENCH_DIR FAMS NQ TRAIN VAL - the questions Flow-GRPO on the planner learns
# from, shared by make-model.sh's planner phase and reproduce.sh's (b) so that both see the
# same bytes: the first NQ of each family's validation split (FAMS, comma-separated; the SFT
# traces come from the training split), the families interleaved, into TRAIN; the next 16 of
# each, interleaved, into VAL. TRAIN is written last and renamed into place, so its presence
# means both are whole.
set -euo pipefail
[ $# -eq 5 ] || { echo "usage: grpo-questions.sh BENCH_DIR FAMS NQ TRAIN VAL" >&2; exit 2; }
bench=$1 fams=$2 nq=$3 train_out=$4 val_out=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
train=() val=()
for f in ${fams//,/ }; do
    head -n "$nq" "$bench/$f/val.jsonl" >"$tmp/$f.train"
    sed -n "$((nq + 1)),$((nq + 16))p" "$bench/$f/val.jsonl" >"$tmp/$f.val"
    train+=("$tmp/$f.train") val+=("$tmp/$f.val")
done
paste -d '\n' "${val[@]}" >"$val_out"
paste -d '\n' "${train[@]}" >"$train_out.tmp"
mv "$train_out.tmp" "$train_out"
