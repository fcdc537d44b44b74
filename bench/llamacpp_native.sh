#!/bin/bash
# bench/llamacpp_native.sh - the engine against a native llama.cpp build, side by side.
#
# node-llama-cpp (the npm package .ci/run installs into build/llamacpp) carries llama.cpp's
# source as a git bundle. This script builds llama-bench from it with -march=native (once, into
# $LLCPP, about 5 minutes on 2 cores; cmake, g++ and git needed) and then alternates, per type
# and pass, `llama-bench -m M -p PP -n TG -t T -r 1` (and `-p 0 -n TG -d PP`: decode at a depth
# of PP tokens) with `agentflow model bench M -p PP -n TG -t T` on the random Qwen2.5-0.5B-shaped
# files of bench/engine (made when missing). Prints one line per run and a table of the best of
# the passes with the ratios (docs/PERFORMANCE.md). tg is TG one-token steps from an empty
# context on both sides; tg@PP the same after a PP-token prompt (ours: tg_after_pp).
#
# Environment: TYPES ("F32 F16 BF16 Q8_0 Q4_0 Q4_K_M"), PASSES (3), PP (512), TG (128), THREADS (2),
# SHAPE (qwen2.5-0.5b; any make-random shape, e.g. custom:16,1024,16,4,2816, whose 1,024-wide
# rows make a Q4_K_M file of K-quants as a 7B's is),
# DIR (/tmp/agentflow-bench), LLCPP (build/llamacpp-native), NLC_DIR (build/llamacpp), AF
# (build/agentflow), ISA (native). ISA=avx2 compares the AVX2 kernels of both, as on a Zen 3
# host: llama.cpp built with AVX2, FMA, F16C and BMI2 only (no AVX-512, no AVX-VNNI; into
# LLCPP_AVX2, default build/llamacpp-avx2) against ours under AGENTFLOW_ISA=avx2. A quiet machine is
# needed: both sides spin their threads.
set -euo pipefail
cd "$(dirname "$0")/.."
TYPES=${TYPES:-F32 F16 BF16 Q8_0 Q4_0 Q4_K_M} SHAPE=${SHAPE:-qwen2.5-0.5b}
NAME=$(echo "$SHAPE" | tr ':,' '--')
PASSES=${PASSES:-3} PP=${PP:-512} TG=${TG:-128} THREADS=${THREADS:-2}
DIR=${DIR:-/tmp/agentflow-bench} LLCPP=${LLCPP:-build/llamacpp-native}
NLC_DIR=${NLC_DIR:-build/llamacpp} AF=${AF:-build/agentflow} ISA=${ISA:-native}
CPU_FLAGS=(-DGGML_NATIVE=ON)
if [ "$ISA" = avx2 ]; then
    LLCPP=${LLCPP_AVX2:-build/llamacpp-avx2}
    CPU_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
        -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF)
    export AGENTFLOW_ISA=avx2
elif [ "$ISA" != native ]; then
    echo "bench/llamacpp_native.sh: ISA must be native or avx2" >&2
    exit 2
fi
BUNDLE=$NLC_DIR/node_modules/node-llama-cpp/llama/gitRelease.bundle
VOCAB=${VOCAB:-../shared/data/reference/tokenizer/ggml-vocab-qwen2.gguf}

if [ ! -f "$BUNDLE" ]; then
    echo "bench/llamacpp_native.sh: no llama.cpp source at $BUNDLE (npm install --prefix" \
        "$NLC_DIR node-llama-cpp@3.22.1 --ignore-scripts); skipped" >&2
    exit 0
fi
for tool in cmake g++ git; do
    command -v $tool >/dev/null || { echo "bench/llamacpp_native.sh: $tool missing; skipped" >&2; exit 0; }
done
LB=$LLCPP/build/bin/llama-bench
if [ ! -x "$LB" ]; then
    rm -rf "$LLCPP"
    git -c advice.detachedHead=false clone -q "$BUNDLE" "$LLCPP"
    cmake -S "$LLCPP" -B "$LLCPP/build" "${CPU_FLAGS[@]}" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF >"$LLCPP/cmake.log" 2>&1
    cmake --build "$LLCPP/build" --target llama-bench -j"$THREADS" >"$LLCPP/build.log" 2>&1
fi
echo "llama.cpp: $(git -C "$LLCPP" log --format=%h -1), built $ISA; ours: $(git log --format=%h -1)," \
    "kernels ${AGENTFLOW_ISA:-auto}" >&2

mkdir -p "$DIR"
for t in $TYPES; do
    M=$DIR/$NAME-$t.gguf
    [ -f "$M" ] || "$AF" model make-random --arch qwen2 --shape "$SHAPE" --type "$t" --seed 1 \
        --vocab-from "$VOCAB" "$M" >/dev/null
done

# the avg_ts column of llama-bench's csv rows
ts() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); if ($i == "avg_ts") c = i }; next }
             { gsub(/"/, "", $c); printf "%s ", $c }'
}
res=$(mktemp)
trap 'rm -f "$res"' EXIT
for pass in $(seq "$PASSES"); do
    for t in $TYPES; do
        M=$DIR/$NAME-$t.gguf
        l=$("$LB" -m "$M" -p "$PP" -n "$TG" -t "$THREADS" -r 1 -o csv 2>/dev/null | ts)
        ld=$("$LB" -m "$M" -p 0 -n "$TG" -d "$PP" -t "$THREADS" -r 1 -o csv 2>/dev/null | ts)
        o=$("$AF" model bench "$M" -p "$PP" -n "$TG" -t "$THREADS" 2>/dev/null |
            grep -oE '"(pp|tg|tg_after_pp)_tokens_per_s":[0-9.]+' | cut -d: -f2 | tr '\n' ' ')
        echo "pass $pass $t llama.cpp pp/tg/tg@$PP: $l$ld ours pp/tg/tg@$PP: $o"
        echo "$t $l$ld $o" >>"$res"
    done
done
echo
echo "| type | llama.cpp pp$PP | ours pp$PP | ratio | llama.cpp tg$TG | ours tg$TG | ratio | llama.cpp tg$TG@$PP | ours tg$TG@$PP | ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for t in $TYPES; do
    awk -v t="$t" '$1 == t {
        if ($2 > lp) lp = $2; if ($3 > lt) lt = $3; if ($4 > ld) ld = $4
        if ($5 > op) op = $5; if ($6 > ot) ot = $6; if ($7 > od) od = $7 }
        END { printf "| %s | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx |\n", t,
              lp, op, op / lp, lt, ot, ot / lt, ld, od, od / ld }' "$res"
done
