// bench/llamacpp.mjs - llama.cpp itself on this machine, for the same-hour comparison with
// bench/engine: prefill of P random tokens in one batch (llama-bench pp) and decode of N tokens
// one at a time from an empty context (llama-bench tg), on the same GGUF files. llama.cpp comes
// prebuilt (CPU backends for each x86-64 level, picked at run time) in the npm package
// node-llama-cpp; install it as .ci/run does:
//   npm install --prefix build/llamacpp --omit=optional --ignore-scripts \
//       node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1
//   node bench/llamacpp.mjs build/llamacpp MODEL.gguf... [-p 512] [-n 128] [-t 2] [-r 2]
// Prints one line per model: best of -r runs of each. KV cache F16 and flash attention off,
// llama-bench's defaults.
const args = process.argv.slice(2);
const opt = {p: 512, n: 128, t: 2, r: 2};
const files = [];
let dir = null;
for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (["-p", "-n", "-t", "-r"].includes(a) && i + 1 < args.length) {
        opt[a[1]] = Number(args[++i]);
    } else if (a.startsWith("-")) {
        console.error(`usage: node bench/llamacpp.mjs NLC_DIR MODEL.gguf... [-p 512] [-n 128] [-t 2] [-r 2]`);
        process.exit(2);
    } else if (dir === null) {
        dir = a;
    } else {
        files.push(a);
    }
}
if (dir === null || files.length === 0) {
    console.error(`usage: node bench/llamacpp.mjs NLC_DIR MODEL.gguf... [-p 512] [-n 128] [-t 2] [-r 2]`);
    process.exit(2);
}
const {resolve} = await import("node:path");
const {getLlama} = await import(resolve(dir) + "/node_modules/node-llama-cpp/dist/index.js");
const llama = await getLlama({gpu: false, build: "never", logLevel: "error", maxThreads: opt.t});
let seed = 12345;
const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
console.log(`llama.cpp (node-llama-cpp ${llama.buildType ?? ""}) cpu backend, ${opt.t} threads, ` +
            `pp${opt.p} / tg${opt.n}, best of ${opt.r}`);
for (const path of files) {
    const model = await llama.loadModel({modelPath: path});
    const vocab = Math.min(model.fileInfo.metadata.tokenizer.ggml.tokens.length, 100000);
    const ctx = await model.createContext({contextSize: opt.p + opt.n + 16, batchSize: opt.p,
                                           threads: {ideal: opt.t, min: opt.t},
                                           flashAttention: false});
    let best_pp = 0, best_tg = 0;
    for (let r = 0; r < opt.r; r++) {
        const seq = ctx.getSequence();
        const toks = Array.from({length: opt.p}, () => rand(vocab));
        let t0 = performance.now();
        await seq.evaluateWithoutGeneratingNewTokens(toks);
        const pp = opt.p / ((performance.now() - t0) / 1000);
        await seq.clearHistory();
        t0 = performance.now();
        for (let i = 0; i < opt.n; i++)
            await seq.evaluateWithoutGeneratingNewTokens([rand(vocab)]);
        const tg = opt.n / ((performance.now() - t0) / 1000);
        seq.dispose();
        best_pp = Math.max(best_pp, pp);
        best_tg = Math.max(best_tg, tg);
    }
    console.log(`${path}: pp${opt.p} ${best_pp.toFixed(1)} tok/s, tg${opt.n} ${best_tg.toFixed(1)} tok/s`);
    await ctx.dispose();
    await model.dispose();
}
