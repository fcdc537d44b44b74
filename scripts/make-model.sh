#!/usr/bin/env bash
# make-model.sh - the recipe of the embedded model (`make model`): a practice world, expert
# traces on its training split, a BPE vocabulary, a qwen2 model trained from scratch with SFT on
# the expert's replies in four phases (copy drills first, then world 1's traces with more
# drills, then mostly traces of other worlds, so that a fact can only be read from the
# context, not recalled, then the questions of the one fact it did not learn to read),
# quantized to Q8_0 (OUT, models/agentflow-world.gguf), then Flow-GRPO on the planner alone,
# also quantized to Q8_0 (PLANNER_OUT, models/agentflow-world-planner.gguf), which `run` puts in
# the planner slot. The shipped files are this recipe's output with its defaults; see
# docs/WORLD.md for how far that has been checked.
#
# Every step is seeded, and the trainer is deterministic for a given thread count, so the same
# THREADS rebuilds the same bytes. Steps whose output exists are skipped (delete build/model to
# start over; an interrupted phase resumes from its last checkpoint); STAGE=data stops once every
# phase's data is written, STAGE=sft after SFT; STAGE=planner runs only the Flow-GRPO phase,
# from the OUT in place.
# The phases' folders (p0-drills, p1-world1, p2-worlds, p3-facts) are not those of the first
# recipe (sft, sft2-sft4), so a work folder left by it is not mistaken for this one's progress.
#
# Settings (environment): THREADS (default 2), SHAPE (custom:LAYERS,EMBD,HEADS,KV,FF),
# VOCAB (tokens), TRACES (questions per family), DRILLS and DRILL_STEPS (phase 0: 30,000 drills,
# 2,000 steps), DRILLS1 (drills mixed into phase 1, 40,000), NAMES2 (the share of name drills
# among phase 2's DRILLS drills, 0: with 0.5 the model was no better, docs/WORLD.md),
# SFT_STEPS (phase 1, 4,000), SFT2_STEPS (phase 2, 6,000; 0 skips it), WORLDS3 and TRACES3
# (phase 2's first worlds, "11 12" at 1,500 questions a family), WORLDS4 and TRACES4 (its
# other worlds, seeds 21-32 at 300), SFT3_STEPS (phase 3, 1,000; 0 skips it), WORLDS5 and
# FACTS5 (phase 3's worlds, "41 42 43", and the facts their questions are chosen by,
# "occupation"), TRACES5 (phase 3's questions a family and fact, default all), GRPO_STEPS
# (32; 0 skips the phase), GRPO_BATCH and GROUP (8 questions x 8 rollouts a step), GRPO_LR
# (5e-5), NQ (80 questions a family), OUT, PLANNER_OUT, MODEL_BUILD (the work folder, default
# build/model), AF (the agentflow binary).
set -euo pipefail
cd "$(dirname "$0")/.."

# OpenMP threads that sleep instead of spinning at each barrier: the small model's many short
# parallel regions otherwise spend most of their time waiting (3x slower training measured
# under load; docs/PERFORMANCE.md).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
AF=${AF:-./build/agentflow}
B=${MODEL_BUILD:-build/model}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
SHAPE=${SHAPE:-custom:4,256,8,4,768}
VOCAB=${VOCAB:-2048}
TRACES=${TRACES:-4000}
DRILLS=${DRILLS:-30000}
DRILLS1=${DRILLS1:-40000}
DRILL_STEPS=${DRILL_STEPS:-2000}
NAMES2=${NAMES2:-0}
SFT_STEPS=${SFT_STEPS:-4000}
SFT2_STEPS=${SFT2_STEPS:-6000}
WORLDS3=${WORLDS3:-11 12}
TRACES3=${TRACES3:-1500}
WORLDS4=${WORLDS4:-21 22 23 24 25 26 27 28 29 30 31 32}
TRACES4=${TRACES4:-300}
SFT3_STEPS=${SFT3_STEPS:-1000}
WORLDS5=${WORLDS5:-41 42 43}
FACTS5=${FACTS5:-occupation}
TRACES5=${TRACES5:-0}
SFT_BATCH=${SFT_BATCH:-8}
GRPO_STEPS=${GRPO_STEPS:-32}
GRPO_BATCH=${GRPO_BATCH:-8}
GROUP=${GROUP:-8}
GRPO_LR=${GRPO_LR:-5e-5}
NQ=${NQ:-80}
OUT=${OUT:-models/agentflow-world.gguf}
PLANNER_OUT=${PLANNER_OUT:-${OUT%.gguf}-planner.gguf}
mkdir -p "$B" "$(dirname "$OUT")"

