#!/usr/bin/env node
// The `envgit` command of the agent-envgit package: finds the native binary in the package npm
// installed for this platform (an optional dependency, like Codex's) and runs it with this
// process's arguments, stdio and environment, ending as it ended (its exit code or signal).
"use strict";

const { spawn } = require("node:child_process");
const { existsSync } = require("node:fs");
const path = require("node:path");

const PLATFORM_PACKAGES = {
  "linux-x64": "@agent-envgit/linux-x64",
};

function fail(message) {
  process.stderr.write(`envgit: ${message}\n`);
  process.exit(1);
}

const key = `${process.platform}-${process.arch}`;
const pkg = PLATFORM_PACKAGES[key];
if (!pkg) {
  fail(
    `no envgit binary for ${key}: envgit runs on Linux x86_64 (glibc); ` +
      "see docs/install.md in the repository to build it from source",
  );
}

let binary;
try {
  binary = path.join(path.dirname(require.resolve(`${pkg}/package.json`)), "bin", "envgit");
} catch {
  fail(
    `the package ${pkg} is not installed (npm skips it when installing with --omit=optional ` +
      "or --no-optional, or on a system without glibc): reinstall with `npm install -g agent-envgit`",
  );
}
if (!existsSync(binary)) {
  fail(`${binary} is missing: reinstall with \`npm install -g agent-envgit\``);
}

// Node 22.15+ can replace itself with the binary: no second process, signals go straight there.
if (typeof process.execve === "function") {
  try {
    process.execve(binary, [binary, ...process.argv.slice(2)], process.env);
  } catch (e) {
    fail(`cannot run ${binary}: ${e.message}`);
  }
}

const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });
child.on("error", (e) => fail(`cannot run ${binary}: ${e.message}`));

// A terminal's Ctrl-C and Ctrl-\ reach the whole foreground process group, the binary included:
// Node only has to survive them. Signals sent to this process alone are passed on.
for (const sig of ["SIGINT", "SIGQUIT"]) {
  process.on(sig, () => {});
}
for (const sig of ["SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    try {
      child.kill(sig);
    } catch {
      // The child is gone already; its exit ends this process.
    }
  });
}

child.on("exit", (code, signal) => {
  if (signal) {
    // End by the same signal, so the caller's shell sees what happened.
    for (const sig of ["SIGINT", "SIGQUIT", "SIGTERM", "SIGHUP"]) {
      process.removeAllListeners(sig);
    }
    process.kill(process.pid, signal);
    // A signal Node cannot die of (ignored or caught elsewhere): the shell's convention.
    const number = require("node:os").constants.signals[signal] ?? 0;
    process.exit(128 + number);
  }
  process.exit(code ?? 1);
});
