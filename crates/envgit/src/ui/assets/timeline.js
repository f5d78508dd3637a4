// The timeline: rows newest first, the first 50 painted at once and the rest fetched in
// pages as the reader scrolls; new steps and held requests arrive by server-sent events.
// The filter lives in the URL's query, so a link reproduces it.
"use strict";

(function () {
  const rows = document.getElementById("rows");
  const more = document.getElementById("more");
  const form = document.getElementById("filters");
  const FILTERS = ["kind", "mark", "path", "host", "from", "to"];
  const params = new URLSearchParams(location.search);
  let head = 0;            // the newest step shown
  let nextBefore = null;   // where the next older page starts
  let loading = false;
  let allRows = null;      // an export's every row (filtered here)

  for (const name of FILTERS) {
    if (params.has(name)) form.elements[name].value = params.get(name);
  }
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const name of FILTERS) {
      const v = form.elements[name].value.trim();
      if (v) q.set(name, v);
    }
    location.search = q.toString();
  });
  document.getElementById("clear").addEventListener("click", () => { location.search = ""; });

  function filterQuery() {
    const q = new URLSearchParams();
    for (const name of FILTERS) if (params.get(name)) q.set(name, params.get(name));
    return q;
  }

  // An export filters here what the server filters (its rows carry their changed paths).
  function keeps(r) {
    const p = (k) => params.get(k);
    return (!p("kind") || r.kind === p("kind"))
      && (!p("mark") || r.marks.includes(p("mark")))
      && (!p("path") || r.paths.some((x) => x.includes(p("path"))))
      && (!p("host") || r.hosts.some((h) => h.includes(p("host"))))
      && (!p("from") || r.number >= Number(p("from")))
      && (!p("to") || r.number <= Number(p("to")));
  }

  function rowElement(r) {
    const tr = document.createElement("tr");
    tr.id = "step-" + r.number;
    tr.dataset.marks = r.marks.join(" ");
    if (r.marks.includes("rewound-over")) tr.className = "rewound-over";
    const num = envgit.el("td", null, "num");
    const a = envgit.el("a", r.number);
    a.href = envgit.stepLink(r.number);
    num.appendChild(a);
    tr.appendChild(num);
    tr.appendChild(envgit.el("td", r.kind, "kind"));
    const what = envgit.el("td", r.summary, "what");
    what.title = r.command || r.summary;
    tr.appendChild(what);
    tr.appendChild(envgit.el("td", envgit.duration(r.duration_ms), "num"));
    tr.appendChild(envgit.el("td", r.exit_code === null ? "" : r.exit_code,
      r.exit_code ? "num bad" : "num"));
    tr.appendChild(envgit.el("td", r.files_changed
      ? r.project_files_changed + " (" + r.files_changed + " with .git)" : "", "num"));
    const q = r.requests;
    const parts = [];
    if (q.allowed) parts.push(q.allowed + " allowed");
    if (q.approved) parts.push(q.approved + " approved");
    if (q.denied) parts.push(q.denied + " denied");
    if (q.uninspected) parts.push(q.uninspected + " uninspected");
    tr.appendChild(envgit.el("td", parts.join(", "), q.denied ? "bad" : ""));
    tr.appendChild(envgit.marks(r.marks));
    return tr;
  }

  function append(list) {
    const frag = document.createDocumentFragment();
    for (const r of list) frag.appendChild(rowElement(r));
    rows.appendChild(frag);
  }

  async function loadOlder(limit) {
    if (loading) return;
    loading = true;
    try {
      if (envgit.exported) {
        if (allRows === null) {
          const page = await envgit.get(null, "steps");
          allRows = page.rows.filter(keeps);
          head = page.head;
          nextBefore = 0;
        }
        append(allRows.splice(0, limit));
        if (allRows.length === 0) nextBefore = null;
      } else {
        const q = filterQuery();
        q.set("limit", limit);
        if (nextBefore !== null) q.set("before", nextBefore);
        const page = await envgit.get("/api/steps?" + q);
        const first = rows.childElementCount === 0;
        if (first) head = page.head;
        append(page.rows);
        // When the first rows reach the screen (the paint benchmark reads this mark).
        if (first) requestAnimationFrame(() => performance.mark("envgit:first-rows"));
        nextBefore = page.next_before;
      }
      more.textContent = nextBefore === null ? "" : "scroll for older steps";
    } catch (e) {
      more.textContent = "cannot load steps: " + e.message;
    } finally {
      loading = false;
    }
  }

  async function loadNewer() {
    const q = filterQuery();
    q.set("after", head);
    q.set("limit", 1000);
    const page = await envgit.get("/api/steps?" + q);
    head = Math.max(head, page.head);
    const frag = document.createDocumentFragment();
    for (const r of page.rows) frag.appendChild(rowElement(r));
    rows.insertBefore(frag, rows.firstChild);
  }

  function renderHeld(list) {
    const section = document.getElementById("held");
    const box = document.getElementById("held-list");
    box.replaceChildren();
    section.hidden = list.length === 0;
    for (const h of list) {
      const item = envgit.el("div", null, "held-item");
      item.id = "held-" + h.run + "-" + h.id;
      item.appendChild(envgit.el("strong", "#" + h.id + " " + h.method + " " + h.host + h.path));
      item.appendChild(envgit.el("div", h.summary));
      item.appendChild(envgit.el("div", "rule " + h.rule + ", body " + h.body_hash.slice(0, 16), "dim"));
      if (h.body_preview) item.appendChild(envgit.el("pre", h.body_preview));
      const answer = envgit.el("div", null, "answer");
      for (const verb of ["approve", "deny"]) {
        const b = envgit.el("button", verb === "approve" ? "Approve" : "Deny");
        b.type = "button";
        b.className = verb;
        b.addEventListener("click", async () => {
          b.disabled = true;
          const path = "/api/held/" + encodeURIComponent(h.run) + "/" + h.id + "/"
            + h.asked_at_ms + "/" + verb;
          try {
            await envgit.post(path);
            status.textContent = verb === "approve" ? "approved" : "denied";
          } catch (e) {
            status.textContent = e.message;
          }
        });
        answer.appendChild(b);
      }
      const status = envgit.el("span", "", "dim");
      answer.appendChild(status);
      item.appendChild(answer);
      box.appendChild(item);
    }
  }

  async function start() {
    try {
      const project = await envgit.get("/api/project", "project");
      document.getElementById("project").textContent = project.root;
    } catch (_) { /* the rows say what failed */ }
    await loadOlder(50);
    const sentinel = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting) && nextBefore !== null) loadOlder(200);
    });
    sentinel.observe(more);
    if (envgit.exported) return;
    const live = document.getElementById("live");
    const events = new EventSource("/api/events");
    events.addEventListener("open", () => { live.textContent = "live"; });
    events.addEventListener("error", () => { live.textContent = "not live (reconnecting)"; });
    events.addEventListener("steps", (ev) => {
      const h = JSON.parse(ev.data).head;
      if (h > head) loadNewer().catch((e) => { more.textContent = e.message; });
    });
    events.addEventListener("held", (ev) => renderHeld(JSON.parse(ev.data)));
  }

  start();
})();
