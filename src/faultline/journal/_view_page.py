"""The page `write_view` fills in: markup, style and script in one string, nothing fetched.

Placeholders: __TITLE__, __META__ (settings), __INDEX__ (the episode list), __CHUNKS__
(one <script type="text/plain"> per episode, gzip + base64, inflated on demand with the
browser's own DecompressionStream). The chunks come last, after the script, so the
episode list is drawn before the browser has read them all.
"""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__ · Faultline</title>
<style>
:root { --fg: #1d2230; --muted: #667085; --line: #e4e7ec; --bg: #ffffff; --soft: #f6f7f9;
  --llm: #eef4ff; --llm-b: #7a9cf0; --tool: #effaf3; --tool-b: #4caf7a; --fault: #fff1f0; --fault-b: #e5484d;
  --dec: #fff7d6; --dec-b: #e0a800; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
  background: var(--bg); }
header.top { padding: 10px 16px; border-bottom: 1px solid var(--line); display: flex; gap: 16px; align-items: baseline; }
header.top h1 { font-size: 16px; margin: 0; }
.muted { color: var(--muted); }
.banner { background: #fffbe6; border-bottom: 1px solid #f0e0a0; padding: 6px 16px; font-size: 13px; }
main { display: grid; grid-template-columns: minmax(320px, 24%) 1fr; height: calc(100vh - 44px); }
main.with-banner { height: calc(100vh - 76px); }
#list { border-right: 1px solid var(--line); overflow: auto; padding: 10px; }
#filters { display: grid; grid-template-columns: 1fr 1fr; gap: 6px; margin-bottom: 8px; }
#filters label { font-size: 12px; color: var(--muted); display: flex; flex-direction: column; }
#filters select { font: inherit; padding: 3px; }
table.eps { border-collapse: collapse; width: 100%; font-size: 13px; }
table.eps th { text-align: left; font-weight: 600; color: var(--muted); border-bottom: 1px solid var(--line); padding: 3px; }
table.eps td { border-bottom: 1px solid var(--line); padding: 4px 3px; vertical-align: top; }
table.eps tr[data-episode] { cursor: pointer; }
table.eps tr[data-episode]:hover { background: var(--soft); }
table.eps tr.selected { background: #e8efff; }
.id { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; word-break: break-all; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px; }
.o-success { background: #dcf5e6; color: #17663a; } .o-failure, .o-timeout { background: #fde2e1; color: #a4161a; }
.o-error { background: #f3e1fa; color: #6e1d8c; } .o-none { background: var(--soft); color: var(--muted); }
.pager { display: flex; gap: 8px; align-items: center; margin: 8px 0; }
button { font: inherit; padding: 2px 10px; border: 1px solid var(--line); background: var(--soft); border-radius: 4px;
  cursor: pointer; }
#episode { overflow: auto; padding: 10px 16px; position: relative; }
body.detail-open #episode { margin-right: min(520px, 40vw); }
#episode h2 { font-size: 15px; margin: 0 0 4px 0; }
.facts { margin: 0 0 8px 0; color: var(--muted); font-size: 13px; }
.facts b { color: var(--fg); font-weight: 600; }
.sides { display: grid; gap: 12px; }
.sides.two { grid-template-columns: 1fr 1fr; }
.side h3 { font-size: 13px; margin: 6px 0; }
.lanes { display: grid; column-gap: 6px; row-gap: 4px; align-items: start; }
.lane-head { position: sticky; top: 0; background: var(--bg); font-weight: 600; font-size: 13px; padding: 4px 2px;
  border-bottom: 2px solid var(--line); z-index: 1; }
.when { font-family: ui-monospace, Menlo, monospace; font-size: 11px; color: var(--muted); padding-top: 4px;
  text-align: right; }
.msg { border: 1px solid var(--line); border-left: 4px solid #b8bfcc; border-radius: 4px; padding: 3px 6px;
  background: var(--soft); cursor: pointer; font-size: 12px; min-width: 0; }
.msg:hover { outline: 2px solid #a9c1ff; }
.msg .k { font-weight: 600; } .msg .to { color: var(--muted); }
.msg .sum { color: #3a4254; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.msg.llm { background: var(--llm); border-left-color: var(--llm-b); }
.msg.tool { background: var(--tool); border-left-color: var(--tool-b); }
.msg.fault { background: var(--fault); border-left-color: var(--fault-b); }
.msg.fault .k::before { content: "⚡ "; color: var(--fault-b); }
.msg.decisive, .msg.input { background: var(--dec); border-left-color: var(--dec-b); box-shadow: 0 0 0 2px var(--dec-b); }
.msg.selected { outline: 2px solid #3b6df0; }
tr.fork-row td.id { padding-left: 18px; }
.msg.bookkeeping, .when.bookkeeping { display: none; }
.call-chip { font-size: 10px; margin-top: 2px; border: 1px solid #6b8fd6; background: #eef3fc; border-radius: 3px;
  cursor: pointer; }
body.bookkeeping .msg.bookkeeping, body.bookkeeping .when.bookkeeping { display: block; }
table.agents td, table.agents th { padding: 1px 8px; text-align: right; }
table.agents td:first-child, table.agents th:first-child { text-align: left; }
.when .took { font-size: 10px; color: var(--muted); }
.waterfall { margin: 4px 0 10px; }
.wf-row { display: grid; grid-template-columns: 120px 1fr; align-items: center; height: 16px; }
.wf-name { font-size: 11px; overflow: hidden; text-overflow: ellipsis; }
.track { position: relative; height: 10px; background: #f2f4f8; }
.track .bar { position: absolute; top: 0; height: 10px; background: #6b8fd6; }
.hidden-note { grid-column: 1 / -1; color: var(--muted); font-size: 12px; padding: 4px 0; }
#detail { position: fixed; right: 0; top: 44px; bottom: 0; width: min(520px, 40vw); background: var(--bg);
  border-left: 1px solid var(--line); box-shadow: -4px 0 12px rgba(0,0,0,.06); overflow: auto; padding: 10px 14px;
  display: none; z-index: 5; }
#detail.open { display: block; }
#detail h3 { font-size: 14px; margin: 0 0 6px 0; }
#detail h4 { font-size: 12px; text-transform: uppercase; color: var(--muted); margin: 12px 0 4px 0; }
#detail pre { white-space: pre-wrap; word-break: break-word; background: var(--soft); border: 1px solid var(--line);
  padding: 6px; border-radius: 4px; font-size: 12px; margin: 0 0 6px 0; max-height: 40vh; overflow: auto; }
.role { font-size: 12px; font-weight: 600; color: #3b6df0; }
.close { position: absolute; right: 10px; top: 8px; }
.empty { color: var(--muted); padding: 20px; }
details.traceback { margin: 0 0 8px 0; font-size: 13px; }
details.traceback summary { cursor: pointer; color: var(--muted); }
pre.traceback { white-space: pre-wrap; word-break: break-word; background: var(--soft); border: 1px solid var(--line);
  padding: 6px; border-radius: 4px; font-size: 12px; margin: 4px 0 0 0; max-height: 40vh; overflow: auto; }
</style>
</head>
<body>
<header class="top"><h1>__TITLE__</h1><span class="muted" id="counts"></span></header>
<div class="banner" id="sim" hidden>The <b>sim</b> model made these episodes: a simulation for exercising the
runtime, so their outcomes say nothing about any model.</div>
<main>
<section id="list">
<div id="filters">
<label>status<select id="f-status"><option value="">all</option><option>passed</option><option>failed</option>
<option>errored</option><option>incomplete</option></select></label>
<label>domain<select id="f-domain"></select></label>
<label>task<select id="f-task"></select></label>
<label>fault<select id="f-fault"></select></label>
<label>search<input id="f-search" type="search" placeholder="text of any message"></label>
<label><input id="f-bookkeeping" type="checkbox"> bookkeeping</label>
</div>
<div class="pager"><button id="prev">‹</button><span id="page"></span><button id="next">›</button></div>
<table class="eps"><thead><tr><th>episode</th><th>task</th><th>outcome</th><th>msgs</th><th>faults</th></tr></thead>
<tbody id="episodes"></tbody></table>
</section>
<section id="episode"><div class="empty">Choose an episode.</div></section>
</main>
<aside id="detail"></aside>
<script type="application/json" id="meta">__META__</script>
<script type="application/json" id="index">__INDEX__</script>
<script>
"use strict";
const META = JSON.parse(document.getElementById("meta").textContent);
const EPISODES = JSON.parse(document.getElementById("index").textContent);
const BY_ID = new Map(EPISODES.map((e) => [e.id, e]));
const PAGE_SIZE = 50, ROWS_SHOWN = 300;
const BOOKKEEPING = ["no_output", "tally", "recording"];
// Folded unless "bookkeeping" is ticked; a model call is shown inside the message it produced, or on its own.
const STATUS = { passed: ["success"], failed: ["failure", "timeout"], errored: ["error"], incomplete: [""] };
const cache = new Map();
let page = 0, current = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}
const pretty = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));

const parsed = document.readyState === "loading"
  ? new Promise((done) => document.addEventListener("DOMContentLoaded", done, { once: true })) : Promise.resolve();
async function load(entry) {
  if (!cache.has(entry.id)) {
    await parsed;  // the chunks follow this script, so the list shows before they are all read
    const text = document.getElementById("c" + entry.chunk).textContent;
    const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    cache.set(entry.id, JSON.parse(await new Response(stream).text()));
  }
  return cache.get(entry.id);
}

function options(select, values) {
  select.replaceChildren(el("option", { value: "" }, "all"), ...values.map((v) => el("option", { value: v }, v)));
}
function setupFilters() {
  const uniq = (f) => [...new Set(EPISODES.flatMap(f))].filter((v) => v !== "").sort();
  options(document.getElementById("f-domain"), uniq((e) => [e.domain]));
  options(document.getElementById("f-task"), uniq((e) => [e.task]));
  options(document.getElementById("f-fault"), uniq((e) => e.faults));
  for (const id of ["f-status", "f-domain", "f-task", "f-fault"])
    document.getElementById(id).addEventListener("change", () => { page = 0; renderList(); });
  let typing = null;
  document.getElementById("f-search").addEventListener("input", (ev) => {
    clearTimeout(typing);
    typing = setTimeout(async () => { await search(ev.target.value.trim()); page = 0; renderList(); }, 250);
  });
  document.getElementById("f-bookkeeping").addEventListener("change", (ev) =>
    document.body.classList.toggle("bookkeeping", ev.target.checked));
  document.getElementById("prev").onclick = () => { page = Math.max(0, page - 1); renderList(); };
  document.getElementById("next").onclick = () => { page += 1; renderList(); };
}
let matching = null;  // the episodes whose messages hold the search text (null: no search)
async function search(text) {
  if (!text) { matching = null; return; }
  const needle = text.toLowerCase(), found = new Set();
  for (const e of EPISODES) {
    const data = await load(e);
    if (data.rows.some((r) => String(r[5]).toLowerCase().includes(needle))) found.add(e.id);
  }
  matching = found;
}
function filtered() {
  const v = (id) => document.getElementById(id).value;
  const status = v("f-status"), domain = v("f-domain"), task = v("f-task"), fault = v("f-fault");
  const keep = (e) => (!status || STATUS[status].includes(e.outcome)) && (!domain || e.domain === domain)
    && (!task || e.task === task) && (!fault || e.faults.includes(fault)) && (!matching || matching.has(e.id));
  // A fork is listed under its original when that is in the list too; the pager counts originals.
  const forksOf = new Map();
  for (const e of EPISODES) if (e.forked_from && BY_ID.has(e.forked_from) && keep(e))
    forksOf.set(e.forked_from, [...(forksOf.get(e.forked_from) || []), e]);
  const top = EPISODES.filter((e) => keep(e) && !(e.forked_from && BY_ID.has(e.forked_from)));
  for (const e of EPISODES) if (e.forked_from && BY_ID.has(e.forked_from) && keep(e) && !keep(BY_ID.get(e.forked_from)))
    top.push(e);
  return { top, forksOf };
}
function outcomeBadge(e) {
  return el("span", { class: "badge o-" + (e.outcome || "none") }, e.outcome || "incomplete");
}
function listRow(e, fork) {
  return el("tr", { "data-episode": e.id, class: (current === e.id ? "selected " : "") + (fork ? "fork-row" : ""),
      onclick: () => show(e.id) },
    el("td", { class: "id" }, fork ? `↳ ${e.id}` : e.id,
      e.forked_from ? el("div", { class: "muted" }, `fork: ${e.fork_change || "change"} at ${e.forked_at}`) : null),
    el("td", {}, `${e.domain}/${e.task}`, el("div", { class: "muted" }, `trial ${e.trial}`)),
    el("td", {}, outcomeBadge(e), e.attribution.pos ? el("div", { class: "muted" }, "attributed") : null),
    el("td", {}, String(e.messages)), el("td", {}, e.faults.join(", ")));
}
function renderList() {
  const { top, forksOf } = filtered();
  const pages = Math.max(1, Math.ceil(top.length / PAGE_SIZE));
  page = Math.min(page, pages - 1);
  const forks = [...forksOf.values()].reduce((n, list) => n + list.length, 0);
  document.getElementById("page").textContent =
    `page ${page + 1} of ${pages} · ${top.length} episodes` + (forks ? ` and ${forks} forks under them` : "");
  document.getElementById("episodes").replaceChildren(...top.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).flatMap((e) =>
    [listRow(e, false), ...(forksOf.get(e.id) || []).map((f) => listRow(f, true))]));
}

function laneOf(rows) {
  const lanes = [];
  for (const r of rows) if (!lanes.includes(r[2])) lanes.push(r[2]);
  return lanes;
}
function kindClass(row) {
  const flags = row[7], detail = row[6] || {};
  const c = ["msg"];
  if (detail.llm) c.push("llm");
  if (row[4] === "tool_call" || row[4] === "tool_result") c.push("tool");
  if (flags & META.flags.fault) c.push("fault");
  if (flags & META.flags.decisive) c.push("decisive");
  if (flags & META.flags.input) c.push("input");
  if (BOOKKEEPING.includes(row[4]) && !(detail.llm && (row[9] === null || row[9] === undefined))) c.push("bookkeeping");
  return c.join(" ");
}
function waterfall(data, lanes) {
  // Per agent, its model calls as bars on the episode's time axis: where the time went.
  const end = Math.max(0.001, ...data.rows.map((r) => r[1]));
  const box = el("div", { class: "waterfall" });
  for (const lane of lanes) {
    const calls = data.rows.filter((r) => r[2] === lane && r[6] && r[6].llm);
    if (!calls.length) continue;
    const track = el("div", { class: "track" });
    for (const r of calls) {
      const took = Math.min(r[1], (r[6].latency_s || 0));
      const bar = el("div", { class: "bar", "data-pos": r[0], title: `${lane}: model call at +${r[1].toFixed(3)}s, ${took.toFixed(3)}s` });
      bar.style.left = `${(100 * (r[1] - took)) / end}%`;
      bar.style.width = `max(2px, ${(100 * took) / end}%)`;
      track.append(bar);
    }
    box.append(el("div", { class: "wf-row", "data-agent": lane }, el("span", { class: "wf-name" }, lane), track));
  }
  return box.childElementCount ? el("div", {}, el("h3", {}, "model calls over time"), box) : null;
}
function timeline(entry, data, lanes, from) {
  const grid = el("div", { class: "lanes" });
  grid.style.gridTemplateColumns = `64px repeat(${lanes.length}, minmax(120px, 1fr))`;
  grid.append(el("div", { class: "lane-head" }, "pos"), ...lanes.map((l) => el("div", { class: "lane-head" }, l)));
  if (from > 0) grid.append(el("div", { class: "hidden-note" }, `${from} messages before the fork point, the same on both sides`));
  let shown = 0;
  const add = () => {
    const stop = Math.min(data.rows.length, from + shown + ROWS_SHOWN);
    for (let i = from + shown; i < stop; i++) {
      const r = data.rows[i];
      const calls = data.rows.filter((c) => c[9] === r[0] && c[6] && c[6].llm);
      const box = el("div", { class: kindClass(r), "data-pos": r[0], "data-kind": r[4], title: r[5],
          onclick: () => detail(entry, data, r, box) },
        el("div", {}, el("span", { class: "k" }, r[4]), el("span", { class: "to" }, r[3] ? ` → ${r[3]}` : "")),
        el("div", { class: "sum" }, r[5]),
        ...calls.map((c) => el("button", { class: "call-chip", "data-pos": c[0], title: c[5],
          onclick: (ev) => { ev.stopPropagation(); detail(entry, data, c, box); } }, `model call ${c[0]}`)));
      box.style.gridColumn = String(lanes.indexOf(r[2]) + 2);
      const when = el("div", { class: "when" }, `${r[0]} +${r[1].toFixed(3)}s`,
        r[8] === null || r[8] === undefined ? null
          : el("div", { class: "took", title: "seconds after the message that caused it" }, `Δ${r[8].toFixed(3)}s`));
      when.style.gridColumn = "1";
      if (box.classList.contains("bookkeeping")) when.classList.add("bookkeeping");  // folded with its card
      grid.append(when, box);
    }
    shown = stop - from;
    more.hidden = stop >= data.rows.length;
    more.textContent = `show ${Math.min(ROWS_SHOWN, data.rows.length - stop)} more of ${data.rows.length - stop}`;
  };
  const more = el("button", { onclick: () => add() });
  add();
  return el("div", {}, grid, more);
}

function fact(label, value) { return [el("b", {}, label), " ", value, " · "]; }
async function show(id) {
  const entry = BY_ID.get(id);
  if (!entry) return;
  current = id;
  history.replaceState(null, "", "#" + encodeURIComponent(id));
  renderList();
  closeDetail();
  const data = await load(entry);
  const pane = document.getElementById("episode");
  const facts = el("p", { class: "facts" }, ...fact("task", `${entry.domain}/${entry.task} trial ${entry.trial}`),
    ...fact("outcome", outcomeBadge(entry)), ...fact("reward", entry.reward === null ? "-" : String(entry.reward)),
    ...fact("messages", String(entry.messages)), ...fact("seconds", entry.seconds.toFixed(2)),
    ...(entry.cause ? fact("cause", entry.cause) : []), ...(entry.faults.length ? fact("faults", entry.faults.join(", ")) : []));
  const notes = [];
  if (entry.traceback) notes.push(el("details", { class: "traceback" }, el("summary", {}, "traceback of the error"),
    el("pre", { class: "traceback" }, entry.traceback)));
  const agents = Object.entries(entry.agents || {});
  if (agents.length) notes.push(el("table", { class: "agents" },
    el("tr", {}, el("th", {}, "model use"), el("th", {}, "calls"), el("th", {}, "tokens"), el("th", {}, "seconds")),
    ...agents.map(([name, t]) => el("tr", { "data-agent": name }, el("td", {}, name), el("td", {}, String(t.calls)),
      el("td", {}, String(t.tokens)), el("td", {}, t.latency_s.toFixed(2))))));
  const original = entry.forked_from ? BY_ID.get(entry.forked_from) : null;
  if (entry.forked_from) notes.push(el("p", { class: "facts" }, `Fork (${entry.fork_change}) of `,
    original ? el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); show(original.id); } }, entry.forked_from)
      : entry.forked_from, ` at position ${entry.forked_at}.`));
  const att = entry.attribution;
  if (att.pos) notes.push(el("p", { class: "facts", id: "attribution" }, el("b", {}, "Attribution: "),
    `the decisive step is agent ${att.agent} handling position ${att.pos} (highlighted); its repair rescued the`
    + ` episode in fork ${att.fork}, out of ${att.repairs} repair forks.`));
  else if (att.repairs) notes.push(el("p", { class: "facts" }, `Attribution: none of ${att.repairs} repair forks rescued it.`));
  const forks = EPISODES.filter((e) => e.forked_from === entry.id);
  if (forks.length) notes.push(el("p", { class: "facts" }, "Forks: ", ...forks.flatMap((f) => [
    el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); show(f.id); } }, `${f.id} (${f.outcome || "incomplete"})`), " "])));
  let sides;
  if (original) {
    const orig = await load(original);
    const from = orig.rows.findIndex((r) => r[0] >= entry.forked_at);
    const lanes = laneOf([...orig.rows, ...data.rows]);
    sides = el("div", { class: "sides two" },
      el("div", { class: "side", "data-side": "original" }, el("h3", {}, `original ${original.id}`),
        timeline(original, orig, lanes, Math.max(0, from))),
      el("div", { class: "side", "data-side": "fork" }, el("h3", {}, `fork ${entry.id}`),
        timeline(entry, data, lanes, entry.fork_point)));
  } else {
    const lanes = laneOf(data.rows);
    sides = el("div", { class: "sides" }, el("div", { class: "side" }, waterfall(data, lanes), timeline(entry, data, lanes, 0)));
  }
  pane.replaceChildren(el("h2", { class: "id" }, entry.id), facts, ...notes, sides);
  pane.scrollTop = 0;
  const step = pane.querySelector(".msg.input, .msg.decisive");
  if (step) step.scrollIntoView({ block: "center" });  // the attributed step, where there is one
}

