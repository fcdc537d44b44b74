#!/usr/bin/env bash
# repair.sh - the Flow-GRPO repair study of docs/REPRODUCTION.md (`make repair`): can Flow-GRPO
# mend a planner that offline SFT on flawed trajectories has damaged?
#
#   (a)  base:         the shipped planner (models/agentflow-world.gguf, as F32), frozen;
#   (c') offline SFT:  (a) after SFT of the planner on expert traces that are ALL flawed
#                      (`world traces --noise 1`: a wrong tool, a redundant step, an early STOP
#                      or a repeated sub-goal in every trace), 220 steps of 8 replies
#                      (about 2 epochs) at lr 1e-4;
#   (c'+b) Flow-GRPO:  (c') then `train grpo --full` on the same questions, scored 0/1 on the
#                      final answer only, every other module on (a)'s weights.
#
# The questions (c') and (c'+b) learn from are the first NQ validation questions of world-calc
# and world-multihop; every figure is `eval run` on the first LIMIT test questions of
# world-calc, world-lookup and world-multihop, with the planner sampled as the flow samples it
# and greedy. Each seed in SEEDS draws its own flawed traces, SFT order and GRPO run. Steps
# whose output exists are skipped, so a stopped run continues. About 15 minutes a seed on 2 cores.
# Settings (environment): AF, MODEL, R (work folder), SEEDS, NQ, LIMIT, SFT_STEPS, STEPS (GRPO),
# BATCH and GROUP (GRPO's questions a step and rollouts a question, 8 and 8), LR (GRPO), THREADS.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
AF=${AF:-./build/agentflow}
MODEL=${MODEL:-models/agentflow-world.gguf}
R=${R:-build/repair}
SEEDS=${SEEDS:-1 2 3}
NQ=${NQ:-160}
LIMIT=${LIMIT:-50}
SFT_STEPS=${SFT_STEPS:-220}
STEPS=${STEPS:-10}
BATCH=${BATCH:-8}
GROUP=${GROUP:-8}
LR=${LR:-5e-5}
THREADS=${THREADS:-2}
TOOLS=Wikipedia_RAG_Search_Tool,Python_Code_Generator_Tool,Generalist_Solution_Generator_Tool
say() { printf '[repair %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

mkdir -p "$R/eval"
R=$(realpath "$R")
W=$R/world
[ -f "$W/wiki.db" ] || { say "world (seed 1)"; $AF world build --seed 1 --out "$W"; }
BASE=$R/base-f32.gguf
[ -f "$BASE" ] || $AF model quantize "$MODEL" "$BASE" F32
echo '{"max_tokens": 256}' >"$R/sampled.json"
echo '{"max_tokens": 256, "planner": {"temperature": 0}}' >"$R/greedy.json"
if [ ! -f "$R/train.jsonl" ]; then
    for f in world-calc world-multihop; do head -n "$NQ" "$W/benchmarks/$f/val.jsonl"; done >"$R/train.jsonl"
    for f in world-calc world-multihop; do
        sed -n "$((NQ + 1)),$((NQ + 8))p" "$W/benchmarks/$f/val.jsonl"
    done >"$R/val.jsonl"
fi

evaluate() { # NAME PLANNER
    for mode in sampled greedy; do
        local out=$R/eval/$1-$mode
        [ -f "$out/summary.json" ] && continue
        say "eval $1 ($mode planner)"
        $AF eval run --bench world-calc,world-lookup,world-multihop --data-dir "$W/benchmarks" \
            --limit "$LIMIT" --url "gguf:$BASE" --planner-url "gguf:$2" --wiki-db "$W/wiki.db" \
            --prompts compact --tools "$TOOLS" --config "$R/$mode.json" --max-steps 10 \
            --threads "$THREADS" --concurrency 4 --quiet --out "$out"
    done
}

evaluate a "$BASE"
for s in $SEEDS; do
    if [ ! -f "$R/osft-$s/model.gguf" ]; then
        say "(c') seed $s: flawed traces, then SFT of the planner"
        $AF world traces --world "$W" --split val --bench world-calc,world-multihop --limit "$NQ" \
            --noise 1 --seed "$s" --prompts compact --out "$R/flawed-$s.jsonl" --concurrency "$THREADS"
        $AF train sft --model "$BASE" --data "$R/flawed-$s.planner.jsonl" --full --lr 1e-4 \
            --steps "$SFT_STEPS" --batch 8 --seed "$s" --threads "$THREADS" --quiet \
            --out "$R/osft-$s"
    fi
    evaluate "c$s" "$R/osft-$s/model.gguf"
    if [ ! -f "$R/grpo-$s/model.gguf" ]; then
        say "(c'+b) seed $s: Flow-GRPO from (c')"
        resume=()
        [ -d "$R/grpo-$s" ] && resume=(--resume)
        $AF train grpo --model "$R/osft-$s/model.gguf" --full --prompts compact \
            --data "$R/train.jsonl" --val "$R/val.jsonl" --eval-every 5 --wiki-db "$W/wiki.db" \
            --tools "$TOOLS" --fixed-url "gguf:$BASE" --executor-url "gguf:$BASE" \
            --tool-url "gguf:$BASE" --steps "$STEPS" --batch "$BATCH" --group "$GROUP" \
            --dynamic-sampling 3 --temperature 0.7 --max-tokens 256 --lr "$LR" --seed "$s" \
            --threads "$THREADS" --save-every 5 --quiet --out "$R/grpo-$s" "${resume[@]}"
        $AF train plot "$R/grpo-$s" >/dev/null
    fi
    evaluate "g$s" "$R/grpo-$s/model.gguf"
done
say "done: summaries in $R/eval/*/summary.json"
