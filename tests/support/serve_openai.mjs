// serve_openai.mjs - the official `openai` npm client against `agentflow serve`, for
// tests/test_serve_e2e.c. Usage: node serve_openai.mjs NODE_MODULES BASE_URL API_KEY
// Prints one JSON line: the plain answer, the streamed answer, the step chunks seen, and the
// status and code of a request naming an unknown tool. Exits 1 on any unexpected failure.
import { createRequire } from "node:module";
import { join } from "node:path";

const [modules, base, key] = process.argv.slice(2);
const require = createRequire(join(modules, "noop.js"));
const mod = require("openai");
const OpenAI = mod.default || mod.OpenAI || mod;
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0 });
const messages = [{ role: "user", content: "What is 6 times 7?" }];

try {
  const plain = await client.chat.completions.create({ model: "agentflow", messages });
  const stream = await client.chat.completions.create({
    model: "agentflow", messages, stream: true, stream_options: { include_usage: true },
  });
  let streamed = "", steps = 0, tools = [], usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.agentflow && chunk.agentflow.type === "step") {
      steps++;
      tools.push(chunk.agentflow.tool);
    }
    const choice = chunk.choices && chunk.choices[0];
    if (choice && choice.delta && choice.delta.content) streamed += choice.delta.content;
    if (choice && choice.finish_reason) finish = choice.finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  let bad = null;
  try {
    await client.chat.completions.create({ model: "agentflow", messages, tools: ["No_Such_Tool"] });
  } catch (e) {
    bad = { status: e.status, code: e.code };
  }
  const models = await client.models.list();
  const ids = [];
  for await (const m of models) ids.push(m.id);
  console.log(JSON.stringify({
    plain: plain.choices[0].message.content, plain_tokens: plain.usage.total_tokens,
    streamed, steps, tools, finish, stream_tokens: usage && usage.total_tokens, bad, models: ids,
  }));
} catch (e) {
  console.error("serve_openai: " + (e && e.stack ? e.stack : e));
  process.exit(1);
}
