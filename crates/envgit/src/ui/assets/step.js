// A step's page: its facts, requests, approvals, notes, the commands that would go back to
// it, and its diff against its parent in pages.
"use strict";

(function () {
  const n = new URLSearchParams(location.search).get("n");
  const diffBox = document.getElementById("diff");
  const moreFiles = document.getElementById("diff-more");
  let nextOffset = 0;

  function fact(label, value) {
    if (value === null || value === undefined || value === "") return;
    const p = envgit.el("div");
    p.appendChild(envgit.el("strong", label + ": "));
    p.appendChild(document.createTextNode(String(value)));
    document.getElementById("facts").appendChild(p);
  }

  function lineClass(l) {
    if (l.startsWith("+++") || l.startsWith("---")) return "";
    if (l.startsWith("+")) return "add";
    if (l.startsWith("-")) return "del";
    if (l.startsWith("@@")) return "hunk";
    return "";
  }

  function addLines(pre, lines) {
    const frag = document.createDocumentFragment();
    for (const l of lines) frag.appendChild(envgit.el("span", l, lineClass(l)));
    pre.appendChild(frag);
  }

  function fileElement(f) {
    const box = envgit.el("div", null, "file");
    box.appendChild(envgit.el("h3", f.path + (f.masked ? " (masked)" : "")));
    const pre = envgit.el("pre");
    addLines(pre, f.lines);
    box.appendChild(pre);
    if (f.more_lines > 0) {
      const b = envgit.el("button", f.more_lines + " more lines");
      b.type = "button";
      if (envgit.exported) {
        b.disabled = true;
        b.textContent = f.more_lines + " more lines (not in the export)";
      }
      let from = f.from + f.lines.length;
      b.addEventListener("click", async () => {
        const page = await envgit.get("/api/steps/" + n + "/diff?file=" + f.index + "&from=" + from);
        const part = page.files[0];
        addLines(pre, part.lines);
        from = part.from + part.lines.length;
        if (part.more_lines === 0) b.remove(); else b.textContent = part.more_lines + " more lines";
      });
      box.appendChild(b);
    }
    return box;
  }

  async function loadDiff() {
    const page = await envgit.get("/api/steps/" + n + "/diff?offset=" + nextOffset,
      "steps/" + n + "/diff-" + nextOffset);
    document.getElementById("diff-summary").textContent = page.total_files + " file(s) changed";
    const first = diffBox.childElementCount === 0;
    for (const f of page.files) diffBox.appendChild(fileElement(f));
    // When the diff's first screen reaches the screen (the paint benchmark reads this mark).
    if (first) requestAnimationFrame(() => performance.mark("envgit:first-diff"));
    nextOffset = page.next_offset;
    moreFiles.hidden = nextOffset === null;
  }

  async function start() {
    let d;
    try {
      // Only a number names a step (in an export it becomes part of a script's path).
      if (!/^[0-9]+$/.test(n || "")) throw new Error("the address names no step (?n=NUMBER)");
      d = await envgit.get("/api/steps/" + n, "steps/" + n);
    } catch (e) {
      document.getElementById("title").textContent = "cannot load step " + n + ": " + e.message;
      return;
    }
    const r = d.record;
    document.title = "envgit: step " + r.number;
    if (envgit.exported) document.getElementById("back").href = "index.html";
    const title = document.getElementById("title");
    title.textContent = "step " + r.number + " (" + r.kind + "): " + r.summary;
    fact("command", r.command ? r.command.join(" ") : null);
    fact("in", r.cwd);
    fact("started", envgit.time(r.started_at_ms));
    fact("took", envgit.duration(d.row.duration_ms));
    fact("exit code", r.exit_code);
    fact("parent", r.parent);
    fact("restored step", r.target);
    fact("rewound over by step", d.row.rewound_by);
    const marks = envgit.el("div");
    marks.appendChild(envgit.el("strong", "marks: "));
    for (const m of d.row.marks) marks.appendChild(envgit.el("span", m, "mark " + m));
    document.getElementById("facts").appendChild(marks);
    document.getElementById("rewind-cmd").textContent = d.rewind_command;
    document.getElementById("fork-cmd").textContent = d.fork_command;
    for (const b of document.querySelectorAll("button[data-copy]")) {
      b.addEventListener("click", () => {
        navigator.clipboard.writeText(document.getElementById(b.dataset.copy).textContent);
      });
    }
    const tbody = document.querySelector("#requests tbody");
    for (const q of r.requests) {
      const tr = envgit.el("tr");
      tr.appendChild(envgit.el("td", q.decision, q.decision === "allowed" ? "" : "bad"));
      tr.appendChild(envgit.el("td", q.method));
      tr.appendChild(envgit.el("td", q.host));
      tr.appendChild(envgit.el("td", q.path, "what"));
      tr.appendChild(envgit.el("td", q.status === null ? "" : q.status));
      tr.appendChild(envgit.el("td", q.bytes_out + " / " + q.bytes_in, "num"));
      tr.appendChild(envgit.el("td", (q.rule || "") + (q.irreversible ? " (irreversible)" : "")));
      tbody.appendChild(tr);
    }
    document.getElementById("requests-section").hidden = r.requests.length === 0;
    const approvals = document.getElementById("approvals");
    for (const a of r.approvals) {
      approvals.appendChild(envgit.el("li", a.answer + " " + a.what + " (rule " + a.rule + ") by "
        + a.approver + " at " + envgit.time(a.at_ms)));
    }
    for (const f of r.refusals) {
      approvals.appendChild(envgit.el("li", "refused " + f.what + " (rule " + f.rule + ")", "bad"));
    }
    document.getElementById("approvals-section").hidden = approvals.childElementCount === 0;
    const notes = document.getElementById("notes");
    for (const note of r.notes || []) notes.appendChild(envgit.el("li", note));
    document.getElementById("notes-section").hidden = notes.childElementCount === 0;
    moreFiles.addEventListener("click", () => loadDiff());
    if (r.tree === null) {
      document.getElementById("diff-summary").textContent = "pruned: this step's files are gone";
      return;
    }
    try {
      await loadDiff();
    } catch (e) {
      document.getElementById("diff-summary").textContent = "cannot load the diff: " + e.message;
    }
  }

  start();
})();
