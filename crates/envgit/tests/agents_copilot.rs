//! `envgit hooks install copilot` with the real Copilot CLI (1.0.102, installed by
//! scripts/install-deps-agents), offline: Copilot's BYOK provider points at a scripted Messages
//! API server on 127.0.0.1. Copilot is recorded, not enforced at the request: one step per tool
//! call, and a command line matching a shell rule never runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents_support;
mod support;

use std::time::Duration;

use agents_support::{Api, ModelServer, Turn, agent_bin_dir, agents_dir, path_with, run_bounded};
use serde_json::{Value, json};
use support::Env;

fn copilot(env: &Env, copilot_home: &std::path::Path, server: &ModelServer) -> (String, String) {
    let bin = agent_bin_dir("copilot");
    let cache = agents_dir().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let mut cmd = std::process::Command::new(bin.join("copilot"));
    cmd.args([
        "-p",
        "do the scripted work",
        "--allow-all-tools",
        "--no-auto-update",
    ])
    .current_dir(&env.project)
    .env("HOME", env.user_home())
    .env("ENVGIT_HOME", &env.home)
    .env("COPILOT_HOME", copilot_home)
    .env("XDG_CACHE_HOME", cache)
    .env("COPILOT_OFFLINE", "true")
    .env(
        "COPILOT_PROVIDER_BASE_URL",
        format!("http://127.0.0.1:{}", server.port),
    )
    .env("COPILOT_PROVIDER_TYPE", "anthropic")
    .env("COPILOT_PROVIDER_API_KEY", "test")
    .env("COPILOT_MODEL", "claude-sonnet-4.5")
    .env("PATH", path_with(&bin))
    .env_remove("GITHUB_TOKEN")
    .env_remove("GH_TOKEN")
    .env_remove("COPILOT_GITHUB_TOKEN");
    run_bounded(cmd, Duration::from_secs(180))
}

fn refusals(step: &Value) -> Vec<String> {
    step["refusals"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|r| r["what"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn copilot_tool_calls_are_steps_and_a_denied_command_never_runs() {
    let env = Env::new();
    env.init();
    let yaml = env.read("envgit.yaml") + "shell:\n  - deny: [\"npm publish\"]\n";
    env.write("envgit.yaml", &yaml);
    env.write(".env", "TOKEN=hunter2-value\n");
    let before = env.record();
    let copilot_home = env.tmp.path().join("copilot-home");
    let inst = env
        .cmd(&env.project)
        .args(["hooks", "install", "copilot"])
        .env("COPILOT_HOME", &copilot_home)
        .output()
        .unwrap();
    let inst_err = String::from_utf8_lossy(&inst.stderr).to_string();
    assert!(inst.status.success(), "{inst_err}");
    assert!(
        inst_err.contains("recorded, not enforced at the request"),
        "{inst_err}"
    );
    let hooks_file = copilot_home.join("hooks/envgit.json");
    assert!(hooks_file.exists());

    let created = env.path("created.txt");
    let server = ModelServer::start(
        Api::Messages,
        vec![
            Turn::Shell("echo from-copilot > cp.txt".into()),
            Turn::Shell("touch cp-denied.txt && npm publish".into()),
            Turn::Tool(
                "create".into(),
                json!({"path": created.display().to_string(), "file_text": "created by copilot\n"}),
            ),
            Turn::Tool(
                "edit".into(),
                json!({"path": env.path("envgit.yaml").display().to_string(),
                       "old_str": "version: 1", "new_str": "version: 1\n# loosened"}),
            ),
            Turn::Tool(
                "view".into(),
                json!({"path": env.path(".env").display().to_string()}),
            ),
            Turn::Say("all done".into()),
        ],
    );
    let (stdout, stderr) = copilot(&env, &copilot_home, &server);
    let ctx = format!(
        "stdout:\n{stdout}\nstderr:\n{stderr}\nmodel saw:\n{}",
        server.transcript()
    );

    // The allowed command ran and the denied one never did.
    assert_eq!(env.read("cp.txt"), "from-copilot\n", "{ctx}");
    assert!(
        !env.path("cp-denied.txt").exists(),
        "the denied command ran: {ctx}"
    );
    assert_eq!(env.read("created.txt"), "created by copilot\n", "{ctx}");

    // One step per tool call, in order.
    let log = env.log_json();
    let new: Vec<&Value> = log
        .iter()
        .filter(|s| s["number"].as_u64().unwrap() > before)
        .rev()
        .collect();
    assert_eq!(new.len(), 5, "one step per tool call: {new:#?}\n{ctx}");
    assert!(new.iter().all(|s| s["kind"] == "tool"), "{new:#?}");
    assert!(
        new[0]["summary"]
            .as_str()
            .unwrap()
            .contains("echo from-copilot > cp.txt")
    );
    assert!(
        new[0]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "cp.txt"),
        "{:#}",
        new[0]
    );
    assert_eq!(
        refusals(new[1]),
        vec!["command touch cp-denied.txt && npm publish".to_string()],
        "{:#}",
        new[1]
    );
    assert!(
        new[2]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "created.txt"),
        "{:#}",
        new[2]
    );

    assert_eq!(
        refusals(new[3]),
        vec!["write envgit.yaml".to_string()],
        "{:#}",
        new[3]
    );
    assert_eq!(env.read("envgit.yaml"), yaml, "{ctx}");
    assert_eq!(
        refusals(new[4]),
        vec!["read .env".to_string()],
        "{:#}",
        new[4]
    );
    assert!(
        !server.transcript().contains("hunter2"),
        "the secret reached the model"
    );

    // The reason reached the model.
    assert!(
        server.transcript().contains(
            "envgit: denied command touch cp-denied.txt && npm publish (rule shell.deny)"
        ),
        "{ctx}"
    );

    // Uninstall removes exactly the file install wrote.
    let un = env
        .cmd(&env.project)
        .args(["hooks", "uninstall", "copilot"])
        .env("COPILOT_HOME", &copilot_home)
        .output()
        .unwrap();
    assert!(
        un.status.success(),
        "{}",
        String::from_utf8_lossy(&un.stderr)
    );
    assert!(!hooks_file.exists());
    assert!(
        copilot_home.join("hooks").exists(),
        "uninstall removed more than its file"
    );
}

#[test]
fn hooks_do_nothing_outside_a_project_and_uninstall_keeps_a_changed_file() {
    let env = Env::new();
    let copilot_home = env.tmp.path().join("copilot-home");
    let run = |args: &[&str]| {
        env.cmd(env.tmp.path())
            .args(args)
            .env("COPILOT_HOME", &copilot_home)
            .output()
            .unwrap()
    };
    assert!(
        run(&["hooks", "install", "copilot", "--user"])
            .status
            .success()
    );
    // The hook itself, outside any project: no answer, no failure.
    let payload =
        json!({"cwd": env.tmp.path(), "toolName": "bash", "toolArgs": {"command": "npm publish"}});
    let out = support::output_with_stdin(
        env.cmd(env.tmp.path()).args(["hook", "copilot", "pre"]),
        payload.to_string().as_bytes(),
    );
    assert!(out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A file the user changed is not removed.
    let file = copilot_home.join("hooks/envgit.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    v["hooks"]["sessionStart"] = json!([{"type": "command", "bash": "echo mine"}]);
    std::fs::write(&file, v.to_string()).unwrap();
    let un = run(&["hooks", "uninstall", "copilot"]);
    assert!(!un.status.success());
    assert!(file.exists());
}
