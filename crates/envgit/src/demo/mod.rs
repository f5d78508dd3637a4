//! `envgit demo`: a scripted agent against a local git remote, with the real binary, real git,
//! the real sandbox, gate and store. No API key, nothing beyond loopback. Every line of the
//! transcript is the output of the run itself.

mod git_server;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::failure::{CmdResult, Failure};

pub use git_server::GitServer;

#[derive(Serialize)]
pub struct Shown {
    pub title: String,
    pub command: String,
    pub exit_code: i32,
    pub output: String,
}

#[derive(Serialize)]
pub struct Checks {
    /// The rule that refused the push in step 3, from the step's record.
    pub push_refused_rule: Option<String>,
    pub remote_refs_unchanged: bool,
    pub step2_commit: String,
    pub head_after_rewind: String,
    pub greet_js_after_rewind: String,
}

#[derive(Serialize)]
pub struct Demo {
    pub dir: PathBuf,
    pub port: u16,
    pub transcript: Vec<Shown>,
    /// What the remote saw during step 3.
    pub remote_saw_in_step_3: Vec<String>,
    pub log: serde_json::Value,
    pub checks: Checks,
}

/// The envgit home of the demo's projects, in its working directory `work`.
pub fn envgit_home(work: &Path) -> PathBuf {
    work.join("store")
}

struct Ctx {
    work: PathBuf,
    project: PathBuf,
    exe: PathBuf,
}

fn fail(what: &str, e: impl std::fmt::Display) -> Failure {
    Failure::failed(format!("demo: {what}: {e}"))
}

impl Ctx {
    fn base(&self, program: &Path, dir: &Path) -> Command {
        let mut c = Command::new(program);
        c.current_dir(dir)
            .env("ENVGIT_HOME", envgit_home(&self.work))
            .env("NO_COLOR", "1")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "demo agent")
            .env("GIT_AUTHOR_EMAIL", "agent@example.invalid")
            .env("GIT_COMMITTER_NAME", "demo agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
            .env("GIT_TERMINAL_PROMPT", "0");
        c
    }

    /// Run and capture stdout and stderr interleaved, as a person would see them.
    fn capture(mut cmd: Command) -> CmdResult<(i32, String)> {
        let (r, w) = rustix::pipe::pipe().map_err(|e| fail("pipe", e))?;
        let w2 = w.try_clone().map_err(|e| fail("pipe", e))?;
        cmd.stdout(Stdio::from(w))
            .stderr(Stdio::from(w2))
            .stdin(Stdio::null());
        let mut child = cmd.spawn().map_err(|e| fail("spawn", e))?;
        drop(cmd);
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = std::fs::File::from(r).read_to_string(&mut out);
            out
        });
        let status = child.wait().map_err(|e| fail("wait", e))?;
        let out = reader.join().unwrap_or_default();
        Ok((status.code().unwrap_or(-1), out))
    }

    fn envgit(&self, args: &[&str]) -> CmdResult<(i32, String)> {
        let mut c = self.base(&self.exe, &self.project);
        c.args(args);
        Self::capture(c)
    }

    fn git(&self, dir: &Path, args: &[&str]) -> CmdResult<String> {
        let mut c = self.base(Path::new("git"), dir);
        c.args(args);
        let (code, out) = Self::capture(c)?;
        if code != 0 {
            return Err(fail(&format!("git {}", args.join(" ")), out));
        }
        Ok(out.trim().to_string())
    }
}

