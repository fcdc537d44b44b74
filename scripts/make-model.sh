#!/usr/bin/env bash
# make-model.sh - the recipe of the embedded model (`make model`): a practice world, expert
# traces on its training split, a BPE vocabulary, a qwen2 model trained from scratch with SFT
# on every module's replies, then Flow-GRPO on the planner, quantized to Q8_0.
#
# Every step is seeded, and the trainer is deterministic for a given thread count, so the same
# THREADS rebuilds the same bytes. Steps whose output exists are skipped (delete build/model to
# start over); STAGE=sft stops after SFT.
#
# Settings (environment): THREADS (default 2), SHAPE (custom:LAYERS,EMBD,HEADS,KV,FF),
# VOCAB (tokens), TRACES (questions per family), SFT_STEPS, GRPO_STEPS, OUT.
set -euo pipefail
cd "$(dirname "$0")/.."

AF=./build/agentflow
B=build/model
THREADS=${THREADS:-2}
SEED=${SEED:-1}
SHAPE=${SHAPE:-custom:6,384,6,2,1024}
VOCAB=${VOCAB:-2048}
TRACES=${TRACES:-4000}
SFT_STEPS=${SFT_STEPS:-6000}
SFT_BATCH=${SFT_BATCH:-8}
GRPO_STEPS=${GRPO_STEPS:-200}
OUT=${OUT:-models/agentflow-world.gguf}
mkdir -p "$B" "$(dirname "$OUT")"

say() { printf '[make-model %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

if [ ! -f "$B/world/wiki.db" ]; then
    say "world (seed $SEED)"
    $AF world build --seed "$SEED" --out "$B/world"
fi
if [ ! -f "$B/sft.jsonl" ]; then
    say "expert traces: $TRACES questions per family, compact prompts"
    $AF world traces --world "$B/world" --split train --limit "$TRACES" --prompts compact \
        --out "$B/sft.jsonl" --concurrency "$THREADS"
fi
if [ ! -f "$B/vocab.gguf" ]; then
    say "vocabulary: $VOCAB tokens"
    $AF model make-vocab --input "$B/sft.jsonl" --input "$B/world/passages.jsonl" \
        --size "$VOCAB" "$B/vocab.gguf"
fi
if [ ! -f "$B/init.gguf" ]; then
    say "initial weights: $SHAPE"
    $AF model make-random --arch qwen2 --shape "$SHAPE" --type F32 --seed "$SEED" \
        --vocab-from "$B/vocab.gguf" "$B/init.gguf"
fi
if [ ! -f "$B/sft/model.gguf" ]; then
    say "SFT: $SFT_STEPS steps of $SFT_BATCH conversations, $THREADS threads"
    resume=()
    [ -d "$B/sft" ] && resume=(--resume)
    $AF train sft --model "$B/init.gguf" --data "$B/sft.jsonl" --out "$B/sft" --full \
        --lr 1e-3 --schedule cosine --warmup 200 --min-lr-ratio 0.1 --weight-decay 0.01 \
        --steps "$SFT_STEPS" --batch "$SFT_BATCH" --max-seq 1024 --seed "$SEED" \
        --threads "$THREADS" --save-every 250 "${resume[@]}"
fi
[ "${STAGE:-all}" = sft ] && exit 0
if [ ! -f "$B/grpo/model.gguf" ]; then
    say "Flow-GRPO on the planner: $GRPO_STEPS steps"
    resume=()
    [ -d "$B/grpo" ] && resume=(--resume)
    $AF train grpo --model "$B/sft/model.gguf" --full --prompts compact \
        --data "$B/world/benchmarks/world-multihop/train.jsonl" \
        --val "$B/world/benchmarks/world-multihop/val.jsonl" \
        --wiki-db "$B/world/wiki.db" --tools Wikipedia_RAG_Search_Tool,Python_Code_Generator_Tool \
        --out "$B/grpo" --steps "$GRPO_STEPS" --seed "$SEED" --threads "$THREADS" "${resume[@]}"
fi
say "quantize to Q8_0: $OUT"
$AF model quantize "$B/grpo/model.gguf" "$OUT" Q8_0
$AF train plot "$B/sft"
$AF train plot "$B/grpo"
say "done: $OUT"
