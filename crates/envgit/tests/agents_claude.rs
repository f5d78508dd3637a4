//! `envgit claude` with the real Claude Code CLI (2.1.332, installed by
//! `scripts/install-deps-agents --claude`), offline: a scripted Messages API server on
//! 127.0.0.1, reached through envgit's gate. Every tool call is a step (its files, its
//! requests); a push hidden behind a variable is refused at the request; shell rules are
//! refused by the PreToolUse hook with the reason reaching the model; the API key never enters
//! the sandbox, yet the model requests carry it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents_support;
mod support;

#[allow(dead_code)]
#[path = "../src/demo/git_server.rs"]
mod git_server;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use agents_support::{Api, ModelServer, Turn, agent_bin_dir, path_with, run_bounded};
use support::Env;

/// `envgit claude ARGS` in `env`'s project against the scripted model `server`, with no model
/// credential of the caller's (each test adds the one it is about).
fn claude(env: &Env, server: &ModelServer, args: &[&str]) -> std::process::Command {
    let mut cmd = env.cmd(&env.project);
    cmd.arg("claude")
        .args(args)
        .env("HOME", env.user_home())
        .env("PATH", path_with(&agent_bin_dir("claude")))
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", server.port),
        )
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env_remove("CLAUDE_CODE_OAUTH_TOKEN")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1");
    cmd
}

/// A project whose policy lets the sandbox reach a scripted model server playing `script`.
fn project_with_model(script: Vec<Turn>) -> (Env, ModelServer) {
    let env = Env::new();
    let server = ModelServer::start(Api::Messages, script);
    env.envgit(&["init", "--allow", &format!("127.0.0.1:{}", server.port)])
        .ok();
    (env, server)
}

/// A first tool call that waits (a minute at most) while the person's own tools act on the
/// host ([`on_the_host_during_the_first_call`]).
const WAIT_FOR_THE_HOST: &str = "touch STARTED; i=0; while [ ! -e DONE ] && [ $i -lt 600 ]; \
                                 do sleep 0.1; i=$((i+1)); done; true";