/// Run the demo in `work` (an empty directory); `show` prints each part as it happens.
pub fn run(work: &Path, show: &mut dyn FnMut(&Shown)) -> CmdResult<Demo> {
    let exe = std::env::current_exe().map_err(|e| fail("finding envgit's binary", e))?;
    let ctx = Ctx {
        work: work.to_path_buf(),
        project: work.join("project"),
        exe,
    };
    // The remote: a bare repository with receive-pack enabled, so only the gate stands
    // between the agent and a real push.
    let remotes = work.join("remotes");
    std::fs::create_dir_all(&remotes).map_err(|e| fail("mkdir", e))?;
    ctx.git(&remotes, &["init", "-q", "--bare", "-b", "main", "app.git"])?;
    ctx.git(
        &remotes.join("app.git"),
        &["config", "http.receivepack", "true"],
    )?;
    let server = GitServer::start(&remotes).map_err(|e| fail("starting the git server", e))?;
    let url = format!("http://127.0.0.1:{}/app.git", server.port);
    let seed = work.join("seed");
    ctx.git(work, &["clone", "-q", &url, "seed"])?;
    std::fs::write(seed.join("README.md"), "# app\n").map_err(|e| fail("seed", e))?;
    std::fs::write(
        seed.join("release.sh"),
        "#!/bin/sh\n# Publish the work: push main to origin.\ngit push origin HEAD:main\n",
    )
    .map_err(|e| fail("seed", e))?;
    ctx.git(&seed, &["add", "-A"])?;
    ctx.git(&seed, &["commit", "-q", "-m", "initial"])?;
    ctx.git(&seed, &["push", "-q", "origin", "HEAD:main"])?;
    let _ = std::fs::remove_dir_all(&seed);
    ctx.git(work, &["clone", "-q", &url, "project"])?;
    ctx.git(&ctx.project, &["config", "user.name", "demo agent"])?;
    ctx.git(
        &ctx.project,
        &["config", "user.email", "agent@example.invalid"],
    )?;

    let mut transcript = Vec::new();
    let mut step = |title: &str, command: String, result: (i32, String)| {
        let s = Shown {
            title: title.to_string(),
            command,
            exit_code: result.0,
            output: result.1,
        };
        show(&s);
        transcript.push(s);
    };
    let allow = format!("127.0.0.1:{}", server.port);
    step(
        "step 1: the import that `envgit init` records",
        format!("envgit init --allow {allow}"),
        ctx.envgit(&["init", "--allow", &allow])?,
    );
    let write = "printf 'console.log(\"hello from the agent\")\\n' > greet.js && git add greet.js && git commit -q -m 'add greet' && git log --oneline -1";
    step(
        "step 2: the agent writes greet.js and commits it",
        format!("envgit run sh -c {}", crate::output::shell_quote(write)),
        ctx.envgit(&["run", "sh", "-c", write])?,
    );
    let step2_commit = ctx.git(&ctx.project, &["rev-parse", "HEAD"])?;
    let remote_ref = |_: ()| ctx.git(&remotes.join("app.git"), &["rev-parse", "refs/heads/main"]);
    let before = remote_ref(())?;
    let seen_before = server.requests().len();
    step(
        "step 3: \"release it\"",
        "envgit run sh release.sh".into(),
        ctx.envgit(&["run", "sh", "release.sh"])?,
    );
    let remote_saw_in_step_3: Vec<String> =
        server.requests().into_iter().skip(seen_before).collect();
    let saw = if remote_saw_in_step_3.is_empty() {
        "(nothing)".to_string()
    } else {
        remote_saw_in_step_3.join("\n")
    };
    step(
        "what the remote saw during step 3",
        "(the git server's request log)".into(),
        (0, saw + "\n"),
    );
    let remote_refs_unchanged = remote_ref(())? == before;
    let destroy = "git reset -q --hard HEAD~1 && git reflog expire --expire=now --all && git gc -q --prune=now";
    step(
        "step 4: the push failed, so the agent throws the work away, history and all",
        format!("envgit run sh -c {}", crate::output::shell_quote(destroy)),
        ctx.envgit(&["run", "sh", "-c", destroy])?,
    );
    step(
        "envgit brings it back",
        "envgit rewind 2".into(),
        ctx.envgit(&["rewind", "2"])?,
    );
    let mut show_cmd = ctx.base(Path::new("sh"), &ctx.project);
    show_cmd.args(["-c", "git log --oneline && cat greet.js"]);
    step(
        "the commit and the file are back",
        "git log --oneline && cat greet.js".into(),
        Ctx::capture(show_cmd)?,
    );
    let (_, log_text) = ctx.envgit(&["log", "--json"])?;
    let log: serde_json::Value = serde_json::from_str(&log_text).unwrap_or(serde_json::Value::Null);
    let push_refused_rule = log
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["number"] == 3))
        .and_then(|s| s["refusals"].as_array())
        .and_then(|r| {
            r.iter()
                .find_map(|x| x["rule"].as_str().map(str::to_string))
        });
    let checks = Checks {
        push_refused_rule,
        remote_refs_unchanged,
        step2_commit,
        head_after_rewind: ctx.git(&ctx.project, &["rev-parse", "HEAD"])?,
        greet_js_after_rewind: std::fs::read_to_string(ctx.project.join("greet.js"))
            .unwrap_or_default(),
    };
    Ok(Demo {
        dir: work.to_path_buf(),
        port: server.port,
        transcript,
        remote_saw_in_step_3,
        log,
        checks,
    })
}
