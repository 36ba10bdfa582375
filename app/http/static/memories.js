// The dashboard's working parts (after app.js, whose api(), authHeaders() and el() it uses): a robot's
// memories (filters, cursor pages), one memory (its versions; importance, forget, restore
// with a writer key), and a working memory watched live through the change stream.
"use strict";

const enc = encodeURIComponent;

const value = (id) => document.getElementById(id).value.trim();
let nextCursor = null;
let opened = null; // the memory shown: {robot, key, deleted}
let listed = null; // the robot whose memories the list shows

// --- browse -----------------------------------------------------------------------------

async function loadMemories(more) {
  const robot = value("mem-robot");
  const q = new URLSearchParams({ scope: "self", limit: "10" });
  if (value("mem-tag")) q.set("tag", value("mem-tag"));
  if (value("mem-timeframe")) q.set("timeframe", value("mem-timeframe"));
  if (document.getElementById("mem-deleted").checked) q.set("include_deleted", "true");
  if (more && nextCursor) q.set("cursor", nextCursor);
  const page = await api(`/v1/robots/${enc(robot)}/memories?${q}`);
  listed = robot;
  const body = document.querySelector("#memories tbody");
  if (!more) body.replaceChildren();
  for (const m of page.items) {
    const row = el("tr", { "data-key": m.key, class: m.deleted_at ? "deleted" : "" },
      el("td", {}, m.key), el("td", {}, m.type), el("td", { class: "importance" }, m.importance),
      el("td", {}, m.created_at.slice(0, 10)), el("td", { class: "content" }, m.content),
      el("td", {}, m.deleted_at ? (m.archived ? `archived (${m.archived})` : "forgotten") : ""));
    row.addEventListener("click", () => openMemory(robot, m.key, Boolean(m.deleted_at)).catch((e) => showError(e.message)));
    body.append(row);
  }
  nextCursor = page.next_cursor;
  document.getElementById("mem-more").hidden = !nextCursor;
  showError("");
}

// --- one memory ---------------------------------------------------------------------------

async function openMemory(robot, key, deleted) {
  opened = { robot, key, deleted };
  const found = await api(`/v1/robots/${enc(robot)}/memories/${enc(key)}/versions?include_deleted=true`);
  const current = found.versions[0];
  document.getElementById("mem-detail").hidden = false;
  document.getElementById("mem-key").textContent = key + (deleted ? " (deleted)" : "");
  document.getElementById("mem-importance").value = String(current.importance);
  document.getElementById("mem-forget").hidden = deleted;
  document.getElementById("mem-restore").hidden = !deleted;
  document.getElementById("mem-versions").replaceChildren(...found.versions.map((v) =>
    el("li", { "data-version": String(v.version) },
      `v${v.version} · ${v.changed_at.slice(0, 19).replace("T", " ")} · ${v.changed_by || "?"} · importance ${v.importance}: `,
      el("span", { class: "content" }, v.content))));
}

async function act(method, suffix, body) {
  const { robot, key } = opened;
  await api(`/v1/robots/${enc(robot)}/memories/${enc(key)}${suffix}`, body, method);
  await loadMemories(false);
  const row = document.querySelector(`#memories tr[data-key="${CSS.escape(key)}"]`);
  await openMemory(robot, key, row ? row.classList.contains("deleted") : method === "DELETE");
}

// --- add -----------------------------------------------------------------------------------

async function addMemory() {
  const robot = value("add-robot");
  const body = { content: document.getElementById("add-content").value };
  if (value("add-key")) body.key = value("add-key");
  if (value("add-importance")) body.importance = Number(value("add-importance"));
  const tags = value("add-tags").split(",").map((t) => t.trim()).filter(Boolean);
  if (tags.length) body.tags = tags;
  const note = document.getElementById("add-note");
  note.textContent = "";
  const m = await api(`/v1/robots/${enc(robot)}/memories`, body);
  const wm = m.working_memory;
  note.textContent = `added ${m.key} to ${robot} · ` +
    (wm.admitted ? "in working memory" : `not in working memory (${wm.reason})`) +
    (wm.evicted.length ? ` · evicted ${wm.evicted.join(", ")}` : "");
  document.body.setAttribute("data-added", m.key);
  for (const id of ["add-key", "add-content"]) document.getElementById(id).value = "";
  showError("");
  await loadRobots(); // the counts, and a new robot in the lists
  if (listed === robot) await loadMemories(false); // the list shows this robot's: with it

}

// --- working memory, live ------------------------------------------------------------------

let watching = null; // the AbortController of the open stream
const live = new Map(); // key -> {tokens, content}

function renderLive(note) {
  const list = document.getElementById("wm-live");
  list.replaceChildren(...[...live].map(([key, item]) =>
    el("li", { "data-key": key }, el("strong", {}, key), ` · ${item.tokens} tokens · `,
      el("span", { class: "content" }, item.content))));
  document.getElementById("wm-note").textContent = note;
}

function apply(kind, data) {
  if (kind === "snapshot") {
    live.clear();
    for (const i of data.items) live.set(i.key, i);
  } else if (kind === "added") live.set(data.key, data);
  else if (kind === "evicted" || kind === "removed") live.delete(data.key);
  else if (kind === "cleared") live.clear();
  renderLive(`${kind} (seq ${data.seq ?? "-"})`);
}

// Server-sent events read with fetch: EventSource cannot send the Authorization header.
async function watch(event) {
  event.preventDefault();
  if (watching) watching.abort();
  watching = new AbortController();
  const robot = value("wm-robot");
  const r = await fetch(`/v1/robots/${enc(robot)}/working-memory/events`, {
    headers: { ...authHeaders(), Accept: "text/event-stream" }, signal: watching.signal,
  });
  if (!r.ok) throw new Error(r.status + " " + r.statusText);
  document.body.setAttribute("data-watching", robot);
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value: chunk, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let kind = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) kind = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trim());
      }
      if (data.length) apply(kind, JSON.parse(data.join("\n")));
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const run = (f) => (event) => { event.preventDefault(); f().catch((e) => showError(e.message)); };
  document.getElementById("add-form").addEventListener("submit",
    run(() => addMemory().catch((e) => { throw new Error("add: " + e.message); })));
  document.getElementById("mem-form").addEventListener("submit", run(() => loadMemories(false)));
  document.getElementById("mem-more").addEventListener("click", run(() => loadMemories(true)));
  document.getElementById("mem-set").addEventListener("click",
    run(() => act("PATCH", "", { importance: Number(value("mem-importance")) })));
  document.getElementById("mem-forget").addEventListener("click", run(() => act("DELETE", "")));
  document.getElementById("mem-restore").addEventListener("click", run(() => act("POST", "/restore")));
  document.getElementById("wm-form").addEventListener("submit",
    (event) => watch(event).catch((e) => { if (e.name !== "AbortError") showError(e.message); }));
});