say() { printf '[make-model %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# Flow-GRPO on the planner alone (the paper's recipe: every other module stays the SFT model),
# from OUT as shipped (its Q8_0 weights as F32), so the phase reruns from a clone with
# STAGE=planner, without the hours of SFT. Its questions are reproduce.sh's (b)'s: the first NQ
# of world 1's validation split of world-calc and world-multihop, interleaved (the SFT traces
# used the training split), and the next 16 of each to validate on. The result is PLANNER_OUT,
# which `run` puts in the planner slot. GRPO_STEPS=0 skips it.
planner_phase() {
    [ "$GRPO_STEPS" -gt 0 ] || return 0
    local G=$B/grpo-planner
    if [ ! -f "$G/model.gguf" ]; then
        [ -f "$B/world/wiki.db" ] || $AF world build --seed "$SEED" --out "$B/world"
        [ -f "$B/grpo-base.gguf" ] || $AF model quantize "$OUT" "$B/grpo-base.gguf" F32
        [ -f "$B/grpo-train.jsonl" ] ||
            scripts/grpo-questions.sh "$B/world/benchmarks" world-calc,world-multihop "$NQ" \
                "$B/grpo-train.jsonl" "$B/grpo-val.jsonl"
        say "Flow-GRPO on the planner: $GRPO_STEPS steps of $GRPO_BATCH x $GROUP rollouts"
        local resume=()
        [ -d "$G" ] && resume=(--resume)
        $AF train grpo --model "$B/grpo-base.gguf" --full --prompts compact \
            --data "$B/grpo-train.jsonl" --val "$B/grpo-val.jsonl" --eval-every 4 \
            --wiki-db "$B/world/wiki.db" \
            --tools Wikipedia_RAG_Search_Tool,Python_Code_Generator_Tool,Generalist_Solution_Generator_Tool \
            --steps "$GRPO_STEPS" --batch "$GRPO_BATCH" --group "$GROUP" --temperature 1.0 \
            --max-tokens 256 --lr "$GRPO_LR" --seed "$SEED" --threads "$THREADS" --save-every 4 \
            --quiet --out "$G" "${resume[@]}"
    fi
    $AF train plot "$G" >/dev/null
    say "quantize the planner to Q8_0: $PLANNER_OUT"
    $AF model quantize "$G/model.gguf" "$PLANNER_OUT" Q8_0 --name agentflow-world-planner
}
if [ "${STAGE:-all}" = planner ]; then
    [ -f "$OUT" ] || { echo "make-model.sh: STAGE=planner needs $OUT" >&2; exit 4; }
    planner_phase
    say "done: $PLANNER_OUT"
    exit 0
fi

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
    # A fixed sample of 15,000 conversations (shuf reading `yes` as its randomness) keeps the
    # merge counting to a second.
    shuf -n 15000 --random-source=<(yes) "$B/sft.jsonl" >"$B/vocab_sample.jsonl"
    $AF model make-vocab --input "$B/vocab_sample.jsonl" --input "$B/world/passages.jsonl" \
        --size "$VOCAB" "$B/vocab.gguf"
fi
if [ ! -f "$B/init.gguf" ]; then
    say "initial weights: $SHAPE"
    $AF model make-random --arch qwen2 --shape "$SHAPE" --type F32 --seed "$SEED" \
        --vocab-from "$B/vocab.gguf" "$B/init.gguf"
fi
# The phases' data, all written before any training (STAGE=data stops there).
# Copy drills (`world drills`: a sub-goal's numbers into a Python call, a printed result into
# an answer, one value among several facts, a list repeated). Copying digits from the context
# is the capability a model this small may never find on the transcripts: with the loss on
# every token (the first recipe) a rebuild in another data order copied no digit at all, and
# drills mixed into that loss did not teach it either; on the drills' replies alone it is
# learnt in 2,000 short steps (40 of 40 held-out drills). docs/WORLD.md has the figures.
if [ ! -f "$B/drills.jsonl" ]; then
    say "copy drills: $DRILLS + $DRILLS1"
    $AF world drills --out "$B/drills.jsonl" --n "$DRILLS" --seed 3
    $AF world drills --out "$B/drills1.jsonl" --n "$DRILLS1" --seed 5
