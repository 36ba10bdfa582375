// The HTM dashboard: reads the REST API with the browser's key, renders with DOM nodes and
// text nodes only (never innerHTML), so memory content always shows as text.
"use strict";

const KEY = "htm-key";
const NAMESPACE = "htm-namespace";
const DAYS = 14;
const SVG = "http://www.w3.org/2000/svg";

// `/ui#key=<API key>` (or `#namespace=<name>` with auth off): a fragment never reaches the
// server, so the key is in no log; it is kept in sessionStorage (this tab only) and taken
// out of the address bar at once.
function takeFromFragment() {
  const given = new URLSearchParams(location.hash.slice(1));
  if (given.has("key")) sessionStorage.setItem(KEY, given.get("key"));
  if (given.has("namespace")) sessionStorage.setItem(NAMESPACE, given.get("namespace"));
  if (given.has("key") || given.has("namespace")) {
    history.replaceState(null, "", location.pathname + location.search);
  }
}

// The browser's key (auth on) or namespace (auth off), as every request sends them.
function authHeaders() {
  const headers = {};
  const key = sessionStorage.getItem(KEY);
  const ns = sessionStorage.getItem(NAMESPACE);
  if (key) headers.Authorization = "Bearer " + key;
  if (ns) headers["X-Namespace"] = ns;
  return headers;
}

// GET `path`, or with `body` a POST (another `method` when given); the answer's JSON.
async function api(path, body, method) {
  const headers = { Accept: "application/json", ...authHeaders() };
  const init = { headers, method: method || (body === undefined ? "GET" : "POST") };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const json = (r.headers.get("content-type") || "").includes("json") ? await r.json() : null;
  if (!r.ok) throw new Error((json && json.detail) || r.status + " " + r.statusText);
  return json;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  if (text !== undefined) node.append(document.createTextNode(String(text)));
  return node;
}

function showError(message) {
  const p = document.getElementById("error");
  p.textContent = message;
  p.hidden = !message;
}

const num = (x, digits = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));

// --- robots and activity ------------------------------------------------------------------

function renderRobots(robots) {
  const body = document.querySelector("#robots tbody");
  body.replaceChildren();
  for (const r of robots) {
    const wm = r.working_memory;
    const meter = el("meter", { min: "0", max: "100", value: String(wm.utilization) });
    body.append(
      el("tr", { "data-robot": r.robot },
        el("td", {}, r.robot),
        el("td", {}, meter, " ", wm.utilization.toFixed(1) + " %", wm.degraded ? " (degraded)" : null),
        el("td", {}, wm.tokens + " / " + wm.max_tokens),
        el("td", {}, wm.items),
        el("td", {}, r.long_term.memories)));
  }
  if (!robots.length) body.append(el("tr", {}, el("td", { colspan: "5" }, "no robots yet")));
  for (const id of ["recall-robot", "mem-robot", "wm-robot"]) {
    const select = document.getElementById(id);
    if (!select) continue;
    const chosen = select.value; // kept across a refresh (an add refreshes the counts)
    select.replaceChildren(...robots.map((r) => el("option", {}, r.robot)));
    if (robots.some((r) => r.robot === chosen)) select.value = chosen;
  }
  document.getElementById("robot-names").replaceChildren(
    ...robots.map((r) => el("option", { value: r.robot })));
}

function lastDays(n) {
  const today = new Date();
  const days = [];
  for (let i = n - 1; i >= 0; i--) {
    const d = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - i));
    days.push(d.toISOString().slice(0, 10));
  }
  return days;
}

