/*
 * app.js - the page of `agentflow serve`: ask a question, watch the flow's steps arrive, reopen
 * past runs, and read `--trace` JSONL files the same way.
 *
 * Every piece of model or tool text reaches the page through textContent, never as HTML, so
 * whatever a model or a tool writes shows as text. The server's Content-Security-Policy also
 * forbids inline scripts.
 */
"use strict";

const $ = (id) => document.getElementById(id);

/* An element with a class and text (set as text, never parsed as HTML). */
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

let apiKey = localStorage.getItem("agentflow-api-key") || "";
let following = null; /* the AbortController of the stream being followed */
let shownRun = null;  /* the id of the server run on view, or null (a dropped trace) */

function headers(withBody) {
  const h = {};
  if (withBody) h["Content-Type"] = "application/json";
  if (apiKey) h["Authorization"] = "Bearer " + apiKey;
  return h;
}

function askForKey() {
  $("key-box").hidden = false;
  $("api-key").focus();
}

async function api(path, opts) {
  opts = opts || {};
  const r = await fetch(path, { method: opts.method || "GET", body: opts.body,
                                headers: headers(!!opts.body), signal: opts.signal });
  if (r.status === 401) {
    askForKey();
    throw new Error("this server wants an API key: enter it at the top, then try again");
  }
  let j = null;
  try { j = await r.json(); } catch (e) { j = null; }
  if (!r.ok) throw new Error(j && j.error ? j.error.message : "HTTP " + r.status);
  return j;
}

function showError(msg) {
  $("error").textContent = msg || "";
  $("error").hidden = !msg;
}

function fmtMs(ms) {
  if (typeof ms !== "number") return "";
  return ms < 1000 ? ms.toFixed(0) + " ms" : (ms / 1000).toFixed(2) + " s";
}

function fmtResult(r) {
  if (r === null || r === undefined) return "";
  if (typeof r === "string") return r;
  if (Array.isArray(r) && r.length === 1 && typeof r[0] === "string") return r[0];
  return JSON.stringify(r, null, 2);
}

/* --- the run view -------------------------------------------------------------------- */
function resetRun(title, meta, runId) {
  $("run").hidden = false;
  shownRun = runId || null;
  $("trace-download").hidden = !shownRun;
  $("run-title").textContent = title || "";
  $("run-meta").textContent = meta || "";
  $("analysis").textContent = "";
  $("analysis-box").hidden = true;
  $("steps").replaceChildren();
  $("answer").textContent = "";
  $("direct-output").textContent = "";
  $("answer-box").hidden = true;
}

function stepCard(ev) {
  const li = el("li", "step" + (ev.failed ? " failed" : ""));
  li.dataset.step = String(ev.step);
  const head = el("div", "step-head");
  head.append(el("span", "step-no", "Step " + ev.step),
              el("span", "tool", ev.tool || "(no tool)"));
  if (ev.verdict) head.append(el("span", "verdict " + (ev.verdict === "STOP" ? "STOP" : "CONTINUE"), ev.verdict));
  if (typeof ev.step_ms === "number") head.append(el("span", "muted time", fmtMs(ev.step_ms)));
  if (ev.tokens) head.append(el("span", "muted tokens",
                                ev.tokens.prompt + " + " + ev.tokens.completion + " tokens"));
  if (ev.failed) head.append(el("span", "error", "failed"));
  li.append(head, el("p", "sub-goal", ev.sub_goal || ""));
  if (ev.command) li.append(el("pre", "command", ev.command));
  const det = el("details", "result");
  det.append(el("summary", null, "Result"), el("pre", null, fmtResult(ev.result)));
  li.append(det);
  return li;
}

function renderEvent(ev) {
  switch (ev.type) {
  case "query_analysis":
    $("analysis").textContent = ev.text || "";
    $("analysis-box").hidden = false;
    break;
  case "step":
    $("steps").append(stepCard(ev));
    break;
  case "answer": {
    $("answer").textContent = ev.answer || "";
    $("direct-output").textContent = ev.direct_output || "";
    $("answer-box").hidden = false;
    const u = ev.usage || {};
    const bits = [];
    if (typeof ev.steps === "number") bits.push(ev.steps + (ev.steps === 1 ? " step" : " steps"));
    if (typeof ev.time_ms === "number") bits.push(fmtMs(ev.time_ms));
    if (typeof u.total_tokens === "number") bits.push(u.total_tokens + " tokens");
    $("run-meta").textContent = bits.join(" \u00b7 ");
    break;
  }
  case "error":
  case "cancelled":
    $("run-meta").textContent = (ev.type === "error" ? "failed: " : "cancelled: ") + (ev.message || "");
    break;
  default:
    break;
  }
}

