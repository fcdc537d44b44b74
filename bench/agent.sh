#!/usr/bin/env bash
# bench/agent.sh - the whole flow on the in-process engine against the same flow over HTTP to
# llama.cpp itself (issue 17): one batch of queries through `agentflow eval run` at each
# concurrency, on the same GGUF, three ways:
#   in-process        --url gguf:MODEL --threads THREADS
#   in-process+draft  the same with --draft DRAFT (prompt-lookup decoding; 0 skips this run)
#   llama.cpp HTTP    --url http://127.0.0.1:PORT/v1, PORT being bench/llamacpp_server.mjs
#                     (node-llama-cpp, one context with as many sequences as the concurrency,
#                     started afresh for each concurrency as each in-process run is)
# Same flags both ways: --max-steps, the Generalist tool only, --chat-template chatml, and a
# config of max_tokens MAX_TOKENS, temperature 0 and ignore_eos true, so that every LLM call
# generates exactly MAX_TOKENS tokens on both sides (the work does not depend on where a model
# would have stopped). No response cache (--no-cache), no retries, and a time limit far away.
#
# Prints a markdown table: solves, wall s (from the first LLM call's start to the last solve's
# end, from the traces: model loading and process start are not counted), solves/s, LLM calls,
# LLM calls/s, prompt and completion tokens, prefill tokens avoided (prompt tokens served from a
# cached prefix: the radix tree in-process, the sequence's kept prefix in the server) and draft
# acceptance. Then the in-process / HTTP ratio of solves/s at each concurrency.
#
# Environment (defaults in brackets):
#   N [8] queries; CONCURRENCY ["1 8"] (spaces or commas); THREADS [2]; MAX_TOKENS [48];
#   MAX_STEPS [2]; DRAFT [8]; CTX [4096] tokens per server sequence; KV_TYPE [F16] the
#   server's KV cache type (llama.cpp's default; F32 is what our engine keeps);
#   LLAMACPP [1] 0 skips the llama.cpp side (the in-process runs alone, to compare builds);
#   NLC_DIR [build/llamacpp] the folder whose node_modules holds node-llama-cpp (.ci/run);
#   MODEL [build/bench-agent/qwen2.5-0.5b-q8_0.gguf] made when missing with
#   `model make-random --shape qwen2.5-0.5b --type Q8_0 --seed 1 --vocab-from VOCAB`;
#   VOCAB [../shared/data/reference/tokenizer/ggml-vocab-qwen2.gguf]; AGENTFLOW_BIN
#   [build/release/agentflow]; WORK [a new temporary folder, kept] run folders and logs.
# Without node or node-llama-cpp it prints why on stderr, "skipped", and exits 0.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${AGENTFLOW_BIN:-$ROOT/build/release/agentflow}
N=${N:-8}
CONCURRENCY=${CONCURRENCY:-"1 8"}
THREADS=${THREADS:-2}
MAX_TOKENS=${MAX_TOKENS:-48}
MAX_STEPS=${MAX_STEPS:-2}
DRAFT=${DRAFT:-8}
CTX=${CTX:-4096}
KV_TYPE=${KV_TYPE:-F16}
LLAMACPP=${LLAMACPP:-1}
NLC_DIR=${NLC_DIR:-$ROOT/build/llamacpp}
MODEL=${MODEL:-$ROOT/build/bench-agent/qwen2.5-0.5b-q8_0.gguf}
VOCAB=${VOCAB:-$ROOT/../shared/data/reference/tokenizer/ggml-vocab-qwen2.gguf}
TOOL=Generalist_Solution_Generator_Tool

say() { echo "bench/agent: $*" >&2; }
die() {
    say "$*"
    exit 1
}

if ! command -v node >/dev/null 2>&1; then
    say "node is not installed: the llama.cpp side cannot run"
    say "skipped"
    exit 0
fi
if [ ! -f "$NLC_DIR/node_modules/node-llama-cpp/dist/index.js" ]; then
    say "node-llama-cpp not found under NLC_DIR=$NLC_DIR (install it as .ci/run does:"
    say "  npm install --prefix build/llamacpp --omit=optional --ignore-scripts \\"
    say "      node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1)"
    say "skipped"
    exit 0
