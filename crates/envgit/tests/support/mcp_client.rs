//! Driving `envgit mcp` with the official Python MCP SDK (installed by
//! `scripts/install-deps-mcp`) as a real client over stdio with a stripped environment, and
//! the `fx` downstream server the tests give a project (`mcp_fx_server.py`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

use super::{Env, envgit_bin};

/// Seconds one client run may take, start to finish.
const CLIENT_TIMEOUT: &str = "120";

const DRIVER: &str = include_str!("mcp_driver.py");

/// A downstream MCP server: typed tools, one that returns 300 KB, one that fails, two the
/// policy denies or asks about (they leave a marker file if they ever run), and two that make
/// HTTP requests of their own (through the sandbox's gate).
pub const FX_SERVER: &str = include_str!("mcp_fx_server.py");

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder holding the `mcp` package: `$ENVGIT_PYDEPS`, else /opt/envgit-test-deps/pydeps
/// (where the sandbox sees it; the checkout's target/ is not in its view) after running
/// scripts/install-deps-mcp (idempotent; fast when already there).
pub fn pydeps() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("ENVGIT_PYDEPS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/opt/envgit-test-deps/pydeps"));
        let out = Command::new(workspace().join("scripts/install-deps-mcp"))
            .env("ENVGIT_PYDEPS", &dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/install-deps-mcp failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir.canonicalize().unwrap()
    })
}

/// Runs the client against `envgit mcp` in `env`'s project with `calls` (arguments of
/// `execute`). `mode`: the Python client's `auto` (2026-07-28 if the server speaks it) or
/// `legacy` (initialize); `answer`: what it answers elicitations with (none: it cannot elicit).
pub fn drive(env: &Env, calls: Value, mode: &str, answer: Option<&str>) -> Value {
    drive_with(env, calls, mode, answer, json!({}))
}

/// [`drive`] with more variables for `envgit mcp` (`vars`, a JSON object of strings), over
/// the client's defaults (`PATH`, `HOME`, …).
pub fn drive_with(env: &Env, calls: Value, mode: &str, answer: Option<&str>, vars: Value) -> Value {
    let out = client(env, calls, mode, answer, vars).output().unwrap();
    assert!(
        out.status.success(),
        "client failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The client of [`drive_with`], ready to run (or to start, and end mid-call).
pub fn client(env: &Env, calls: Value, mode: &str, answer: Option<&str>, vars: Value) -> Command {
    let dir = env.tmp.path();
    std::fs::write(dir.join("driver.py"), DRIVER).unwrap();
    // What an MCP client passes: nothing but the store's home (README), and `vars`.
    let mut envgit_env = json!({"ENVGIT_HOME": env.home});
    if let (Some(all), Some(more)) = (envgit_env.as_object_mut(), vars.as_object()) {
        all.extend(more.clone());
    }
    let spec = json!({
        "envgit": envgit_bin(),
        "project": env.project,
        "env": envgit_env,
        "calls": calls,
        "mode": mode,
        "answer": answer,
    });
    std::fs::write(dir.join("spec.json"), spec.to_string()).unwrap();
    // The client itself starts with a stripped environment too.
    let mut client = Command::new("timeout");
    client
        .args([CLIENT_TIMEOUT, "python3", "driver.py", "spec.json"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", env.user_home())
        .env("PYTHONPATH", pydeps());
    client
}

/// The pid of the `envgit mcp` serving `env`'s project (the client started it), once it runs.
pub fn server_pid(env: &Env) -> Option<u32> {
    // Exactly what the client runs: its downstream servers' hosts say more (`--downstream`).
    envgit_mcp_pids(env, |args| args.len() == 4)
        .into_iter()
        .next()
}

/// The pids of the `envgit mcp` processes of `env`'s project (the server and the hosts of its
/// downstream servers) whose arguments `pick` takes.
pub fn envgit_mcp_pids(env: &Env, pick: impl Fn(&[&[u8]]) -> bool) -> Vec<u32> {
    let Some(project) = env.project.to_str() else {
        return Vec::new();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.strip_suffix(b"\0")?.split(|&b| b == 0).collect();
            let ours = args.len() >= 4
                && args[0] == envgit_bin().as_bytes()
                && args[1] == b"mcp"
                && args[2] == b"--project"
                && args[3] == project.as_bytes();
            (ours && pick(&args)).then_some(pid)
        })
        .collect()
}

/// Kills (SIGKILL) every `envgit mcp` process of `env`'s project (the server, the hosts of
/// its downstream servers winding down) and waits, bounded, until each has exited: a killed
/// process lets go of its locks only as it exits, after `kill` returned (and after its memory,
/// so an empty command line does not say it), and the next command must not find the dead
/// session's copy still held.
pub fn kill_all_envgit_mcp(env: &Env) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut killed: Vec<u32> = Vec::new();
    loop {
        let running = envgit_mcp_pids(env, |_| true);
        for pid in &running {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
        killed.extend(running);
        killed.retain(|pid| !has_exited(*pid));
        if killed.is_empty() && envgit_mcp_pids(env, |_| true).is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "envgit mcp processes outlived SIGKILL: {killed:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Waits, bounded, until `pid` (killed) has exited.
pub fn wait_exited(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !has_exited(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} outlived SIGKILL"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether `pid` has exited with all its threads: gone, or every thread a zombie. A leader
/// thread turns zombie before the others have exited, and their shared files (the session's
/// locks) are closed only with the last.
fn has_exited(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            return true;
        };
        // `pid (comm) STATE …`: the state follows the last `)`.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
    })
}

/// Gives `env`'s project the fx server (in the sandbox: its script lives in the project, which
/// it can see), denies `fx.delete_*` and asks for `fx.create_issue`, then `extra`; returns
/// the folder its marker files go to.
pub fn add_fx_server(env: &Env, extra: &str) -> PathBuf {
    let markers = env.path("markers");
    std::fs::create_dir_all(&markers).unwrap();
    env.write("fx_server.py", FX_SERVER);
    let policy = format!(
        "mcp:\n  servers:\n    fx:\n      command: /usr/bin/python3\n      args: [fx_server.py, {:?}]\n      env: {{ PYTHONPATH: {:?} }}\n  tools:\n    \"fx.delete_*\": deny\n    \"fx.create_issue\": ask\n{extra}",
        markers.to_str().unwrap(),
        pydeps().to_str().unwrap(),
    );
    let mut text_policy = env.read("envgit.yaml");
    assert!(!text_policy.lines().any(|l| l.starts_with("mcp:")));
    text_policy.push_str(&policy);
    env.write("envgit.yaml", &text_policy);
    markers
}
