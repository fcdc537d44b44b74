#!/usr/bin/env bash
# reproduce.sh - the figures of docs/REPRODUCTION.md (`make reproduce`): the paper's Table 3
# question asked of the embedded model in its practice world, in direction only.
#
#   (a) base:        the planner after SFT on clean expert traces, frozen (BASE);
#   (b) Flow-GRPO:   (a) plus Flow-GRPO on the planner, every other module frozen;
#   (c) offline SFT: (a) plus SFT of the planner on noisy expert traces of the same questions.
#
# (b) and (c) start from (a) and see the same questions (the first NQ of the validation split
# of each of TRAIN_FAMS, which the SFT traces never used), as in the paper, where
# both start from the same instruct model. Each is run for every seed in SEEDS; only the
# planner slot gets the new weights. Every figure is `eval run` on the test split.
# Also: turns at --max-steps 3, 5, 7, 10 for (a) and the first (b) (the paper's Fig. 10), tool
# mix and tool errors over the GRPO steps (Fig. 6), the training curves (`train plot`) and a case
# study (one test question before and after GRPO). The tables go to $R/summary.md.
#
# Steps whose output exists are skipped, so a stopped run continues where it stopped.
# Settings (environment): AF, BASE (the F32 model of make-model.sh's last SFT phase, else MODEL,
# the shipped file by default, as F32), MODEL_BUILD (make-model.sh's folder), WORLD
# (seed 1), REPRO_BUILD (work folder), FAMS, TRAIN_FAMS, SEEDS, NQ, GRPO_STEPS, GRPO_BATCH, GROUP,
# TEMP, LR, NOISE, LIMIT (test questions per family), THREADS.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
AF=${AF:-./build/agentflow}
MB=${MODEL_BUILD:-build/model}
R=${REPRO_BUILD:-build/repro}
# BASE: the F32 model of the last SFT phase that make-model.sh finished (phases 2 and 3 are
# optional there); without a make-model.sh build, the shipped file as F32, so that a fresh
# clone reproduces in under an hour instead of rebuilding the model for three.
if [ -z "${BASE:-}" ]; then
    for p in p3-facts p2-worlds p1-world1; do
        BASE=$MB/$p/model.gguf
        [ -f "$BASE" ] && break
    done
    if [ ! -f "$BASE" ]; then
        BASE=$R/base-f32.gguf
        mkdir -p "$R"
        [ -f "$BASE" ] || $AF model quantize "${MODEL:-models/agentflow-world.gguf}" "$BASE" F32
        MB=$R
    fi