/* Reads an SSE body and hands each data line's JSON to onEvent. */
async function readSse(resp, onEvent) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        let ev = null;
        try { ev = JSON.parse(line.slice(6)); } catch (e) { ev = null; }
        if (ev) onEvent(ev);
      }
    }
  }
}

async function follow(id) {
  if (following) following.abort();
  const ctl = new AbortController();
  following = ctl;
  try {
    const r = await fetch("/v1/runs/" + encodeURIComponent(id) + "/events",
                          { headers: headers(false), signal: ctl.signal });
    if (r.status === 401) { askForKey(); throw new Error("an API key is needed"); }
    if (!r.ok) throw new Error("HTTP " + r.status);
    await readSse(r, (ev) => { if (following === ctl) renderEvent(ev); });
  } catch (e) {
    if (e.name !== "AbortError") showError("following the run: " + e.message);
  } finally {
    if (following === ctl) following = null;
    loadRuns();
  }
}

/* --- asking -------------------------------------------------------------------------- */
async function ask(question) {
  showError("");
  const body = { query: question };
  const ms = parseInt($("max-steps").value, 10);
  if (ms > 0) body.max_steps = ms;
  const mt = parseFloat($("max-time").value);
  if (mt > 0) body.max_time = mt;
  const boxes = document.querySelectorAll("#tools input[type=checkbox]");
  if (boxes.length) body.tools = Array.from(boxes).filter((b) => b.checked).map((b) => b.value);
  $("ask-button").disabled = true;
  try {
    const run = await api("/v1/runs", { method: "POST", body: JSON.stringify(body) });
    resetRun(question, "running\u2026", run.id);
    history.replaceState(null, "", "/?run=" + encodeURIComponent(run.id));
    loadRuns();
    await follow(run.id);
  } catch (e) {
    showError(e.message);
  } finally {
    $("ask-button").disabled = false;
  }
}

async function openRun(id) {
  showError("");
  try {
    const run = await api("/v1/runs/" + encodeURIComponent(id));
    resetRun(run.query, run.state, run.id);
    if (run.state === "queued" || run.state === "running") {
      await follow(id);
      return;
    }
    if (following) following.abort();
    (run.events || []).forEach(renderEvent);
    if (run.state === "interrupted") $("run-meta").textContent = "interrupted: the server stopped during this run";
  } catch (e) {
    showError(e.message);
  }
}

async function loadRuns() {
  let list;
  try { list = await api("/v1/runs?limit=50"); } catch (e) { return; }
  const ul = $("runs");
  ul.replaceChildren();
  for (const r of list.data || []) {
    const li = el("li", null, r.query || "(no query)");
    li.append(el("span", "state muted", r.state + (r.answer ? ": " + r.answer : "")));
    li.addEventListener("click", () => openRun(r.id));
    ul.append(li);
  }
  if (!ul.children.length) ul.append(el("li", "muted", "none yet"));
}

async function loadTools() {
  let list;
  try { list = await api("/v1/tools"); } catch (e) { return; }
  const fs = $("tools");
  fs.querySelectorAll("label").forEach((l) => l.remove());
  for (const t of list.data || []) {
    const label = el("label", null);
    const box = document.createElement("input");
    box.type = "checkbox";
    box.value = t.name;
    box.checked = true;
    label.title = t.description || "";
    label.append(box, document.createTextNode(" " + t.name));
    fs.append(label);
  }
}