function detail(entry, data, r, box) {
  document.querySelectorAll(".msg.selected").forEach((n) => n.classList.remove("selected"));
  box.classList.add("selected");
  const d = r[6] || {};
  const parts = [el("button", { class: "close", onclick: closeDetail }, "×"),
    el("h3", {}, `${r[4]} · ${r[2]}${r[3] ? " → " + r[3] : ""}`),
    el("div", { class: "muted" }, `position ${r[0]} · +${r[1].toFixed(3)}s · ${entry.id}`)];
  if (d.llm) {
    parts.push(el("h4", {}, "model"), el("div", {}, `${d.model || "?"} · ${d.usage.prompt_tokens || 0} prompt + `
      + `${d.usage.completion_tokens || 0} completion tokens`));
    parts.push(el("h4", {}, "prompt"), el("div", { class: "prompt" }, ...d.prompt.map((i) => {
      const m = data.parts[i];
      return el("div", {}, el("div", { class: "role" }, m.role || ""), el("pre", {}, pretty(m.content ?? m)));
    })));
    if (d.tools.length) parts.push(el("h4", {}, "tools offered"), el("div", {}, d.tools.join(", ")));
    parts.push(el("h4", {}, "answer"), el("pre", { class: "answer" }, d.answer || (d.tool_calls.length ? "" : "(empty)")));
    if (d.tool_calls.length) parts.push(el("h4", {}, "tool calls"), el("pre", {}, pretty(d.tool_calls)));
    if (d.error) parts.push(el("h4", {}, "error"), el("pre", {}, d.error));
  } else if (d.tool && "arguments" in d) {
    parts.push(el("h4", {}, `tool ${d.tool} (${d.call_id})`), el("h4", {}, "arguments"), el("pre", {}, pretty(d.arguments)));
  } else if (d.tool) {
    parts.push(el("h4", {}, `tool ${d.tool} (${d.call_id})`));
    if (d.error) parts.push(el("h4", {}, "error"), el("pre", {}, d.error));
    else parts.push(el("h4", {}, "result"), el("pre", {}, pretty(d.output)));
  } else if (d.kind === "error_raised") {
    parts.push(el("h4", {}, "error"), el("pre", {}, `${d.error_type}: ${d.message}`));
    if (d.traceback) parts.push(el("h4", {}, "traceback"), el("pre", { class: "traceback" }, d.traceback));
  } else {
    parts.push(el("h4", {}, "body"), el("pre", {}, pretty(d)));
  }
  const pane = document.getElementById("detail");
  pane.replaceChildren(...parts);
  pane.classList.add("open");
  document.body.classList.add("detail-open");
}
function closeDetail() {
  document.getElementById("detail").classList.remove("open");
  document.body.classList.remove("detail-open");
}

document.getElementById("counts").textContent =
  `${EPISODES.length} episodes · ${EPISODES.reduce((n, e) => n + e.messages, 0)} messages`;
if (EPISODES.some((e) => e.sim)) {
  document.getElementById("sim").hidden = false;
  document.querySelector("main").classList.add("with-banner");
}
setupFilters();
renderList();
performance.mark("faultline-list");
const wanted = decodeURIComponent(location.hash.slice(1)) || META.open;
if (wanted) show(wanted);
</script>
__CHUNKS__
</body>
</html>
"""
