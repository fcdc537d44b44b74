// bench/llamacpp_server.mjs - a small OpenAI-compatible HTTP front over llama.cpp itself, so
// that bench/agent.sh can run the whole flow against llama.cpp through `--url` and compare it
// with the in-process engine on the same GGUF. llama.cpp comes prebuilt (CPU) in the npm
// package node-llama-cpp, loaded as bench/llamacpp.mjs loads it (.ci/run installs it):
//
//   node bench/llamacpp_server.mjs NLC_DIR MODEL.gguf [--port P] [--parallel N] [--ctx C]
//                                  [-t THREADS] [--kv-type F16|F32]
//
// One context with N sequences (--parallel, default 1) of C tokens each (--ctx, default 4096);
// a request takes a free sequence (the one whose cached tokens share the longest prefix with its
// prompt) or waits for one. Concurrent requests are evaluated in the same llama.cpp batches.
// Routes: POST /v1/chat/completions (non-streaming), GET /v1/models.
//
// The prompt is rendered with ChatML exactly as src/engine/chat.c does it (the model's default
// system message too, when its chat template writes one and the request has none), tokenized
// with special tokens (BOS only when the vocabulary asks for it), and the sequence's cached
// prefix is reused: the longest common prefix with the sequence's context tokens is kept (at
// most all but the prompt's last token, whose logits are needed), the rest is erased and only
// the new tokens are evaluated. Sampling: greedy at temperature 0, else temperature / top_p /
// seed; frequency_penalty over the generated tokens (OpenAI's meaning, as our engine does);
// stop strings; max_tokens; EOS ends the reply unless "ignore_eos": true. usage reports
// prompt_tokens, completion_tokens and prompt_tokens_details.cached_tokens (the reused prefix).
// Prints "listening on PORT" on stdout when ready; errors go to stderr.
import {createServer} from "node:http";
import {resolve} from "node:path";

const USAGE = "usage: node bench/llamacpp_server.mjs NLC_DIR MODEL.gguf [--port P] " +
              "[--parallel N] [--ctx C] [-t THREADS] [--kv-type F16|F32]";
const MAX_BODY_BYTES = 16 << 20;

function parseArgs(argv) {
    const o = {port: 0, parallel: 1, ctx: 4096, threads: 2, kvType: "F16", dir: null, model: null};
    const num = {"--port": "port", "--parallel": "parallel", "--ctx": "ctx", "-t": "threads"};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a in num && i + 1 < argv.length) {
            o[num[a]] = Number(argv[++i]);
            if (!Number.isInteger(o[num[a]]) || o[num[a]] < (a === "--port" ? 0 : 1))
                throw new Error(`${a}: expected a ${a === "--port" ? "port" : "positive"} integer`);
        } else if (a === "--kv-type" && i + 1 < argv.length) {
            o.kvType = argv[++i].toUpperCase();
        } else if (a.startsWith("-")) {
            throw new Error(`unknown option ${a}`);
        } else if (o.dir === null) {
            o.dir = a;
        } else if (o.model === null) {
            o.model = a;
        } else {
            throw new Error(`unexpected argument ${a}`);
        }
    }
    if (o.dir === null || o.model === null)
        throw new Error("NLC_DIR and MODEL.gguf are required");
    return o;
}

let opt;
try {
    opt = parseArgs(process.argv.slice(2));
} catch (e) {
    console.error(`llamacpp_server: ${e.message}\n${USAGE}`);
    process.exit(2);
}

const {getLlama} = await import(resolve(opt.dir) + "/node_modules/node-llama-cpp/dist/index.js");
const llama = await getLlama({gpu: false, build: "never", logLevel: "error",
                              maxThreads: opt.threads});
const model = await llama.loadModel({modelPath: opt.model});
const ctx = await model.createContext({
    sequences: opt.parallel, contextSize: opt.ctx, threads: {ideal: opt.threads, min: opt.threads},
    flashAttention: false, experimentalKvCacheKeyType: opt.kvType,
    experimentalKvCacheValueType: opt.kvType});