fi
WORLD=${WORLD:-$MB/world}
SEEDS=${SEEDS:-1 2 3}
NQ=${NQ:-80}
GRPO_STEPS=${GRPO_STEPS:-32}
GRPO_BATCH=${GRPO_BATCH:-8}
GROUP=${GROUP:-8}
TEMP=${TEMP:-1.0}
LR=${LR:-5e-5}
NOISE=${NOISE:-0.5}
LIMIT=${LIMIT:-100}
THREADS=${THREADS:-2}
TOOLS=Wikipedia_RAG_Search_Tool,Python_Code_Generator_Tool,Generalist_Solution_Generator_Tool
# FAMS: the families whose test split is scored. TRAIN_FAMS: those whose validation questions
# (b) and (c) learn from. world-calc is where the planner's own errors are (the numbers it copies
# into a sub-goal); a one-hop lookup's failures are the verifier's and the generator's copies,
# which no planner training can fix, so its rollout groups are all alike and teach nothing.
FAMS=${FAMS:-world-calc,world-lookup,world-multihop}
TRAIN_FAMS=${TRAIN_FAMS:-world-calc,world-multihop}
say() { printf '[reproduce %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

[ -f "$BASE" ] || { echo "reproduce.sh: $BASE is missing (make model, or set BASE)" >&2; exit 4; }
BASE=$(realpath "$BASE")
mkdir -p "$R/eval"
if [ ! -f "$WORLD/wiki.db" ]; then
    say "world (seed 1)"
    $AF world build --seed 1 --out "$WORLD"
fi
WORLD=$(realpath "$WORLD")
# A reply the expert writes is under 150 tokens; the cap bounds one that rambles.
echo '{"max_tokens": 256}' >"$R/cap.json"
echo '{"max_tokens": 256, "planner": {"temperature": 0}}' >"$R/greedy.json"

# The questions of (b) and (c): the first NQ of each family's validation split, the families
# interleaved; the next 16 of each are (b)'s validation set.
[ -f "$R/train.jsonl" ] ||
    scripts/grpo-questions.sh "$WORLD/benchmarks" "$TRAIN_FAMS" "$NQ" "$R/train.jsonl" "$R/val.jsonl"

# evaluate NAME PLANNER [MAX_STEPS]: the test split, every slot on BASE but the planner, the
# planner sampled as the flow samples it (NAME) and greedy as `run` without --url has it
# (NAME-greedy; not for the --max-steps runs).
evaluate() {
    local name=$1 planner=$2 steps=${3:-10} mode cfg out
    for mode in sampled greedy; do
        [ "$mode" = greedy ] && [ "$steps" != 10 ] && continue
        out=$R/eval/$name cfg=$R/cap.json
        [ "$mode" = greedy ] && out=$R/eval/$name-greedy cfg=$R/greedy.json
        [ -f "$out/summary.json" ] && continue
        say "eval $name (planner $planner $mode, --max-steps $steps)"
        $AF eval run --bench "$FAMS" --data-dir "$WORLD/benchmarks" --limit "$LIMIT" \
            --url "gguf:$BASE" --planner-url "gguf:$(realpath "$planner")" \
            --wiki-db "$WORLD/wiki.db" --prompts compact --tools "$TOOLS" --config "$cfg" \
            --max-steps "$steps" --threads "$THREADS" --concurrency 4 --quiet --out "$out"
    done
}

evaluate a "$BASE"
for s in $SEEDS; do
    if [ ! -f "$R/grpo-$s/model.gguf" ]; then
        say "(b) Flow-GRPO, seed $s: $GRPO_STEPS steps of $GRPO_BATCH x $GROUP rollouts"
        resume=()
        [ -d "$R/grpo-$s" ] && resume=(--resume)
        $AF train grpo --model "$BASE" --full --prompts compact --data "$R/train.jsonl" \
            --val "$R/val.jsonl" --eval-every 4 --wiki-db "$WORLD/wiki.db" --tools "$TOOLS" \
            --steps "$GRPO_STEPS" --batch "$GRPO_BATCH" --group "$GROUP" --temperature "$TEMP" \
            --max-tokens 256 --lr "$LR" --seed "$s" --threads "$THREADS" --save-every 4 \
            --quiet --out "$R/grpo-$s" "${resume[@]}"
        $AF train plot "$R/grpo-$s" >/dev/null
    fi
    evaluate "b$s" "$R/grpo-$s/model.gguf"

    if [ ! -f "$R/osft-$s/model.gguf" ]; then
        say "(c) offline SFT, seed $s: noisy traces (noise $NOISE) of the same questions"
        $AF world traces --world "$WORLD" --split val --bench "$TRAIN_FAMS" --limit "$NQ" \
            --noise "$NOISE" --seed "$s" --prompts compact --out "$R/noisy-$s.jsonl" \
            --concurrency "$THREADS"
        n=$(wc -l <"$R/noisy-$s.planner.jsonl")
        $AF train sft --model "$BASE" --data "$R/noisy-$s.planner.jsonl" --full \
            --lr "$LR" --steps $(((n + 7) / 8)) --batch 8 --seed "$s" --threads "$THREADS" \
            --quiet --out "$R/osft-$s"
    fi
    evaluate "c$s" "$R/osft-$s/model.gguf"
done

first=$(echo "$SEEDS" | awk '{print $1}')
for m in 3 5 7; do
    evaluate "a-steps$m" "$BASE" "$m"
    evaluate "b$first-steps$m" "$R/grpo-$first/model.gguf" "$m"
done

say "summary: $R/summary.md"
python3 scripts/repro_summary.py "$R" "$SEEDS" "$FAMS" >"$R/summary.md"
cat "$R/summary.md"