fi
# Phase 1's data: world 1's transcripts with more drills, so that the copying is kept while
# the formats are learnt.
if [ ! -f "$B/p1.jsonl" ]; then
    cat "$B/sft.jsonl" "$B/drills1.jsonl" >"$B/p1.jsonl"
fi
# Phase 2's data: traces of worlds with other seeds (the same language, other names and
# facts), so that a name or a value can only be read from the context, not recalled: two
# worlds at TRACES3 questions a family and twelve at TRACES4, with each world's final answers
# counted twice, samples of world 1's traces and drills. After phase 1 alone the model chained
# names poorly on a world it had never seen (world 13's multi-hop questions).
# other_worlds NAME OWN TRACES SEEDS...: NAME.jsonl, the worlds' traces, their answers again
# and OWN of world 1's.
other_worlds() {
    local name=$1 own=$2 traces=$3
    shift 3
    [ -f "$B/$name.jsonl" ] && return 0
    local mix=() answers=() w
    for w in "$@"; do
        if [ ! -f "$B/w$w/sft.jsonl" ]; then
            mkdir -p "$B/w$w"
            $AF world build --seed "$w" --out "$B/w$w/world"
            $AF world traces --world "$B/w$w/world" --split train --limit "$traces" \
                --prompts compact --out "$B/w$w/sft.jsonl" --concurrency "$THREADS"
        fi
        mix+=("$B/w$w/sft.jsonl")
        answers+=("$B/w$w/sft.direct_output.jsonl")
    done
    shuf -n "$own" --random-source=<(yes) "$B/sft.jsonl" >"$B/${name}_own.jsonl"
    cat "${mix[@]}" "${answers[@]}" "$B/${name}_own.jsonl" >"$B/$name.jsonl"
}
if [ "$SFT2_STEPS" -gt 0 ]; then
    say "traces of other worlds: $WORLDS3 ($TRACES3 a family), $WORLDS4 ($TRACES4)"
    # shellcheck disable=SC2086 # the seeds are lists
    other_worlds read3 30000 "$TRACES3" $WORLDS3
    # shellcheck disable=SC2086
    other_worlds read4 15000 "$TRACES4" $WORLDS4
    # The phase-0 drills again (NAMES2 > 0 makes that share of them copy names of the
    # worlds' syllables; tried at 0.5 against garbled names in multi-hop chains, no better).
    if [ ! -f "$B/drills2.jsonl" ]; then
        $AF world drills --out "$B/drills2.jsonl" --n "$DRILLS" --seed 3 --names "$NAMES2"
    fi
    [ -f "$B/p2.jsonl" ] || cat "$B/read3.jsonl" "$B/read4.jsonl" "$B/drills2.jsonl" >"$B/p2.jsonl"