/* Saves the run's trace records (GET /v1/runs/ID/trace, with the key) as a file. */
async function downloadTrace() {
  if (!shownRun) return;
  try {
    const r = await fetch("/v1/runs/" + encodeURIComponent(shownRun) + "/trace", { headers: headers(false) });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const url = URL.createObjectURL(await r.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = shownRun + ".jsonl";
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    showError("downloading the trace: " + e.message);
  }
}

/* --- the trace viewer ---------------------------------------------------------------- */
function verdictOf(text) {
  const m = /conclusion\s*:?\s*\**\s*(STOP|CONTINUE)/i.exec(text || "");
  return m ? m[1].toUpperCase() : "";
}

/* Turns one query's trace records into the events the run view draws. */
function traceEvents(recs) {
  const events = [];
  const fin = recs.find((r) => r.type === "final");
  const qa = recs.find((r) => r.type === "llm" && r.module === "query_analysis" && r.response);
  const analysis = qa ? qa.response : fin && fin.query_analysis;
  if (analysis) events.push({ type: "query_analysis", text: analysis });
  let memory = fin && Array.isArray(fin.memory) ? fin.memory : null;
  if (!memory) {
    const byStep = new Map();
    for (const r of recs) {
      if (r.type !== "tool" || byStep.has(r.step)) continue;
      byStep.set(r.step, { step: r.step, tool: r.tool, command: r.command, result: r.result,
                           failed: !!r.error });
    }
    memory = Array.from(byStep.values());
  }
  const timing = new Map(((fin && fin.timings && fin.timings.steps) || []).map((t) => [t.step, t.step_ms]));
  for (const m of memory) {
    const llm = recs.filter((r) => r.type === "llm" && r.step === m.step &&
                                   !["query_analysis", "direct_output", "final_output"].includes(r.module));
    const ver = llm.filter((r) => r.module === "verifier").pop();
    const tokens = { prompt: 0, completion: 0 };
    for (const r of llm) {
      const u = r.usage || {};
      if (u.prompt_tokens > 0) tokens.prompt += u.prompt_tokens;
      if (u.completion_tokens > 0) tokens.completion += u.completion_tokens;
    }
    events.push({ type: "step", step: m.step, tool: m.tool, sub_goal: m.sub_goal || "",
                  command: m.command, result: m.result, failed: !!m.failed,
                  verdict: ver ? verdictOf(ver.response) : "", step_ms: timing.get(m.step), tokens });
  }
  if (fin && fin.error) {
    events.push({ type: "error", message: fin.error });
  } else if (fin) {
    let total = 0;
    for (const u of Object.values(fin.usage || {})) {
      total += Math.max(0, u.prompt_tokens || 0) + Math.max(0, u.completion_tokens || 0);
    }
    events.push({ type: "answer", answer: fin.answer, direct_output: fin.direct_output,
                  steps: fin.steps, time_ms: fin.timings && fin.timings.total_ms,
                  usage: { total_tokens: total } });
  }
  return { title: (fin && fin.query) || "", events };
}

function showTrace(name, id, t) {
  if (following) following.abort();
  resetRun(t.title || (name + (id ? " \u00b7 " + id : "")), "from " + name);
  t.events.forEach(renderEvent);
}

function loadTraceText(name, text) {
  const groups = new Map();
  let bad = 0;
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    let rec;
    try { rec = JSON.parse(line); } catch (e) { bad++; continue; }
    if (!rec || typeof rec !== "object") { bad++; continue; }
    const id = rec.query_id === undefined || rec.query_id === null ? "" : String(rec.query_id);
    if (!groups.has(id)) groups.set(id, []);
    groups.get(id).push(rec);
  }
  const ul = $("trace-queries");
  ul.replaceChildren();
  showError(bad ? bad + " line(s) of " + name + " are not JSON and were skipped" : "");
  const traces = Array.from(groups.entries()).map(([id, recs]) => [id, traceEvents(recs)]);
  for (const [id, t] of traces) {
    const li = el("li", null, (id ? id + ": " : "") + (t.title || "(no final record)"));
    li.addEventListener("click", () => showTrace(name, id, t));
    ul.append(li);
  }
  if (traces.length) showTrace(name, traces[0][0], traces[0][1]);
  else showError(name + " holds no trace records");
}

function readTraceFile(file) {
  if (!file) return;
  const r = new FileReader();
  r.onload = () => loadTraceText(file.name, String(r.result));
  r.onerror = () => showError("cannot read " + file.name);
  r.readAsText(file);
}

/* --- wiring -------------------------------------------------------------------------- */
function init() {
  $("api-key").value = apiKey;
  $("api-key").addEventListener("change", () => {
    apiKey = $("api-key").value.trim();
    localStorage.setItem("agentflow-api-key", apiKey);
    loadTools();
    loadRuns();
  });
  $("ask-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const q = $("question").value.trim();
    if (q) ask(q);
  });
  $("refresh").addEventListener("click", loadRuns);
  $("trace-download").addEventListener("click", downloadTrace);
  $("trace-file").addEventListener("change", (e) => readTraceFile(e.target.files[0]));
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    readTraceFile(e.dataTransfer.files[0]);
  });
  api("/healthz").then(() => { $("status").textContent = "connected"; })
    .catch(() => { $("status").textContent = "server unreachable"; });
  const params = new URLSearchParams(location.search);
  Promise.all([loadTools(), loadRuns()]).then(() => {
    if (params.get("run")) openRun(params.get("run"));
  });
}

document.addEventListener("DOMContentLoaded", init);