fi
[ -x "$BIN" ] || die "$BIN not found: build it first (make)"
for v in N THREADS MAX_TOKENS MAX_STEPS DRAFT CTX; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, not '${!v}'"
done
[ "$N" -ge 1 ] || die "N must be at least 1"
CONCURRENCY=${CONCURRENCY//,/ }
for c in $CONCURRENCY; do
    [[ $c =~ ^[1-9][0-9]*$ ]] || die "CONCURRENCY: '$c' is not a positive integer"
done

if [ ! -f "$MODEL" ]; then
    [ -f "$VOCAB" ] || die "no model at $MODEL and no vocabulary at $VOCAB to make one"
    mkdir -p "$(dirname "$MODEL")"
    say "making $MODEL (random weights, Q8_0)"
    "$BIN" model make-random --arch qwen2 --shape qwen2.5-0.5b --type Q8_0 --seed 1 \
        --vocab-from "$VOCAB" "$MODEL" >&2
fi

WORK=${WORK:-$(mktemp -d /tmp/agentflow-bench-agent.XXXXXX)}
mkdir -p "$WORK/data/bamboogle"
say "work folder $WORK"

# N distinct questions (distinct so that no solve reuses another's prompts wholesale). The
# bench name only picks a scorer; the scores do not matter here.
{
    echo "["
    for ((i = 0; i < N; i++)); do
        sep=","
        [ "$i" -eq $((N - 1)) ] && sep=""
        echo "  {\"question\": \"Who was president of the United States in the year $((1790 + 7 * i))," \
            "and what was the population of its largest city then?\", \"answer\": [\"unknown\"]}$sep"
    done
    echo "]"
} >"$WORK/data/bamboogle/data.json"

cat >"$WORK/config.json" <<EOF
{"max_tokens": $MAX_TOKENS, "temperature": 0, "ignore_eos": true, "max_retries": 0,
 "timeout_s": 86400, "max_time": 86400}
EOF

SERVER_PID=""
stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
trap stop_server EXIT

# start_server C: a fresh server (nothing cached from an earlier run) with C sequences on a
# free port; sets PORT.
start_server() {
    local c=$1 log="$WORK/server-c$1.log"
    node "$ROOT/bench/llamacpp_server.mjs" "$NLC_DIR" "$MODEL" --port 0 --parallel "$c" \
        --ctx "$CTX" -t "$THREADS" --kv-type "$KV_TYPE" >"$log" 2>&1 &
    SERVER_PID=$!
    PORT=""
    for ((i = 0; i < 600; i++)); do
        PORT=$(sed -n 's/^listening on \([0-9][0-9]*\)$/\1/p' "$log")
        [ -n "$PORT" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.5
    done
    if [ -z "$PORT" ]; then
        cat "$log" >&2
        die "the llama.cpp server did not start (log above)"
    fi
    say "llama.cpp server on port $PORT ($c sequences, $THREADS threads, KV $KV_TYPE)"
}

# summarize RUNDIR SIDE CONCURRENCY: one JSON line from results.jsonl, summary.json and the
# traces (for the span of the solves).
summarize() {
    node - "$@" <<'EOF'
const fs = require("fs");
const [dir, side, conc] = process.argv.slice(2);
const sum = JSON.parse(fs.readFileSync(`${dir}/summary.json`, "utf8")).total;
const t = {side, concurrency: Number(conc), solves: 0, failed: sum.failed, calls: 0,
           prompt_tokens: 0, completion_tokens: 0, cached_tokens: null, draft_tokens: null,
           draft_accepted: null, first_ms: Infinity, last_ms: -Infinity};
const add = (k, v) => { if (Number.isInteger(v) && v >= 0) t[k] = (t[k] ?? 0) + v; };
for (const line of fs.readFileSync(`${dir}/results.jsonl`, "utf8").split("\n")) {
    if (!line.trim())
        continue;
    const r = JSON.parse(line);
    t.solves++;
    for (const u of Object.values(r.tokens ?? {})) {
        t.calls += u.calls ?? 0;
        add("prompt_tokens", u.prompt_tokens);
        add("completion_tokens", u.completion_tokens);
        add("cached_tokens", u.cached_tokens);
        add("draft_tokens", u.draft_tokens);
        add("draft_accepted", u.draft_accepted);
    }
    if (!r.trace)
        continue;
    for (const tl of fs.readFileSync(`${dir}/${r.trace}`, "utf8").split("\n")) {
        if (!tl.trim())
            continue;
        const rec = JSON.parse(tl);
        const at = Date.parse(rec.time);
        if (rec.type === "llm")
            t.first_ms = Math.min(t.first_ms, at - (rec.latency_ms ?? 0));
        t.last_ms = Math.max(t.last_ms, at);
    }
}
t.wall_s = t.last_ms > t.first_ms ? (t.last_ms - t.first_ms) / 1000 : null;
delete t.first_ms;
delete t.last_ms;
console.log(JSON.stringify(t));
EOF
}

# run SIDE CONCURRENCY URL [extra flags...]
run() {
    local side=$1 c=$2 url=$3
    shift 3
    local out="$WORK/run-$side-c$c"
    rm -rf "$out"
    say "$side, concurrency $c"
    local t0 rc=0
    t0=$(date +%s%N)
    "$BIN" eval run --bench bamboogle --data-dir "$WORK/data" --out "$out" --no-cache --quiet \
        --concurrency "$c" --url "$url" --max-steps "$MAX_STEPS" --tools "$TOOL" \
        --chat-template chatml --config "$WORK/config.json" "$@" \
        >"$out.stdout" 2>"$out.stderr" || rc=$?
    say "  exit $rc, $((($(date +%s%N) - t0) / 1000000)) ms with process start and model load"
    [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || {
        cat "$out.stderr" >&2
        die "eval run failed (exit $rc)"
    }
    summarize "$out" "$side" "$c" >>"$WORK/summary.jsonl"
}

: >"$WORK/summary.jsonl"
for c in $CONCURRENCY; do
    run in-process "$c" "gguf:$MODEL" --threads "$THREADS"
    if [ "$DRAFT" -gt 0 ]; then
        run in-process+draft "$c" "gguf:$MODEL" --threads "$THREADS" --draft "$DRAFT"
    fi
    if [ "$LLAMACPP" = 1 ]; then
        start_server "$c"
        run llama.cpp-http "$c" "http://127.0.0.1:$PORT/v1"
        stop_server
    fi
done

node - "$WORK/summary.jsonl" "$N" "$MAX_TOKENS" "$MAX_STEPS" "$THREADS" <<'EOF'
const fs = require("fs");
const [path, n, maxTok, maxSteps, threads] = process.argv.slice(2);
const rows = fs.readFileSync(path, "utf8").split("\n").filter((l) => l.trim()).map(JSON.parse);
const f = (x, d) => (x == null || !Number.isFinite(x) ? "–" : x.toFixed(d));
const int = (x) => (x == null ? "–" : x.toLocaleString("en-US"));
console.log(`${n} queries, --max-steps ${maxSteps}, max_tokens ${maxTok} with ignore_eos, ` +
            `${threads} threads\n`);
console.log("| side | concurrency | solves | failed | wall s | solves/s | LLM calls | LLM calls/s | " +
            "prompt tokens | completion tokens | prefill tokens avoided | draft acceptance |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|---|");
for (const r of rows) {
    const reuse = r.cached_tokens == null ? "–"
        : `${int(r.cached_tokens)} (${f(100 * r.cached_tokens / r.prompt_tokens, 1)}%)`;
    const draft = r.draft_tokens == null ? "–"
        : `${int(r.draft_accepted)} / ${int(r.draft_tokens)} (${f(100 * r.draft_accepted / r.draft_tokens, 1)}%)`;
    console.log(`| ${r.side} | ${r.concurrency} | ${r.solves} | ${r.failed} | ${f(r.wall_s, 2)} | ` +
                `${f(r.solves / r.wall_s, 3)} | ${r.calls} | ${f(r.calls / r.wall_s, 2)} | ` +
                `${int(r.prompt_tokens)} | ${int(r.completion_tokens)} | ${reuse} | ${draft} |`);
}
console.log("");
for (const c of [...new Set(rows.map((r) => r.concurrency))]) {
    const get = (s) => rows.find((r) => r.side === s && r.concurrency === c);
    const a = get("in-process"), b = get("llama.cpp-http");
    if (!a || !b)
        continue;
    const ratio = (a.solves / a.wall_s) / (b.solves / b.wall_s);
    let line = `concurrency ${c}: in-process / llama.cpp over HTTP = ${f(ratio, 2)}x solves/s (target 2x)`;
    if (a.calls !== b.calls || a.completion_tokens !== b.completion_tokens)
        line += `; NOT the same work: ${a.calls} / ${b.calls} LLM calls, ` +
                `${a.completion_tokens} / ${b.completion_tokens} completion tokens`;
    console.log(line);
}
EOF
