// Shared by the pages: fetching the server's JSON (or an export's files), and building
// elements. Everything the agent wrote goes in with textContent, never as HTML.
"use strict";

const envgit = {
  exported: window.ENVGIT_EXPORT === true,

  // `path` is the server's (`/api/steps/4`); an export holds the same answer under `key`
  // (`steps/4`), in `data/KEY.js`: a script that sets `ENVGIT_DATA[KEY]`, since a page opened
  // from disk (file://) may load scripts beside it but not fetch files.
  async get(path, key) {
    if (envgit.exported) return key === null ? null : envgit.load(key);
    const resp = await fetch(path, { credentials: "same-origin" });
    if (!resp.ok) {
      let why = resp.status + " " + resp.statusText;
      try { why = (await resp.json()).error || why; } catch (_) { /* not JSON */ }
      throw new Error(why);
    }
    return resp.json();
  },

  // An export's `data/KEY.js`, loaded once by a script element.
  load(key) {
    const data = window.ENVGIT_DATA || (window.ENVGIT_DATA = {});
    if (key in data) return Promise.resolve(data[key]);
    return new Promise((resolve, reject) => {
      const file = "data/" + key + ".js";
      const s = document.createElement("script");
      s.src = file;
      s.addEventListener("load", () => {
        if (key in data) resolve(data[key]); else reject(new Error(file + " does not hold " + key));
      });
      s.addEventListener("error", () => reject(new Error(file + " is not in this export")));
      document.head.appendChild(s);
    });
  },

  // A state-changing request: the CSRF header (the browser adds Origin).
  async post(path) {
    const resp = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-Envgit-CSRF": "1" },
    });
    let body = null;
    try { body = await resp.json(); } catch (_) { /* not JSON */ }
    if (!resp.ok) throw new Error((body && body.error) || resp.status + " " + resp.statusText);
    return body;
  },

  el(tag, text, className) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (className) e.className = className;
    return e;
  },

  stepLink(n) {
    return (envgit.exported ? "step.html?n=" : "step?n=") + encodeURIComponent(n);
  },

  duration(ms) {
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
  },

  time(ms) {
    return new Date(ms).toLocaleString();
  },

  marks(list) {
    const td = envgit.el("td", null, "marks");
    for (const m of list) td.appendChild(envgit.el("span", m, "mark " + m));
    return td;
  },
};
