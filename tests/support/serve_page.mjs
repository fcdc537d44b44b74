// serve_page.mjs - drives headless Chromium over the DevTools protocol (no npm package: the
// WebSocket of Node itself) against the page of `agentflow serve`, for tests/test_serve_e2e.c.
// Usage: node [--experimental-websocket] serve_page.mjs CHROMIUM BASE_URL OUT.png QUESTION [TRACE]
// (the flag on Node 20, whose global WebSocket is behind it)
// Opens the page, asks QUESTION, waits until the answer shows, saves a screenshot, and prints
// one JSON line: the answer, the tool of each step card, the text of each result, the number of
// <script> elements, and whether a dialog (an injected alert) ever opened. With TRACE (a
// --trace JSONL file) it then loads that file into the trace viewer and adds what the viewer
// drew (trace_steps, trace_answer). Exits 1 on failure.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [chromium, base, png, question, traceFile] = process.argv.slice(2);
if (typeof WebSocket !== "function") {
  console.error("serve_page: this Node has no global WebSocket (Node 20 needs --experimental-websocket)");
  process.exit(1);
}

const TIMEOUT_MS = 120000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const profile = mkdtempSync(join(tmpdir(), "af-chromium-"));
const browser = spawn(chromium, [
  "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
  "--disable-dev-shm-usage", "--user-data-dir=" + profile, "--remote-debugging-port=0",
  "--window-size=1280,1100", "about:blank",
], { stdio: ["ignore", "ignore", "ignore"] });

async function until(what, fn) {
  const end = Date.now() + TIMEOUT_MS;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(100);
  }
}

let ws, nextId = 1, dialogs = 0;
const pending = new Map();
function send(method, params) {
  const id = nextId++;
  ws.send(JSON.stringify({ id, method, params: params || {} }));
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}
async function evaluate(expr) {
  const r = await send("Runtime.evaluate", { expression: expr, returnByValue: true, awaitPromise: true });
  if (r.exceptionDetails) throw new Error("page: " + JSON.stringify(r.exceptionDetails));
  return r.result.value;
}

try {
  const portFile = join(profile, "DevToolsActivePort");
  const port = await until("DevToolsActivePort", () =>
    existsSync(portFile) && readFileSync(portFile, "utf8").split("\n")[0]);
  const targets = await until("a page target", async () => {
    try {
      const list = await (await fetch("http://127.0.0.1:" + port + "/json/list")).json();
      return list.find((t) => t.type === "page");
    } catch (e) { return null; }
  });
  ws = new WebSocket(targets.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  ws.onmessage = (m) => {
    const msg = JSON.parse(m.data);
    if (msg.method === "Page.javascriptDialogOpening") {
      dialogs++;
      send("Page.handleJavaScriptDialog", { accept: true });
    }
    const p = msg.id && pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id);
    if (msg.error) p.reject(new Error(JSON.stringify(msg.error)));
    else p.resolve(msg.result);
  };
  await send("Page.enable");
  await send("Runtime.enable");
  await send("Page.navigate", { url: base + "/" });
  await until("the page and its tool list", () => evaluate(
    "document.readyState === 'complete' && document.querySelectorAll('#tools input').length > 0"));
  await evaluate("document.getElementById('question').value = " + JSON.stringify(question) +
                 "; document.getElementById('ask-button').click(); true");
  const answer = await until("the answer", () => evaluate(
    "(() => { const a = document.getElementById('answer'); " +
    "return !document.getElementById('answer-box').hidden && a.textContent; })()"));
  const info = await evaluate(`(() => ({
    tools: Array.from(document.querySelectorAll('#steps .step .tool')).map((e) => e.textContent),
    results: Array.from(document.querySelectorAll('#steps .step .result pre')).map((e) => e.textContent),
    result_html: Array.from(document.querySelectorAll('#steps .step .result pre')).map((e) => e.innerHTML),
    scripts: document.querySelectorAll('script').length,
    analysis: document.getElementById('analysis').textContent,
    runs: document.querySelectorAll('#runs li').length,
  }))()`);
  const shot = await send("Page.captureScreenshot", { format: "png", captureBeyondViewport: true });
  writeFileSync(png, Buffer.from(shot.data, "base64"));
  const out = { answer, dialogs, ...info };
  if (traceFile) {
    await send("DOM.enable");
    const doc = await send("DOM.getDocument");
    const input = await send("DOM.querySelector", { nodeId: doc.root.nodeId, selector: "#trace-file" });
    await evaluate("document.getElementById('steps').replaceChildren(); true");
    await send("DOM.setFileInputFiles", { nodeId: input.nodeId, files: [traceFile] });
    await until("the trace viewer", () => evaluate(
      "document.querySelectorAll('#trace-queries li').length > 0 && " +
      "document.querySelectorAll('#steps .step').length > 0 && " +
      "!document.getElementById('answer-box').hidden"));
    const t = await evaluate(`(() => ({
      trace_steps: Array.from(document.querySelectorAll('#steps .step .tool')).map((e) => e.textContent),
      trace_answer: document.getElementById('answer').textContent,
      trace_queries: document.querySelectorAll('#trace-queries li').length,
    }))()`);
    Object.assign(out, t);
  }
  console.log(JSON.stringify(out));
  ws.close();
} catch (e) {
  console.error("serve_page: " + (e && e.stack ? e.stack : e));
  process.exitCode = 1;
} finally {
  browser.kill("SIGKILL");
  await sleep(200);
  rmSync(profile, { recursive: true, force: true });
}
