// llamacpp_logits.mjs - the logits that llama.cpp itself computes for a token sequence, as an
// outside reference for tests/test_llamacpp.c. llama.cpp comes prebuilt (CPU only) from the npm
// package node-llama-cpp installed under NLC_DIR (.ci/run does that).
//
//   node llamacpp_logits.mjs NLC_DIR MODEL.gguf N_VOCAB ID,ID,...
//
// Prints one JSON array: for every position, the N_VOCAB raw logits of the next token, by id.
// Exit 0 on success; any failure (the model does not load, say) prints the error and exits 1.
import {resolve} from "node:path";

const [, , nlcDir, modelPath, nVocabArg, idsArg] = process.argv;
try {
    // resolved against the working directory: a relative import() would be taken from this file's
    const {getLlama} = await import(resolve(nlcDir) + "/node_modules/node-llama-cpp/dist/index.js");
    const nVocab = Number(nVocabArg);
    const ids = idsArg.split(",").map(Number);
    const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
    const model = await llama.loadModel({modelPath});
    // F32 KV cache and no flash attention: the math our engine does (llama.cpp defaults to F16).
    const ctx = await model.createContext({
        contextSize: 256, batchSize: 256, threads: 1, flashAttention: false,
        experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
    const seq = ctx.getSequence();
    const out = await seq.controlledEvaluate(ids.map((t) => [t, {generateNext: {logits: true}}]));
    const rows = out.map((o, i) => {
        const logits = o && o.next && o.next.logits;
        if (!logits)
            throw new Error(`no logits for position ${i}`);
        const row = new Array(nVocab).fill(null);
        for (const [id, v] of logits)
            row[id] = v;
        return row;
    });
    process.stdout.write(JSON.stringify(rows) + "\n");
    await ctx.dispose();
    await model.dispose();
    process.exit(0);
} catch (e) {
    process.stderr.write(`llamacpp_logits: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
}