/// The person's own tools on the host during the session: once its first call
/// ([`WAIT_FOR_THE_HOST`]) is under way, `act` runs, then the call is let go. Bounded by that
/// call's own wait.
fn on_the_host_during_the_first_call(
    env: &Env,
    act: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let (started, done) = (env.path("STARTED"), env.path("DONE"));
    std::thread::spawn(move || {
        for _ in 0..2400 {
            if started.exists() {
                act();
                std::fs::write(&done, "").unwrap();
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

#[test]
fn claude_tool_calls_are_steps_and_its_key_stays_outside() {
    let env = Env::new();
    let (remotes, bare) = env.bare_remote();
    let remote = git_server::GitServer::start(&remotes).unwrap();
    env.clone_project_from(&format!("http://127.0.0.1:{}/app.git", remote.port));
    let head = || support::head_of(&bare);
    let before = head();
    const REAL_KEY: &str = "sk-ant-real-7f3e9c-do-not-leak";
    let written = env.path("written.txt");
    let server = ModelServer::start(
        Api::Messages,
        vec![
            Turn::Shell("echo from-claude > cl.txt".into()),
            Turn::Shell("touch cl-denied.txt && npm publish".into()),
            Turn::Shell(
                "echo change >> a.txt && git commit -qam change && g=git; $g push origin HEAD:main"
                    .into(),
            ),
            Turn::Tool(
                "Write".into(),
                json!({"file_path": written.display().to_string(), "content": "by the Write tool\n"}),
            ),
            Turn::Shell("env > inside-env.txt".into()),
            Turn::Shell(
                "sh -c 'echo x > \"$HOME/.claude/settings.json\"' 2> settings-write.txt; true".into(),
            ),
            // A pattern that matches the key without containing it: the command itself is in
            // Claude's transcript under ~/.claude.
            Turn::Shell(
                "grep -rlsE 'sk-ant-real-7f3e9c-do-not-lea[k]' ~ /tmp /run /etc . > inside-grep.txt; true"
                    .into(),
            ),
            Turn::Say("all done".into()),
        ],
    );
    env.envgit(&[
        "init",
        "--allow",
        &format!("127.0.0.1:{}", remote.port),
        "--allow",
        &format!("127.0.0.1:{}", server.port),
    ])
    .ok();
    let yaml = env.read("envgit.yaml") + "shell:\n  - deny: [\"npm publish\"]\n";
    env.write("envgit.yaml", &yaml);
    let first_new = env.record() + 1;
    let settings = env.user_home().join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, "{\"env\": {}}\n").unwrap();

    let mut cmd = claude(
        &env,
        &server,
        &[
            "-p",
            "do the scripted work",
            "--allowedTools",
            "Bash",
            "Write",
            "--output-format",
            "stream-json",
            "--verbose",
        ],
    );
    cmd.env("ANTHROPIC_API_KEY", REAL_KEY);
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    let transcript = server.transcript();
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}\nmodel saw:\n{transcript}");

    let log = env.log_json();
    let steps: Vec<&Value> = log
        .iter()
        .filter(|s| s["number"].as_u64().unwrap() >= first_new)
        .collect();
    let step_of = |needle: &str| -> &Value {
        steps
            .iter()
            .find(|s| s["summary"].as_str().unwrap_or("").contains(needle))
            .unwrap_or_else(|| panic!("no step for {needle:?}: {steps:#?}\n{ctx}"))
    };
    let changed = |step: &Value, path: &str| {
        step["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == path)
    };
    let refused_by = |step: &Value, rule: &str| {
        step["refusals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["rule"] == rule)
    };

    // Each tool call is a step of its own, with its files.
    assert_eq!(env.read("cl.txt"), "from-claude\n", "{ctx}");
    let echo = step_of("claude Bash: echo from-claude > cl.txt");
    assert_eq!(echo["kind"], "tool", "{echo:#}");
    assert!(changed(echo, "cl.txt"), "{echo:#}");
    let write = step_of("claude Write:");
    assert!(changed(write, "written.txt"), "{write:#}\n{ctx}");
    assert!(!changed(write, "cl.txt"), "{write:#}");

    // The shell rule refused at the hook, as a step; the reason reached the model.
    assert!(
        !env.path("cl-denied.txt").exists(),
        "the refused command ran: {ctx}"
    );
    assert!(refused_by(step_of("npm publish"), "shell.deny"), "{ctx}");
    assert!(
        transcript.contains(
            "envgit: denied command touch cl-denied.txt && npm publish (rule shell.deny)"
        ),
        "{ctx}"
    );

    // The push was refused at the request, on the step of the call that made it.
    assert_eq!(head(), before, "{ctx}");
    let push = step_of("$g push");
    assert!(refused_by(push, "git.push"), "{push:#}\n{ctx}");

    // The session is the last step: the model traffic went through the gate.
    let session = steps.iter().max_by_key(|s| s["number"].as_u64()).unwrap();
    assert_eq!(session["kind"], "run", "{session:#}");
    assert!(
        session["summary"]
            .as_str()
            .unwrap()
            .contains("(session: 6 tool call(s))"),
        "{session:#}"
    );
    assert!(
        session["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["path"].as_str().unwrap_or("").starts_with("/v1/messages")),
        "{session:#}"
    );

    // The key: never inside (environment, files), yet on every model request.
    let inside_env = env.read("inside-env.txt");
    assert!(!inside_env.contains(REAL_KEY), "{inside_env}");
    assert!(
        inside_env.contains("ANTHROPIC_API_KEY=envgit-placeholder-"),
        "{inside_env}"
    );
    assert_eq!(
        env.read("inside-grep.txt"),
        "",
        "the key is in files inside"
    );
    // Claude's own settings are read-only inside.
    let refused = env.read("settings-write.txt");
    assert!(
        refused.contains("Read-only file system"),
        "{refused}\n{ctx}"
    );
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        "{\"env\": {}}\n"
    );

    let seen = server.credentials();
    assert!(!seen.is_empty(), "{ctx}");
    assert!(seen.iter().all(|k| k == REAL_KEY), "{seen:?}");
}

/// A Claude.ai login (`~/.claude/.credentials.json`) keeps working under envgit, yet its tokens
/// never enter: inside, the file holds placeholders; the gate puts the real access token on the
/// model requests. An expired login is refused before the run with what to do.
#[test]
fn claude_login_keeps_working_with_its_tokens_outside() {
    const ACCESS: &str = "sk-ant-oat01-real-access-3b1d";
    const REFRESH: &str = "sk-ant-ort01-real-refresh-9e2a";
    let (env, server) = project_with_model(vec![
        Turn::Shell("cat ~/.claude/.credentials.json > creds-inside.txt".into()),
        Turn::Say("done".into()),
    ]);
    let login = env.user_home().join(".claude/.credentials.json");
    std::fs::create_dir_all(login.parent().unwrap()).unwrap();
    let write_login = |expires: u64| {
        let doc = json!({"claudeAiOauth": {
            "accessToken": ACCESS, "refreshToken": REFRESH, "expiresAt": expires,
            "scopes": ["user:inference"], "subscriptionType": "pro"}});
        std::fs::write(&login, doc.to_string()).unwrap();
        doc.to_string()
    };
    // Expired: refused before anything runs, saying what to do.
    write_login(1_000);
    let go = || claude(&env, &server, &["-p", "go", "--allowedTools", "Bash"]);
    let out = go().output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("has expired"), "{stderr}");
    assert!(server.bodies().is_empty());

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let real = write_login(now + 3_600_000);
    let (stdout, stderr) = run_bounded(go(), Duration::from_secs(240));
    let ctx = format!(
        "stdout:\n{stdout}\nstderr:\n{stderr}\nmodel saw:\n{}",
        server.transcript()
    );
    let inside = env.read("creds-inside.txt");
    assert!(inside.contains("envgit-placeholder-"), "{inside}\n{ctx}");
    assert!(
        !inside.contains(ACCESS) && !inside.contains(REFRESH),
        "{inside}"
    );
    let seen = server.credentials();
    assert!(!seen.is_empty(), "{ctx}");
    assert!(
        seen.iter().all(|k| *k == format!("Bearer {ACCESS}")),
        "{seen:?}"
    );
    assert_eq!(std::fs::read_to_string(&login).unwrap(), real);
}

/// Inside `envgit claude`, a PreToolUse that cannot reach the supervisor refuses the call (fail
/// closed); a PostToolUse that cannot never fails the agent.
#[test]
fn a_hook_that_cannot_reach_the_supervisor_refuses() {
    let env = Env::new();
    env.init();
    let payload = json!({
        "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": "echo hi"}, "tool_use_id": "toolu_x",
        "cwd": env.project.display().to_string(),
    });
    let hook = |event: &str| {
        support::output_with_stdin(
            env.cmd(&env.project)
                .args(["hook", "claude", event])
                .env("ENVGIT_HOOKS_SOCKET", env.tmp.path().join("no-such.sock")),
            payload.to_string().as_bytes(),
        )
    };
    let pre = hook("pre");
    let stderr = String::from_utf8_lossy(&pre.stderr);
    assert_eq!(pre.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot reach envgit's supervisor") && stderr.contains("refused"),
        "{stderr}"
    );
    let post = hook("post");
    assert_eq!(post.status.code(), Some(0));
}

/// A token from `claude setup-token` (`CLAUDE_CODE_OAUTH_TOKEN`) is a placeholder inside too, and
/// a refresh token in the environment never enters at all.
#[test]
fn claude_setup_token_stays_outside() {
    const TOKEN: &str = "sk-ant-oat01-setup-token-5c7e";
    const REFRESH: &str = "sk-ant-ort01-env-refresh-81d0";
    let (env, server) = project_with_model(vec![
        // Claude keeps its token out of its tools' environment (and its own, once read).
        Turn::Shell("env > inside-env.txt".into()),
        Turn::Shell("tr '\\0' '\\n' < /proc/$CLAUDE_PID/environ > claude-env.txt".into()),
        Turn::Say("done".into()),
    ]);
    let mut cmd = claude(&env, &server, &["-p", "go", "--allowedTools", "Bash"]);
    cmd.env("CLAUDE_CODE_OAUTH_TOKEN", TOKEN)
        .env("CLAUDE_CODE_OAUTH_REFRESH_TOKEN", REFRESH);
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    // The model requests carry the real token: the gate put it in place of the placeholder
    // (a real token from inside would have been refused, rule gate.credential).
    let seen = server.credentials();
    assert!(!seen.is_empty(), "{ctx}");
    assert!(
        seen.iter().all(|k| *k == format!("Bearer {TOKEN}")),
        "{seen:?}"
    );
    // Neither token is in Claude's environment or its tools'.
    for inside in [env.read("claude-env.txt"), env.read("inside-env.txt")] {
        assert!(
            !inside.contains(TOKEN) && !inside.contains(REFRESH),
            "{inside}"
        );
        assert!(
            !inside.contains("CLAUDE_CODE_OAUTH_REFRESH_TOKEN"),
            "{inside}"
        );
    }
}

/// A background process a tool call left running re-plants a hook after that call's
/// put-back: the session puts it back within moments (it used to stay until the next call
/// ended, long enough for the user's `git commit` to run it).
#[test]
fn a_hook_replanted_between_calls_is_put_back_during_the_session() {
    let (env, server) = project_with_model(vec![
        // The new tree is made aside and renamed into place: made in place, the session's
        // put-back (which the first rename sets off) raced the `mkdir` and `printf` on a loaded
        // machine, and the chain stopped before it said it had run.
        Turn::Shell(
            "(sleep 1; mv .git .g; echo $? > mv-git.txt; mkdir -p planted/hooks \
             && printf evil > planted/hooks/hooks.json; mv .github .gh; mv planted .github; \
             touch REPLANTED) > /dev/null 2>&1 &"
                .into(),
        ),
        Turn::Shell(
            "i=0; while [ ! -e REPLANTED ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
             sleep 1.5; cat .github/hooks/hooks.json > seen-hook.txt 2>&1; true"
                .into(),
        ),
        Turn::Say("done".into()),
    ]);
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    std::fs::write(env.path(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    env.write(".github/hooks/hooks.json", "{}");
    let mut cmd = claude(&env, &server, &["-p", "go", "--allowedTools", "Bash"]);
    cmd.env("ANTHROPIC_API_KEY", "sk-ant-test-replant");
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        env.path("REPLANTED").exists(),
        "the re-planter never ran: {ctx}"
    );
    // `.git` is a mount point inside the session: it cannot be renamed at all.
    assert_eq!(env.read("mv-git.txt"), "1\n", "{ctx}");
    // What the second call saw a moment after the re-plant: the user's file again.
    assert_eq!(env.read("seen-hook.txt"), "{}", "{ctx}");
    assert!(
        stderr.contains("changed during the session and was put back"),
        "{ctx}"
    );
    assert_eq!(env.read(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n");
    assert_eq!(env.read(".github/hooks/hooks.json"), "{}");
}

/// The hooks socket is inside the sandbox, so anything there can connect to it. A process
/// that connects and sends nothing must not stop the session's sweep: a protected file
/// planted meanwhile is put back while the silent connections still wait for their answer
/// (which comes only when the supervisor's own read timeout ends them), not after. Judged by
/// which comes first, never by a duration.
#[test]
fn silent_connections_to_the_hooks_socket_do_not_stop_the_sweep() {
    let (env, server) = project_with_model(vec![
        Turn::Shell(
            "for i in 1; do python3 -c 'import socket; \
             s = socket.socket(socket.AF_UNIX); s.connect(\"/run/envgit/hooks.sock\"); \
             s.recv(100); open(\"ANSWERED\", \"w\").close()' > /dev/null 2>&1 & done; \
             sleep 0.5; mkdir -p planted/hooks && printf evil > planted/hooks/hooks.json; \
             mv .github .gh; mv planted .github; touch REPLANTED; \
             i=0; while [ $i -lt 1200 ]; do \
               if [ -e ANSWERED ]; then echo answered-first > ORDER; break; fi; \
               if [ \"$(cat .github/hooks/hooks.json 2>/dev/null)\" = '{}' ]; then \
                 echo put-back-first > ORDER; break; fi; \
               sleep 0.1; i=$((i+1)); done; true"
                .into(),
        ),
        Turn::Say("done".into()),
    ]);
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    env.write(".github/hooks/hooks.json", "{}");
    let mut cmd = claude(&env, &server, &["-p", "go", "--allowedTools", "Bash"]);
    cmd.env("ANTHROPIC_API_KEY", "sk-ant-test-stall");
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        env.path("REPLANTED").exists(),
        "the planter never ran: {ctx}"
    );
    let order = std::fs::read_to_string(env.path("ORDER")).unwrap_or_default();
    assert_eq!(
        order.trim(),
        "put-back-first",
        "the planted hook stayed in place until the silent connections to the hooks socket \
         were answered: {ctx}"
    );
    assert_eq!(env.read(".github/hooks/hooks.json"), "{}");
}

/// A file the person's tools link to outside the project during a session (their own
/// `pnpm install` in another terminal, while Claude works) becomes the project's own copy
/// before the next tool call: that call's write reaches the copy, never the store's file,
/// which every other project of theirs runs on the host.
#[test]
fn a_link_made_on_the_host_during_a_session_becomes_the_projects_own_copy() {
    let (env, server) = project_with_model(vec![
        Turn::Shell(WAIT_FOR_THE_HOST.into()),
        Turn::Shell(
            "echo 'process.exit(1)' >> node_modules/left-pad/index.js; echo $? > wrote.txt".into(),
        ),
        Turn::Say("done".into()),
    ]);
    std::fs::create_dir_all(env.path("node_modules")).unwrap();
    let store = env.tmp.path().join("pnpm-store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("index.js"), "module.exports = 1;\n").unwrap();
    // The person's pnpm.
    let linker = {
        let (from, to) = (store.join("index.js"), env.path("node_modules/left-pad"));
        on_the_host_during_the_first_call(&env, move || {
            std::fs::create_dir_all(&to).unwrap();
            std::fs::hard_link(&from, to.join("index.js")).unwrap();
        })
    };
    let mut cmd = claude(&env, &server, &["-p", "go", "--allowedTools", "Bash"]);
    cmd.env("ANTHROPIC_API_KEY", "sk-ant-test-links");
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    linker.join().unwrap();
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(env.path("DONE").exists(), "the host never linked: {ctx}");
    assert_eq!(env.read("wrote.txt"), "0\n", "{ctx}");
    assert_eq!(
        std::fs::read_to_string(store.join("index.js")).unwrap(),
        "module.exports = 1;\n",
        "the call wrote through the link into the store: {ctx}"
    );
    assert!(
        env.read("node_modules/left-pad/index.js")
            .contains("process.exit"),
        "{ctx}"
    );
}

/// How the person's key comes to the project during a session, between two tool calls.
#[derive(Clone, Copy, Debug)]
enum Saved {
    /// Into a new file.
    NewFile,
    /// Into `.env` by an editor's write and rename: the sandbox's mask sat on the old file.
    RenamedOver,
    /// Into the `.env` the agent's first call made (the same file, written in place).
    IntoTheAgentsFile,
}

/// A key the person saves while a session runs is a secret like one that was there when the
/// session began: the session's sandbox, set up before, is given a mask for it before the
/// next call, which reads nothing and is not refused.
#[test]
fn a_secret_saved_on_the_host_during_a_session_is_unreadable_to_the_next_call() {
    const KEY: &str = "sk-live-saved-during-the-session";
    for saved in [Saved::NewFile, Saved::RenamedOver, Saved::IntoTheAgentsFile] {
        let (env, server) = project_with_model(vec![
            Turn::Shell(format!("echo KEY= > .env.local; {WAIT_FOR_THE_HOST}")),
            Turn::Shell(
                "cat .e''nv config/.e''nv.local .e''nv.local > seen.txt 2>&1; echo $? >> seen.txt"
                    .into(),
            ),
            Turn::Say("done".into()),
        ]);
        env.write(".env", "KEY=placeholder\n");
        // The person's editor.
        let saver = {
            let (dotenv, nested, agents) = (
                env.path(".env"),
                env.path("config/.env.local"),
                env.path(".env.local"),
            );
            on_the_host_during_the_first_call(&env, move || {
                let key = format!("KEY={KEY}\n");
                match saved {
                    Saved::NewFile => {
                        std::fs::create_dir_all(nested.parent().unwrap()).unwrap();
                        std::fs::write(&nested, key).unwrap();
                    }
                    Saved::RenamedOver => {
                        let tmp = dotenv.with_extension("swp");
                        std::fs::write(&tmp, key).unwrap();
                        std::fs::rename(&tmp, &dotenv).unwrap();
                    }
                    Saved::IntoTheAgentsFile => std::fs::write(&agents, key).unwrap(),
                }
            })
        };
        let mut cmd = claude(&env, &server, &["-p", "go", "--allowedTools", "Bash"]);
        cmd.env("ANTHROPIC_API_KEY", "sk-ant-test-saved");
        let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
        saver.join().unwrap();
        let ctx = format!("saved: {saved:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(env.path("DONE").exists(), "the host never saved: {ctx}");
        let seen = env.read("seen.txt");
        assert!(!seen.contains(KEY), "the call read the key: {seen}\n{ctx}");
        let masked = match saved {
            Saved::NewFile => "config/.env.local",
            Saved::RenamedOver => ".env",
            Saved::IntoTheAgentsFile => ".env.local",
        };
        assert!(
            seen.contains(&format!("{masked}: Permission denied")),
            "{seen}\n{ctx}"
        );
        assert!(stderr.contains("masked in the session's sandbox"), "{ctx}");
        // The key is where the person put it, and the session went on.
        assert!(
            [".env", "config/.env.local", ".env.local"]
                .iter()
                .any(|p| env.path(p).exists() && env.read(p).contains(KEY)),
            "{ctx}"
        );
        let refused = env
            .log_json()
            .into_iter()
            .any(|s| s["refusals"].as_array().is_some_and(|r| !r.is_empty()));
        assert!(!refused, "a call was refused: {ctx}");
    }
}

/// A file the person hard-links into the project from outside while a session runs (`ln
/// ~/notes.md project/`) is made read-only in the session's sandbox before the next call, as a
/// run binds such a file: a write there would change the file outside.
#[test]
fn a_file_linked_in_from_outside_during_a_session_is_read_only_to_the_next_call() {
    let (env, server) = project_with_model(vec![
        Turn::Shell(WAIT_FOR_THE_HOST.into()),
        Turn::Shell("echo 'changed by the agent' >> notes.md; echo $? > wrote.txt".into()),
        Turn::Say("done".into()),
    ]);
    let outside = env.tmp.path().join("notes.md");
    std::fs::write(&outside, "the person's notes\n").unwrap();
    let linker = {
        let (from, to) = (outside.clone(), env.path("notes.md"));
        on_the_host_during_the_first_call(&env, move || std::fs::hard_link(&from, &to).unwrap())
    };
    let mut cmd = claude(&env, &server, &["-p", "go", "--allowedTools", "Bash"]);
    cmd.env("ANTHROPIC_API_KEY", "sk-ant-test-linked-in");
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    linker.join().unwrap();
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(env.path("DONE").exists(), "the host never linked: {ctx}");
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "the person's notes\n",
        "the call wrote through the link: {ctx}"
    );
    assert_ne!(env.read("wrote.txt"), "0\n", "{ctx}");
    assert!(
        stderr.contains("read-only in the session's sandbox"),
        "{ctx}"
    );
}

/// Runs the session (`vars` in envgit's environment) while `save` acts on the host during its
/// first call; what the later call wrote to `seen.txt`, envgit's stderr and both outputs for
/// messages.
fn session_saving_on_the_host(
    env: &Env,
    server: &ModelServer,
    vars: &[(&str, PathBuf)],
    save: impl FnOnce() + Send + 'static,
) -> (String, String, String) {
    let saver = on_the_host_during_the_first_call(env, save);
    let mut cmd = claude(env, server, &["-p", "go", "--allowedTools", "Bash"]);
    cmd.env("ANTHROPIC_API_KEY", "sk-ant-test-saved-on-the-host");
    for (name, value) in vars {
        cmd.env(name, value);
    }
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    saver.join().unwrap();
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(env.path("DONE").exists(), "the host never saved: {ctx}");
    (env.read("seen.txt"), stderr, ctx)
}

/// Credentials the person makes in their home while a session runs (`aws configure` in their
/// own terminal) are masked in the session's sandbox before the next call, as they would be
/// at its start.
#[test]
fn credentials_made_in_the_home_during_a_session_are_unreadable_to_the_next_call() {
    const KEY: &str = "aws-secret-made-during-the-session";
    let (env, server) = project_with_model(vec![
        Turn::Shell(WAIT_FOR_THE_HOST.into()),
        Turn::Shell(
            "cat ~/.aws/credentials ~/.config/gh/hosts.yml > seen.txt 2>&1; echo $? >> seen.txt"
                .into(),
        ),
        Turn::Say("done".into()),
    ]);
    // The person's `aws configure` and `gh auth login`.
    let home = env.user_home();
    let (seen, stderr, ctx) = session_saving_on_the_host(&env, &server, &[], move || {
        for (dir, file) in [(".aws", "credentials"), (".config/gh", "hosts.yml")] {
            std::fs::create_dir_all(home.join(dir)).unwrap();
            std::fs::write(home.join(dir).join(file), format!("key = {KEY}\n")).unwrap();
        }
    });
    assert!(!seen.contains(KEY), "the call read the key: {seen}\n{ctx}");
    // `~/.aws` is masked; `~/.config/gh` is not even there (the home's overlay had looked for
    // it before the person made it, and keeps that answer), which hides it as well.
    assert!(
        seen.contains(".aws/credentials: Permission denied"),
        "{seen}\n{ctx}"
    );
    assert!(stderr.contains("masked in the session's sandbox"), "{ctx}");
}

/// The same for a credential where the person's environment puts it
/// (`AWS_SHARED_CREDENTIALS_FILE`), which no name in the home gives away.
#[test]
fn a_credential_the_environment_names_made_during_a_session_is_unreadable_to_the_next_call() {
    const KEY: &str = "aws-secret-where-the-variable-says";
    let (env, server) = project_with_model(vec![
        Turn::Shell(WAIT_FOR_THE_HOST.into()),
        Turn::Shell("cat ~/keys/aws > seen.txt 2>&1; echo $? >> seen.txt".into()),
        Turn::Say("done".into()),
    ]);
    let keys = env.user_home().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let file = keys.join("aws");
    let (seen, stderr, ctx) = session_saving_on_the_host(
        &env,
        &server,
        &[("AWS_SHARED_CREDENTIALS_FILE", file.clone())],
        move || std::fs::write(file, format!("key = {KEY}\n")).unwrap(),
    );
    assert!(!seen.contains(KEY), "the call read the key: {seen}\n{ctx}");
    assert!(
        seen.contains("keys/aws: Permission denied"),
        "{seen}\n{ctx}"
    );
    assert!(
        stderr.contains("keys/aws made or replaced since the session began"),
        "{ctx}"
    );
    // What the session's plan masked already (`/etc`'s private files, …) is not masked again.
    assert_eq!(
        stderr.matches("since the session began").count(),
        1,
        "{ctx}"
    );
}

/// A server the agent starts in one call, listening on a unix socket in the project, is still
/// reachable in the next: the session's own socket is not masked as a host service's would be.
#[test]
fn a_socket_the_agent_listens_on_stays_reachable_in_the_next_call() {
    const SERVE: &str = "import os, socket\n\
        s = socket.socket(socket.AF_UNIX)\n\
        s.bind(os.path.abspath('dev.sock'))\n\
        s.listen(4)\n\
        while True:\n    c, _ = s.accept()\n    c.sendall(b'pong')\n    c.close()\n";
    const ASK: &str = "import socket\n\
        s = socket.socket(socket.AF_UNIX)\n\
        s.connect('dev.sock')\n\
        print(s.recv(16).decode())\n";
    let (env, server) = project_with_model(vec![
        Turn::Shell(format!(
            "printf \"{SERVE}\" > serve.py; (python3 serve.py > /dev/null 2>&1 &); i=0; \
             while [ ! -S dev.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done"
        )),
        Turn::Shell(format!(
            "printf \"{ASK}\" > ask.py; python3 ask.py > seen.txt 2>&1"
        )),
        Turn::Say("done".into()),
    ]);
    let mut cmd = claude(&env, &server, &["-p", "go", "--allowedTools", "Bash"]);
    cmd.env("ANTHROPIC_API_KEY", "sk-ant-test-own-socket");
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(env.read("seen.txt").trim(), "pong", "{ctx}");
}

/// A credential the sandbox did not see when the call before was checked (its home's overlay
/// had looked for the directory and kept that answer) is looked at again at each call: once
/// the kernel forgets that answer (here: the host drops its dentry cache), it is there, and
/// it is masked before the call that could read it.
#[test]
fn a_credential_the_sandbox_did_not_see_yet_is_masked_once_it_appears() {
    const KEY: &str = "gh-token-made-during-the-session";
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: dropping the kernel's dentry cache needs root");
        return;
    }
    let wait = |started: &str, done: &str| {
        format!(
            "touch {started}; i=0; while [ ! -e {done} ] && [ $i -lt 600 ]; do sleep 0.1; \
             i=$((i+1)); done"
        )
    };
    let (env, server) = project_with_model(vec![
        Turn::Shell(format!(
            "ls ~/.config/gh > /dev/null 2>&1; {}",
            wait("STARTED", "DONE")
        )),
        Turn::Shell(format!(
            "cat ~/.config/gh/hosts.yml > seen-1.txt 2>&1; {}",
            wait("STARTED-2", "DONE-2")
        )),
        Turn::Shell("cat ~/.config/gh/hosts.yml > seen-2.txt 2>&1; true".into()),
        Turn::Say("done".into()),
    ]);
    std::fs::create_dir_all(env.user_home().join(".config")).unwrap();
    // The person's `gh auth login` during the first call; the host forgets its dentries
    // during the second.
    let host = {
        let home = env.user_home();
        let (started_2, done_2) = (env.path("STARTED-2"), env.path("DONE-2"));
        on_the_host_during_the_first_call(&env, move || {
            std::fs::create_dir_all(home.join(".config/gh")).unwrap();
            std::fs::write(home.join(".config/gh/hosts.yml"), format!("token: {KEY}\n")).unwrap();
            std::thread::spawn(move || {
                for _ in 0..2400 {
                    if started_2.exists() {
                        std::fs::write("/proc/sys/vm/drop_caches", "2\n").unwrap();
                        std::fs::write(&done_2, "").unwrap();
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        })
    };
    let mut cmd = claude(&env, &server, &["-p", "go", "--allowedTools", "Bash"]);
    cmd.env("ANTHROPIC_API_KEY", "sk-ant-test-appears");
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    host.join().unwrap();
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(env.path("DONE-2").exists(), "the host never acted: {ctx}");
    for seen in ["seen-1.txt", "seen-2.txt"] {
        let seen = env.read(seen);
        assert!(!seen.contains(KEY), "a call read the key: {seen}\n{ctx}");
    }
}