const meta = model.fileInfo.metadata;
const modelName = meta.general?.name ?? opt.model;
const addBos = meta.tokenizer?.ggml?.add_bos_token === true && model.tokens.bos != null;
const defaultSystem = chatmlDefaultSystem(meta.tokenizer?.chat_template);

// src/engine/chat.c's chat_template_default_system: Qwen2.5's templates write their default
// system message as a plain literal after "<|im_start|>system\n".
function chatmlDefaultSystem(jinja) {
    if (typeof jinja !== "string" || !jinja.includes("<|im_start|>"))
        return null;
    const marker = "<|im_start|>system\\n";
    for (let p = jinja.indexOf(marker); p >= 0; p = jinja.indexOf(marker, p + 1)) {
        const start = p + marker.length;
        const end = jinja.indexOf("<|im_end|>", start);
        if (end <= start)
            continue;
        const lit = jinja.slice(start, end);
        if (/[{'"]/.test(lit))
            continue;
        return lit;
    }
    return null;
}

// src/engine/chat.c's chat_format for CHAT_TEMPLATE_CHATML, with the assistant turn opened.
function renderChatml(messages) {
    let s = "";
    if (defaultSystem !== null && (messages.length === 0 || messages[0].role !== "system"))
        s += `<|im_start|>system\n${defaultSystem}<|im_end|>\n`;
    for (const m of messages)
        s += `<|im_start|>${m.role}\n${m.content ?? ""}<|im_end|>\n`;
    return s + "<|im_start|>assistant\n";
}

// --- sequences: a free list, and requests waiting for one ------------------------------------
const free = [];
for (let i = 0; i < opt.parallel; i++)
    free.push(ctx.getSequence());
const waiting = [];

function commonPrefix(a, b) {
    const n = Math.min(a.length, b.length);
    let i = 0;
    while (i < n && a[i] === b[i])
        i++;
    return i;
}

function acquire(prompt) {
    if (free.length > 0) {
        let best = 0, bestLen = -1;
        for (let i = 0; i < free.length; i++) {
            const l = commonPrefix(free[i].contextTokens, prompt);
            if (l > bestLen) {
                best = i;
                bestLen = l;
            }
        }
        return Promise.resolve(free.splice(best, 1)[0]);
    }
    return new Promise((res) => waiting.push(res));
}

function release(seq) {
    const next = waiting.shift();
    if (next)
        next(seq);
    else
        free.push(seq);
}

// --- one completion -----------------------------------------------------------------------
class HttpError extends Error {
    constructor(status, message) {
        super(message);
        this.status = status;
    }
}

function firstStop(text, stops) {
    let at = -1;
    for (const s of stops) {
        const i = s ? text.indexOf(s) : -1;
        if (i >= 0 && (at < 0 || i < at))
            at = i;
    }
    return at;
}

async function complete(req) {
    if (!Array.isArray(req.messages) || req.messages.length === 0)
        throw new HttpError(400, "messages: expected a non-empty array");
    for (const m of req.messages)
        if (typeof m?.role !== "string" || (m.content != null && typeof m.content !== "string"))
            throw new HttpError(400, "messages: each needs a string role and string content");
    const maxTokens = req.max_tokens ?? req.max_completion_tokens ?? 2048;
    if (!Number.isInteger(maxTokens) || maxTokens < 1)
        throw new HttpError(400, "max_tokens: expected a positive integer");
    const temperature = req.temperature ?? 1;
    const ignoreEos = req.ignore_eos === true;
    const stops = req.stop == null ? [] : Array.isArray(req.stop) ? req.stop : [req.stop];
    const prompt = model.tokenize(renderChatml(req.messages), true);
    if (addBos)
        prompt.unshift(model.tokens.bos);
    const seq = await acquire(prompt);
    try {
        if (prompt.length + maxTokens > seq.contextSize)
            throw new HttpError(400, `prompt (${prompt.length} tokens) + max_tokens ` +
                                     `(${maxTokens}) exceed the context (${seq.contextSize})`);
        // Keep the longest common prefix, but evaluate at least the prompt's last token.
        const cached = Math.min(commonPrefix(seq.contextTokens, prompt), prompt.length - 1);
        if (cached < seq.nextTokenIndex)
            await seq.eraseContextTokenRanges([{start: cached, end: seq.nextTokenIndex}]);
        const out = [];
        const fp = req.frequency_penalty ?? 0;
        const gen = seq.evaluate(prompt.slice(cached), {
            temperature: temperature > 0 ? temperature : 0,
            topP: temperature > 0 ? req.top_p : undefined,
            seed: Number.isInteger(req.seed) ? req.seed : undefined,
            repeatPenalty: fp !== 0 ? {punishTokens: () => out, penalty: 1, frequencyPenalty: fp,
                                       presencePenalty: 0, maxPunishTokens: maxTokens}
                                    : undefined,
            yieldEogToken: ignoreEos,
        });
        let finish = "length", text = null;
        for await (const tok of gen) {
            out.push(tok);
            if (stops.length > 0) {
                const t = model.detokenize(out, false);
                const at = firstStop(t, stops);
                if (at >= 0) {
                    text = t.slice(0, at);
                    finish = "stop";
                    break;
                }
            }
            if (out.length >= maxTokens)
                break;
        }
        if (text === null) {
            if (out.length < maxTokens)
                finish = "stop"; // the generator ended on an end-of-generation token
            text = model.detokenize(out, false);
        }
        return {
            id: `chatcmpl-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`,
            object: "chat.completion",
            created: Math.floor(Date.now() / 1000),
            model: req.model ?? modelName,
            choices: [{index: 0, message: {role: "assistant", content: text},
                       finish_reason: finish}],
            usage: {prompt_tokens: prompt.length, completion_tokens: out.length,
                    total_tokens: prompt.length + out.length,
                    prompt_tokens_details: {cached_tokens: cached}},
        };
    } finally {
        release(seq);
    }
}

// --- HTTP ---------------------------------------------------------------------------------
function reply(res, status, obj) {
    const body = JSON.stringify(obj);
    res.writeHead(status, {"Content-Type": "application/json",
                           "Content-Length": Buffer.byteLength(body)});
    res.end(body);
}

function fail(res, status, message) {
    reply(res, status, {error: {message, type: status < 500 ? "invalid_request_error" : "server_error"}});
}

const server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (req.method === "GET" && path === "/v1/models") {
        reply(res, 200, {object: "list",
                         data: [{id: modelName, object: "model", owned_by: "llama.cpp"}]});
        return;
    }
    if (req.method !== "POST" || path !== "/v1/chat/completions") {
        fail(res, 404, `no route ${req.method} ${path}`);
        return;
    }
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
        size += c.length;
        if (size > MAX_BODY_BYTES) {
            fail(res, 413, `request body over ${MAX_BODY_BYTES} bytes`);
            req.destroy();
            return;
        }
        chunks.push(c);
    });
    req.on("end", async () => {
        if (size > MAX_BODY_BYTES)
            return;
        let body;
        try {
            body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        } catch (e) {
            fail(res, 400, `the body is not JSON: ${e.message}`);
            return;
        }
        if (body?.stream === true) {
            fail(res, 400, "stream: this server answers non-streaming requests only");
            return;
        }
        try {
            reply(res, 200, await complete(body));
        } catch (e) {
            if (!(e instanceof HttpError))
                console.error(`llamacpp_server: ${e.stack ?? e}`);
            fail(res, e instanceof HttpError ? e.status : 500, e.message);
        }
    });
});
server.keepAliveTimeout = 60000;
server.listen(opt.port, "127.0.0.1", () => {
    console.log(`listening on ${server.address().port}`);
});
for (const sig of ["SIGINT", "SIGTERM"])
    process.on(sig, () => {
        server.close();
        process.exit(0);
    });