function renderActivity(robots) {
  const series = ["adds", "recalls", "evictions"];
  const days = lastDays(DAYS);
  const totals = Object.fromEntries(days.map((d) => [d, { adds: 0, recalls: 0, evictions: 0 }]));
  for (const r of robots) {
    for (const a of r.activity) {
      if (totals[a.day]) for (const s of series) totals[a.day][s] += a[s];
    }
  }
  const max = Math.max(1, ...days.flatMap((d) => series.map((s) => totals[d][s])));
  const [w, h, left, bottom, top] = [720, 220, 40, 30, 10];
  const slot = (w - left) / days.length;
  const bar = (slot - 6) / series.length;
  const chart = svg("svg", { viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": "activity per day" });
  chart.append(svg("line", { x1: left, y1: h - bottom, x2: w, y2: h - bottom, class: "axis" }));
  chart.append(svg("text", { x: left - 6, y: top + 10, class: "tick", "text-anchor": "end" }, max));
  chart.append(svg("text", { x: left - 6, y: h - bottom, class: "tick", "text-anchor": "end" }, 0));
  days.forEach((day, i) => {
    const x0 = left + i * slot + 3;
    series.forEach((s, j) => {
      const v = totals[day][s];
      const height = ((h - bottom - top) * v) / max;
      const rect = svg("rect", {
        x: x0 + j * bar, y: h - bottom - height, width: bar - 1, height, class: "bar " + s,
        "data-day": day, "data-series": s, "data-value": v,
      });
      rect.append(svg("title", {}, `${day} ${s}: ${v}`));
      chart.append(rect);
    });
    if (i % 2 === days.length % 2) {
      chart.append(svg("text", { x: x0 + slot / 2 - 3, y: h - 10, class: "tick", "text-anchor": "middle" }, day.slice(5)));
    }
  });
  const legend = el("p", { class: "legend" },
    ...series.map((s) => el("span", { class: "key " + s }, s)));
  document.getElementById("activity").replaceChildren(chart, legend);
}

async function loadRobots() {
  const stats = await api("/v1/stats");
  document.getElementById("namespace").textContent = "· " + stats.namespace;
  const robots = await Promise.all(
    stats.robots.map((r) => api(`/v1/robots/${encodeURIComponent(r.robot)}/stats?days=${DAYS}`)),
  );
  renderRobots(robots);
  renderActivity(robots);
}

// --- a memory's supersede chain -----------------------------------------------------------

function validity(m) {
  const day = (t) => (t ? t.slice(0, 10) : "now");
  return `valid ${day(m.valid_from)} → ${m.valid_to ? day(m.valid_to) : "open-ended"}`;
}

async function chain(event) {
  event.preventDefault();
  const list = document.getElementById("chain");
  const key = document.getElementById("chain-key").value.trim();
  try {
    const found = await api(`/v1/robots/dashboard/memories/${encodeURIComponent(key)}/history`);
    list.replaceChildren(...found.chain.map((m) =>
      el("li", { "data-key": m.key, "data-depth": String(m.depth), class: m.depth === 0 ? "asked" : "" },
        el("p", {}, el("strong", {}, m.key), " · ", validity(m),
          m.superseded_by ? ` · superseded by ${m.superseded_by}` : null,
          m.archived ? ` · archived (${m.archived})` : null),
        el("p", { class: "content" }, m.content))));
    showError("");
  } catch (e) {
    list.replaceChildren();
    showError(e.message);
  }
}

// --- recall -------------------------------------------------------------------------------

function explanation(e) {
  if (!e) return null;
  const table = el("table", { class: "explain" },
    el("tr", {}, el("th", {}, ""), el("th", {}, "rank"), el("th", {}, "score"), el("th", {}, "share")));
  for (const list of ["vector", "fulltext"]) {
    const l = e[list];
    table.append(el("tr", { "data-list": list }, el("th", {}, list),
      el("td", {}, l ? l.rank : "–"), el("td", {}, l ? num(l.score) : "–"), el("td", {}, l ? num(l.share, 4) : "–")));
  }
  const facts = el("ul", { class: "facts" },
    el("li", {}, "fused ", num(e.fused, 4)),
    el("li", {}, "relevance ", num(e.relevance)),
    e.scaled == null ? null : el("li", {}, "scaled ", num(e.scaled)),
    ...Object.entries(e.signals).map(([name, s]) =>
      el("li", { "data-signal": name }, `${name} ${num(s.value)} × ${num(s.weight, 2)} = ${num(s.contribution, 4)}`)),
    e.rerank ? el("li", {}, `reranked ${e.rerank.fused_rank} → ${e.rerank.rank} (${num(e.rerank.score)})`) : null,
    el("li", {}, "score ", num(e.score, 4)));
  return el("div", { class: "why" }, table, facts);
}

// A hit's relevance as a person reads it: how close in meaning (the cosine similarity the
// floor compares, as a percentage and a meter) and where the words matched, beside the
// score that orders the hits.
function relevance(hit) {
  const words = hit.fulltext_rank ? `words matched: #${hit.fulltext_rank} by full text` : "no word matched";
  if (hit.relevance === null || hit.relevance === undefined) {
    return el("p", { class: "relevance", "data-relevance": "" }, "no vector: ", words);
  }
  const percent = Math.round(Math.max(0, hit.relevance) * 100);
  return el("p", { class: "relevance", "data-relevance": String(hit.relevance) },
    el("meter", { min: "0", max: "100", value: String(percent) }),
    ` ${percent} % close in meaning · ${words}`);
}

async function recall(event) {
  event.preventDefault();
  const robot = document.getElementById("recall-robot").value || "dashboard";
  const result = await api(`/v1/robots/${encodeURIComponent(robot)}/recall`, {
    query: document.getElementById("query").value,
    strategy: document.getElementById("strategy").value,
    limit: 10,
    explain: true,
    load_into_working_memory: false,
  }).catch((err) => showError("recall: " + err.message));
  if (!result) return;
  showError("");
  const hits = document.getElementById("hits");
  hits.replaceChildren();
  document.getElementById("recall-note").textContent =
    result.embedding === "unavailable" ? "no query vector: hybrid ran on full text only" : "";
  for (const hit of result.hits) {
    hits.append(el("li", { class: "hit", "data-key": hit.key },
      el("p", { class: "head" }, el("strong", {}, hit.key), ` · ${hit.type} · ${hit.author} · score ${num(hit.score, 4)}`),
      relevance(hit),
      el("p", { class: "content" }, hit.content),
      hit.tags.length ? el("p", { class: "tags" }, hit.tags.join(", ")) : null,
      explanation(hit.explain)));
  }
  if (!result.hits.length) document.getElementById("recall-note").textContent = "no hits";
}

// --- tags (GET /v1/tags, where the service has it) ------------------------------------------

function tagTree(value) {
  const items = Array.isArray(value) ? value : value.tags || value.items || value.children || [];
  return el("ul", { class: "tree" }, ...items.map((t) => {
    const name = typeof t === "string" ? t : t.tag || t.name || t.path || "?";
    const count = t.count !== undefined ? ` (${t.count})` : "";
    const children = t.children && t.children.length ? tagTree(t.children) : null;
    return el("li", {}, name + count, children);
  }));
}

async function loadTags() {
  const route = document.body.dataset.tagsRoute;
  if (!route) return; // the marked slot stays as it is
  const tags = await api(route);
  document.getElementById("tags").replaceChildren(tagTree(tags));
}

// --- start ------------------------------------------------------------------------------------

function refresh() {
  return Promise.all([loadRobots(), loadTags()])
    .then(() => showError(""))
    .catch((err) => showError(err.message + " (an API key? `/ui#key=<key>` or the form above)"))
    .finally(() => document.body.setAttribute("data-loaded", "true"));
}

document.addEventListener("DOMContentLoaded", () => {
  takeFromFragment();
  document.getElementById("ns").value = sessionStorage.getItem(NAMESPACE) || "";
  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    for (const [id, name] of [["key", KEY], ["ns", NAMESPACE]]) {
      const value = document.getElementById(id).value.trim();
      if (value) sessionStorage.setItem(name, value);
      else sessionStorage.removeItem(name);
    }
    document.getElementById("key").value = "";
    refresh();
  });
  document.getElementById("recall-form").addEventListener("submit", recall);
  document.getElementById("chain-form").addEventListener("submit", chain);
  refresh();
});
