// The helpers every session starts with. Evaluated once per context; it receives the only host
// functions the session has (print, call, now) and closes over them, so nothing named `__host`
// is left on the global object. Nothing here grants I/O: `call` reaches the host, which decides.
(function (hostPrint, hostCall, hostNow, catalogJson, seed) {
  "use strict";
  const G = globalThis;
  const define = (name, value) =>
    Object.defineProperty(G, name, { value, writable: true, configurable: true, enumerable: false });
  const catalog = JSON.parse(catalogJson);

  // --- rendering values as text (console and the cell's value) ---------------------------
  function show(v) {
    if (typeof v === "string") return v;
    return toJson(v);
  }
  function toJson(v) {
    const stack = [];
    const replacer = function (key, x) {
      if (typeof x === "bigint") return x.toString() + "n";
      if (typeof x === "function") return "[Function " + (x.name || "anonymous") + "]";
      if (typeof x === "symbol") return x.toString();
      if (x === undefined) return key === "" ? "undefined" : undefined;
      if (x instanceof Error) return x.name + ": " + x.message;
      if (x instanceof Map) return { "[Map]": Array.from(x.entries()) };
      if (x instanceof Set) return { "[Set]": Array.from(x.values()) };
      if (typeof x === "object" && x !== null) {
        // `this` is the holder: unwind the stack to it, then look for a cycle.
        while (stack.length > 0 && stack[stack.length - 1] !== this) stack.pop();
        if (stack.includes(x)) return "[Circular]";
        stack.push(x);
      }
      return x;
    };
    const out = JSON.stringify(v, replacer);
    return out === undefined ? String(v) : out;
  }
  function render(v) {
    if (v === undefined) return undefined;
    if (typeof v === "string") return JSON.stringify(v);
    return toJson(v);
  }
  function describeError(e) {
    if (e instanceof Error) {
      let text = (e.name || "Error") + ": " + e.message;
      const stack = typeof e.stack === "string" ? e.stack : "";
      const where = stack
        .split("\n")
        .map((l) => l.trim())
        .filter((l) => l.includes("cell:"));
      if (where.length > 0) text += "\n    " + where.slice(0, 5).join("\n    ");
      return text;
    }
    return "uncaught " + toJson(e);
  }

  // --- console -----------------------------------------------------------------------------
  const mk = (level) => (...args) => hostPrint(level, args.map(show).join(" "));
  define(
    "console",
    Object.freeze({ log: mk(0), info: mk(0), debug: mk(0), warn: mk(1), error: mk(2) })
  );
  define("print", mk(0));

  // --- determinism: seeded Math.random, journaled clock -----------------------------------
  let s = seed >>> 0;
  Object.defineProperty(Math, "random", {
    value: function random() {
      s = (s + 0x6d2b79f5) | 0;
      let t = Math.imul(s ^ (s >>> 15), 1 | s);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    },
    writable: true,
    configurable: true,
  });
  const RealDate = Date;
  function EnvDate(...a) {
    if (!new.target) return new RealDate(hostNow()).toString();
    return a.length === 0 ? new RealDate(hostNow()) : new RealDate(...a);
  }
  EnvDate.prototype = RealDate.prototype;
  EnvDate.now = () => hostNow();
  EnvDate.parse = RealDate.parse;
  EnvDate.UTC = RealDate.UTC;
  Object.defineProperty(RealDate.prototype, "constructor", {
    value: EnvDate,
    writable: true,
    configurable: true,
  });
  define("Date", EnvDate);

  // --- helpers -----------------------------------------------------------------------------
  class AssertionError extends Error {
    constructor(message) {
      super(message === undefined ? "assertion failed" : String(message));
      this.name = "AssertionError";
    }
  }
  class ToolError extends Error {
    constructor(server, tool, message) {
      super(server + "." + tool + ": " + message);
      this.name = "ToolError";
      this.server = server;
      this.tool = tool;
    }
  }
  define("AssertionError", AssertionError);
  define("ToolError", ToolError);
  define("assert", function assert(cond, message) {
    if (!cond) throw new AssertionError(message);
  });
  define("sample", function sample(x, n) {
    n = n === undefined ? 5 : Math.max(0, n | 0);
    const bytes = (() => {
      try {
        const j = JSON.stringify(x);
        return j === undefined ? 0 : j.length;
      } catch (_) {
        return undefined;
      }
    })();
    if (Array.isArray(x)) return { type: "array", total: x.length, items: x.slice(0, n), bytes };
    if (typeof x === "string")
      return { type: "string", total: x.length, items: x.slice(0, n * 40), bytes };
    if (x !== null && typeof x === "object") {
      const keys = Object.keys(x);
      const items = {};
      for (const k of keys.slice(0, n)) items[k] = x[k];
      return { type: "object", total: keys.length, items, bytes };
    }
    return { type: typeof x, total: 1, items: x, bytes };
  });
  function shape(x, depth) {
    if (x === null) return "null";
    if (Array.isArray(x)) {
      if (x.length === 0) return "unknown[]";
      if (depth > 5) return "unknown[]";
      const kinds = [];
      for (const item of x.slice(0, 20)) {
        const k = shape(item, depth + 1);
        if (!kinds.includes(k)) kinds.push(k);
      }
      return kinds.length === 1 ? kinds[0] + "[]" : "(" + kinds.join(" | ") + ")[]";
    }
    if (typeof x === "object") {
      if (depth > 5) return "object";
      const keys = Object.keys(x);
      const fields = keys.slice(0, 50).map((k) => (/^[A-Za-z_$][\w$]*$/.test(k) ? k : JSON.stringify(k)) + ": " + shape(x[k], depth + 1));
      if (keys.length > 50) fields.push("/* " + (keys.length - 50) + " more */");
      return "{ " + fields.join("; ") + " }";
    }
    if (typeof x === "function") return typeof x.describe === "function" ? x.describe() : "Function";
    return typeof x;
  }
  define("schema", function schema(x) {
    return shape(x, 0);
  });

  // --- tools -------------------------------------------------------------------------------
  async function callTool(server, tool, args) {
    if (args === undefined) args = {};
    let text;
    try {
      text = JSON.stringify(args);
    } catch (e) {
      throw new TypeError(server + "." + tool + ": arguments are not JSON: " + e.message);
    }
    const reply = JSON.parse(await hostCall(server, tool, text === undefined ? "{}" : text));
    if (!reply.ok) throw new ToolError(server, tool, reply.error);
    return reply.value;
  }
  const index = [];
  for (const ns of catalog.namespaces) {
    const obj = {};
    for (const t of ns.tools) {
      const f = (args) => callTool(ns.server, t.wire, args);
      Object.defineProperty(f, "name", { value: t.name });
      f.describe = () => t.ts;
      obj[t.name] = Object.freeze(f);
      index.push({ name: ns.name + "." + t.name, description: t.description, ts: t.ts });
    }
    define(ns.name, Object.freeze(obj));
  }
  define(
    "tools",
    Object.freeze({
      list: () => index.map((t) => t.name),
      search: (query, limit) => {
        limit = limit === undefined ? 10 : limit | 0;
        const words = String(query === undefined ? "" : query)
          .toLowerCase()
          .split(/[^a-z0-9_]+/)
          .filter((w) => w.length > 0);
        const scored = index
          .map((t) => {
            const hay = (t.name + " " + t.description).toLowerCase();
            let score = 0;
            for (const w of words) if (hay.includes(w)) score += t.name.toLowerCase().includes(w) ? 2 : 1;
            return { t, score };
          })
          .filter((x) => words.length === 0 || x.score > 0);
        scored.sort((a, b) => b.score - a.score || (a.t.name < b.t.name ? -1 : 1));
        return scored.slice(0, limit).map((x) => ({ name: x.t.name, description: x.t.description }));
      },
      describe: (name) => {
        if (name === undefined) return index.map((t) => t.ts).join("\n\n");
        const hit = index.find((t) => t.name === name);
        if (hit === undefined)
          throw new Error("no tool named " + name + "; tools.list() or tools.search(words) shows what exists");
        return hit.ts;
      },
    })
  );

  return { render, describeError };
});