fi
# Phase 3's data: every training question of worlds WORLDS5 whose solution reads a fact of
# FACTS5, with as many conversations of phase 2's data. After phase 2 the model answered no
# occupation question (0 of 23 in the test evals, 2 of 30 held-out verifier calls): unlike a
# name or a number, an occupation is one word with no cue it shares with the reply ("Known:
# X: occupation navigator." after "X was a navigator born in ..."), so no induction copies it,
# and at one conversation in 150 the model settled for the prior over the 18 occupations.
# At one in two it reads them within 250 steps (docs/WORLD.md).
if [ "$SFT3_STEPS" -gt 0 ] && [ "$SFT2_STEPS" -gt 0 ] && [ ! -f "$B/p3.jsonl" ]; then
    say "traces of the questions on $FACTS5 in worlds $WORLDS5"
    facts=()
    for w in $WORLDS5; do
        if [ ! -f "$B/w$w/facts.jsonl" ]; then
            mkdir -p "$B/w$w"
            [ -f "$B/w$w/world/wiki.db" ] || $AF world build --seed "$w" --out "$B/w$w/world"
            rm -f "$B/w$w/facts.jsonl.tmp" # an interrupted run's part
            for f in ${FACTS5//,/ }; do
                $AF world traces --world "$B/w$w/world" --split train \
                    --bench world-lookup,world-multihop --fact "$f" --limit "$TRACES5" \
                    --prompts compact \
                    --out "$B/w$w/fact-$f.jsonl" --concurrency "$THREADS"
                cat "$B/w$w/fact-$f.jsonl" >>"$B/w$w/facts.jsonl.tmp"
            done
            mv "$B/w$w/facts.jsonl.tmp" "$B/w$w/facts.jsonl"
        fi
        facts+=("$B/w$w/facts.jsonl")
    done
    cat "${facts[@]}" >"$B/p3_facts.jsonl"
    shuf -n "$(wc -l <"$B/p3_facts.jsonl")" --random-source=<(yes) "$B/p2.jsonl" >"$B/p3_own.jsonl"
    cat "$B/p3_facts.jsonl" "$B/p3_own.jsonl" >"$B/p3.jsonl.tmp"
    mv "$B/p3.jsonl.tmp" "$B/p3.jsonl"
fi
[ "${STAGE:-all}" = data ] && exit 0

# train NAME FROM DATA STEPS SEED LR WARMUP BATCH MAX_SEQ: one SFT phase on the replies (the
# loss on assistant tokens only), resumable from its checkpoints, skipped once done.
train() {
    local name=$1 from=$2 data=$3 steps=$4 seed=$5 lr=$6 warmup=$7 batch=$8 seq=$9
    [ -f "$B/$name/done" ] && return 0
    local resume=()
    [ -d "$B/$name" ] && resume=(--resume)
    $AF train sft --model "$from" --data "$data" --out "$B/$name" --full \
        --loss-on assistant --lr "$lr" --schedule cosine --warmup "$warmup" --min-lr-ratio 0.1 \
        --weight-decay 0.01 --steps "$steps" --batch "$batch" --max-seq "$seq" \
        --seed "$seed" --threads "$THREADS" --save-every 250 "${resume[@]}"
    touch "$B/$name/done"
}
say "SFT phase 0 (copy drills alone): $DRILL_STEPS steps"
train p0-drills "$B/init.gguf" "$B/drills.jsonl" "$DRILL_STEPS" "$SEED" 1e-3 50 \
    $((SFT_BATCH * 2)) 256
say "SFT phase 1 (world 1's replies and drills): $SFT_STEPS steps"
train p1-world1 "$B/p0-drills/model.gguf" "$B/p1.jsonl" "$SFT_STEPS" "$SEED" 1e-3 200 "$SFT_BATCH" 1024
final="$B/p1-world1/model.gguf"
if [ "$SFT2_STEPS" -gt 0 ]; then
    say "SFT phase 2 (other worlds and drills): $SFT2_STEPS steps"
    train p2-worlds "$final" "$B/p2.jsonl" "$SFT2_STEPS" 3 3e-4 100 "$SFT_BATCH" 1024
    final="$B/p2-worlds/model.gguf"
    if [ "$SFT3_STEPS" -gt 0 ]; then
        say "SFT phase 3 (the questions on $FACTS5): $SFT3_STEPS steps"
        train p3-facts "$final" "$B/p3.jsonl" "$SFT3_STEPS" 5 3e-4 50 "$SFT_BATCH" 1024
        final="$B/p3-facts/model.gguf"
    fi
fi
[ "${STAGE:-all}" = sft ] && exit 0
say "quantize to Q8_0: $OUT"
$AF model quantize "$final" "$OUT" Q8_0 --name agentflow-world
$AF train plot "$B/p0-drills"
$AF train plot "$B/p1-world1"
if [ "$SFT2_STEPS" -gt 0 ]; then
    $AF train plot "$B/p2-worlds"
fi
if [ "$SFT2_STEPS" -gt 0 ] && [ "$SFT3_STEPS" -gt 0 ]; then
    $AF train plot "$B/p3-facts"
fi
planner_phase
if [ "$GRPO_STEPS" -gt 0 ]; then
    say "done: $OUT, $PLANNER_OUT"
else
    say "done: $OUT"
fi
