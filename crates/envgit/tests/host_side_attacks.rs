//! What the agent's data can make envgit do on the host, outside the sandbox: the calls envgit
//! carries out itself for an agent (Codex's `fs/*`) must leave the host nothing a sandboxed
//! step could not, whatever path and content the agent chose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use serde_json::{Value, json};
use support::Env;

/// `calls` sent to `envgit codex-exec-server` in the project, as Codex sends them (one JSON
/// object per line); their answers, then the server's stderr once it has recorded the session.
fn codex_fs(env: &Env, calls: &[(&str, Value)]) -> (Vec<Value>, String) {
    codex_fs_after(env, || {}, calls)
}

/// [`codex_fs`], with `meanwhile` done once the session has begun (its `initialize`
/// answered) and before the first call. A `process/start` is answered once its process (a
/// step) has closed.
fn codex_fs_after(
    env: &Env,
    meanwhile: impl FnOnce(),
    calls: &[(&str, Value)],
) -> (Vec<Value>, String) {
    let mut child = env
        .cmd(&env.project)
        .arg("codex-exec-server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut call = |id: u64, method: &str, params: &Value| -> Value {
        let msg = json!({"id": id, "method": method, "params": params});
        writeln!(input, "{msg}").unwrap();
        let mut answer = None;
        let mut closed = method != "process/start";
        while answer.is_none() || !closed {
            let Some(line) = lines.next() else {
                let status = child.wait().unwrap();
                let mut err = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
                panic!("the exec-server ended ({status}) without answering {method}:\n{err}");
            };
            let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
            if v["id"] == id {
                answer = Some(v);
            } else if v["method"] == "process/closed"
                && v["params"]["processId"] == params["processId"]
            {
                closed = true;
            }
        }
        answer.unwrap()
    };
    call(1, "initialize", &json!({"clientName": "test"}));
    meanwhile();
    let answers = calls
        .iter()
        .enumerate()
        .map(|(i, (method, params))| call(i as u64 + 2, method, params))
        .collect();
    drop(input);
    let out = child.wait_with_output().unwrap();
    (answers, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn uri(env: &Env, rel: &str) -> String {
    format!(
        "file://{}/{rel}",
        env.project.canonicalize().unwrap().display()
    )
}

/// A repository nested in the project whose own configuration sets `core.hooksPath`
/// (`.githooks` by habit, or any directory): a link Codex copies there is a hook the person's
/// next `git commit` in it runs. A sandboxed step's write there is put back; an `fs/copy` must
/// not leave it either (refused by name, or put back once the calls are recorded).
#[test]
fn codex_fs_cannot_plant_a_hook_a_nested_repository_runs() {
    for hooks in [".githooks", "scripts/hooks"] {
        let env = Env::new();
        let marker = env.tmp.path().join("pwned");
        env.write(
            "hook.sh",
            &format!("#!/bin/sh\necho pwned >> {}\n", marker.display()),
        );
        std::fs::set_permissions(env.path("hook.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        env.git(&env.project, &["init", "-q", "sub"]);
        env.git(&env.path("sub"), &["config", "core.hooksPath", hooks]);
        env.write("sub/f.txt", "one\n");
        let root = env.project.canonicalize().unwrap();
        std::os::unix::fs::symlink(root.join("hook.sh"), env.path("link")).unwrap();
        env.init();
        let (answers, stderr) = codex_fs(
            &env,
            &[(
                "fs/copy",
                json!({"sourcePath": uri(&env, "link"),
                    "destinationPath": uri(&env, &format!("sub/{hooks}/pre-commit")),
                    "recursive": false, "sandbox": null}),
            )],
        );
        let said = format!("{answers:#?}\n{stderr}");
        env.git(&env.path("sub"), &["add", "f.txt"]);
        let _ = env
            .host_git(&env.path("sub"))
            .args(["commit", "-qm", "person's commit"])
            .output()
            .unwrap();
        assert!(
            !marker.exists(),
            "the person's `git commit` in the nested repository ran the hook Codex's fs/copy \
             planted in {hooks}\n{said}"
        );
    }
}

/// What the host runs from the project by name (root-level patterns such as `lefthook-local.*`
/// and `*.code-workspace`, editor configuration below the root, a hook manager's directory at a
/// nested repository's root) is as protected from `fs/writeFile` as from a sandboxed step: the
/// write is refused or put back, and the host never keeps it.
#[test]
fn codex_fs_writes_nothing_the_host_runs_by_name() {
    let env = Env::new();
    env.write("sub/a.txt", "a\n");
    env.git(&env.project, &["init", "-q", "lib"]);
    env.write("lib/a.txt", "a\n");
    env.init();
    let planted = [
        // lefthook merges it into the project's lefthook.yml on the person's next commit.
        "lefthook-local.yml",
        // VS Code runs its `folderOpen` tasks.
        "evil.code-workspace",
        // VS Code's workspace trust covers a trusted folder's subfolders.
        "sub/.vscode/tasks.json",
        // husky at a nested repository's root.
        "lib/.husky/pre-commit",
    ];
    let calls: Vec<(&str, Value)> = planted
        .iter()
        .map(|rel| {
            (
                "fs/writeFile",
                json!({"path": uri(&env, rel), "dataBase64": "cnVuOiB0b3VjaCAvdG1wL3B3bmVkCg=="}),
            )
        })
        .collect();
    let (answers, stderr) = codex_fs(&env, &calls);
    let said = format!("{answers:#?}\n{stderr}");
    let kept: Vec<&str> = planted
        .iter()
        .copied()
        .filter(|rel| std::fs::symlink_metadata(env.path(rel)).is_ok())
        .collect();
    assert!(
        kept.is_empty(),
        "Codex's fs/writeFile left on the host what it runs by name: {kept:?}\n{said}"
    );
    // Nothing else was lost: the history still names the refusals.
    let log = env.log_json();
    assert!(
        log.iter().any(|s| s["summary"]
            .as_str()
            .is_some_and(|t| t.starts_with("codex fs:"))),
        "{log:#?}"
    );
}

/// Not an attack: an ordinary file is still written.
#[test]
fn codex_fs_still_writes_an_ordinary_file() {
    let env = Env::new();
    env.write("sub/a.txt", "a\n");
    env.init();
    let (answers, stderr) = codex_fs(
        &env,
        &[(
            "fs/writeFile",
            json!({"path": uri(&env, "sub/b.txt"), "dataBase64": "aGkK"}),
        )],
    );
    assert!(answers[0]["error"].is_null(), "{answers:#?}\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(env.path("sub/b.txt")).unwrap(),
        "hi\n"
    );
}

/// Not an attack either: the person's own edit of a file the host runs by name below the root,
/// made since the last step, is theirs. The checks of Codex's step put back what Codex did, and
/// the person's edit is recorded as theirs before Codex's first write, not undone with it.
#[test]
fn codex_fs_keeps_the_persons_own_edit_of_a_file_the_host_runs() {
    let env = Env::new();
    env.write("sub/.vscode/tasks.json", "{\"tasks\": []}\n");
    env.init();
    env.write("sub/.vscode/tasks.json", "{\"tasks\": [\"mine\"]}\n");
    let (answers, stderr) = codex_fs(
        &env,
        &[(
            "fs/writeFile",
            json!({"path": uri(&env, "sub/b.txt"), "dataBase64": "aGkK"}),
        )],
    );
    assert!(answers[0]["error"].is_null(), "{answers:#?}\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(env.path("sub/.vscode/tasks.json")).unwrap(),
        "{\"tasks\": [\"mine\"]}\n",
        "the person's own edit was undone with Codex's step\n{stderr}"
    );
    let log = env.log_json();
    assert!(
        log.iter().any(|s| s["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "outside"))),
        "the person's edit was not recorded as theirs: {log:#?}"
    );
}

/// A step of the session links a file to `.env` (`ln .env notes.txt`) and the person then
/// fills `.env` in: the sandbox masks the link from the next step on, and Codex's
/// `fs/readFile` of it must be refused as well, though the session began before the link.
#[test]
fn codex_fs_does_not_read_a_link_a_step_made_to_a_secret() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.init();
    let cwd = env.project.canonicalize().unwrap();
    let (answers, stderr) = codex_fs_after(
        &env,
        || {},
        &[
            (
                "process/start",
                json!({"processId": "p1", "argv": ["/bin/sh", "-c", ": > .env && ln .env notes.txt"],
                    "cwd": cwd, "env": {}, "envPolicy": null, "tty": false, "pipeStdin": false,
                    "arg0": null, "sandbox": null, "enforceManagedNetwork": false,
                    "managedNetwork": null}),
            ),
            // Whatever `.env` holds once the person fills it in, this would return.
            ("fs/readFile", json!({"path": uri(&env, "notes.txt")})),
        ],
    );
    assert!(answers[0]["error"].is_null(), "{answers:#?}\n{stderr}");
    assert!(
        std::fs::metadata(env.path("notes.txt")).is_ok(),
        "the step made no link: {stderr}"
    );
    let read = &answers[1];
    assert!(
        read["result"]["dataBase64"].is_null(),
        "fs/readFile returned notes.txt, a link to .env: {read}\n{stderr}"
    );
    assert!(read.to_string().contains("filesystem.deny_read"), "{read}");
}

/// A project whose `node_modules/` files are hard links into a store outside it, as pnpm lays
/// them out (`ln`, exactly what pnpm does): the file outside is the one `node_modules` holds.
fn project_with_a_linked_package(env: &Env) -> std::path::PathBuf {
    let store = env.tmp.path().join("pnpm-store");
    std::fs::create_dir_all(&store).unwrap();
    let blob = store.join("index.js");
    std::fs::write(&blob, "module.exports = 1;\n").unwrap();
    std::fs::create_dir_all(env.path("node_modules/lodash")).unwrap();
    std::fs::hard_link(&blob, env.path("node_modules/lodash/index.js")).unwrap();
    env.write("a.txt", "a\n");
    env.init();
    blob
}

/// Codex's `fs/writeFile` to a file with a hard link outside the project must not write the
/// file outside (every other project pnpm linked the package into would run it).
#[test]
fn codex_fs_does_not_write_through_a_hard_link_to_outside_the_project() {
    let env = Env::new();
    let blob = project_with_a_linked_package(&env);
    let (answers, stderr) = codex_fs(
        &env,
        &[(
            "fs/writeFile",
            json!({"path": uri(&env, "node_modules/lodash/index.js"),
                "dataBase64": "cmVxdWlyZSgnY2hpbGRfcHJvY2VzcycpOwo="}),
        )],
    );
    assert_eq!(
        std::fs::read_to_string(&blob).unwrap(),
        "module.exports = 1;\n",
        "fs/writeFile wrote the file outside the project through its hard link\n{answers:#?}\n{stderr}"
    );
}

/// A `deny_read` glob of `envgit.yaml` masks every match in the sandbox, whenever it appeared;
/// Codex's `fs/readFile` must refuse it too, not only the matches the session found at its
/// start (a key the person saves during the session, one a rewind or a checkout brings back).
#[test]
fn codex_fs_does_not_read_what_a_deny_read_glob_matches() {
    const SECRET: &str = "-----BEGIN PRIVATE KEY----- hunter2";
    let env = Env::new();
    env.write("keys/old.pem", SECRET);
    env.init();
    let mut yaml = std::fs::read_to_string(env.path("envgit.yaml")).unwrap();
    yaml.push_str("\nfilesystem:\n  deny_read: [\"**/*.pem\"]\n");
    std::fs::write(env.path("envgit.yaml"), yaml).unwrap();
    env.record();
    // What a sandboxed step sees: no key.
    let run = env.envgit(&["run", "--", "sh", "-c", "cat keys/*.pem; true"]);
    assert!(!run.stdout.contains("hunter2"), "{}", run.stdout);
    // The person saves a new key while the session runs.
    let (answers, _) = codex_fs_after(
        &env,
        || env.write("keys/new.pem", SECRET),
        &[
            ("fs/readFile", json!({"path": uri(&env, "keys/old.pem")})),
            ("fs/readFile", json!({"path": uri(&env, "keys/new.pem")})),
            (
                "fs/copy",
                json!({"sourcePath": uri(&env, "keys"), "destinationPath": uri(&env, "copied"),
                    "recursive": true, "sandbox": null}),
            ),
        ],
    );
    let (read, copied) = (&answers[..2], &answers[2]);
    for (rel, answer) in ["keys/old.pem", "keys/new.pem"].iter().zip(read) {
        assert!(
            answer["result"]["dataBase64"].is_null(),
            "fs/readFile returned {rel}, which deny_read masks in the sandbox: {answer}"
        );
    }
    let leaked = std::fs::read_to_string(env.path("copied/new.pem")).unwrap_or_default();
    assert!(
        !leaked.contains("hunter2"),
        "fs/copy copied keys/new.pem out of the mask: {copied}"
    );
}

/// What the sandbox masks (`.env`, a `deny_read` glob's match, a `deny_read` directory, a hard
/// link a step made to a secret) shows a step nothing of its size, times or what lies beneath a
/// masked directory: Codex's `fs/getMetadata` and `fs/canonicalize` must not show it either.
/// They are refused as `fs/readFile` is, naming the rule.
#[test]
fn codex_fs_does_not_stat_what_the_sandbox_masks() {
    const SECRET: &str = "API_KEY=hunter2-and-then-some\n";
    let env = Env::new();
    env.write(".env", SECRET);
    env.write("keys/k.pem", SECRET);
    env.write("secrets/id", SECRET);
    env.write("a.txt", "a\n");
    env.init();
    let mut yaml = std::fs::read_to_string(env.path("envgit.yaml")).unwrap();
    yaml.push_str("\nfilesystem:\n  deny_read: [\"**/*.pem\", \"secrets\"]\n");
    std::fs::write(env.path("envgit.yaml"), yaml).unwrap();
    env.record();
    // What a sandboxed step sees: empty files, and nothing beneath the masked directory.
    let run = env.envgit(&[
        "run",
        "--",
        "sh",
        "-c",
        "stat -c %s .env keys/k.pem; ls secrets/id 2>&1; true",
    ]);
    assert!(run.stdout.starts_with("0\n0\n"), "{}", run.stdout);
    assert!(!run.stdout.contains("\nsecrets/id\n"), "{}", run.stdout);

    let cwd = env.project.canonicalize().unwrap();
    let stat = |rel: &str| ("fs/getMetadata", json!({"path": uri(&env, rel)}));
    let (answers, stderr) = codex_fs(
        &env,
        &[
            (
                "process/start",
                json!({"processId": "p1", "argv": ["/bin/sh", "-c",
                    "echo API_KEY=hunter2 > .env.local && ln .env.local notes.txt"],
                    "cwd": cwd, "env": {}, "envPolicy": null, "tty": false, "pipeStdin": false,
                    "arg0": null, "sandbox": null, "enforceManagedNetwork": false,
                    "managedNetwork": null}),
            ),
            stat(".env"),
            stat("keys/k.pem"),
            stat("secrets"),
            stat("secrets/id"),
            stat("notes.txt"),
            ("fs/canonicalize", json!({"path": uri(&env, "secrets/id")})),
            // Still answered: what the sandbox shows.
            stat("a.txt"),
        ],
    );
    assert!(answers[0]["error"].is_null(), "{answers:#?}\n{stderr}");
    assert!(
        std::fs::metadata(env.path("notes.txt")).is_ok(),
        "the step made no link: {stderr}"
    );
    let rels = [
        ".env",
        "keys/k.pem",
        "secrets",
        "secrets/id",
        "notes.txt",
        "secrets/id",
    ];
    let shown: Vec<String> = rels
        .iter()
        .zip(&answers[1..7])
        .filter(|(_, a)| !a.to_string().contains("filesystem.deny_read"))
        .map(|(rel, a)| format!("{rel}: {a}"))
        .collect();
    assert!(
        shown.is_empty(),
        "the host answered for what the sandbox masks:\n{}",
        shown.join("\n")
    );
    assert!(answers[1..7].iter().all(|a| a["result"].is_null()));
    assert_eq!(answers[7]["result"]["size"], 2, "{}", answers[7]);
}

/// A directory chain far deeper than any project's, as a step can make one (a `mkdir d; cd d`
/// loop): 10,000 levels under `tower/`.
const DEEP: usize = 10_000;

fn deep_tree_step(env: &Env) -> (&'static str, Value) {
    let script = format!(
        "import os\nos.mkdir('tower')\nos.chdir('tower')\nfor _ in range({DEEP}):\n    os.mkdir('d')\n    os.chdir('d')\n"
    );
    (
        "process/start",
        json!({"processId": "deep", "argv": ["python3", "-c", script],
            "cwd": env.project.canonicalize().unwrap(), "env": {}, "envPolicy": null,
            "tty": false, "pipeStdin": false, "arg0": null, "sandbox": null,
            "enforceManagedNetwork": false, "managedNetwork": null}),
    )
}

/// How many `d` directories are chained under `dir` (one descriptor at a time: the chain is
/// longer than a path may be).
fn chain_depth(dir: &std::path::Path) -> usize {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(mut cur) = rustix::fs::open(dir, flags, Mode::empty()) else {
        return 0;
    };
    let mut n = 0;
    while let Ok(fd) = rustix::fs::openat(&cur, c"d", flags, Mode::empty()) {
        cur = fd;
        n += 1;
    }
    n
}

/// `call` on the 10,000-deep tree a step made is answered, and the exec-server answers the
/// next call: it does not descend one Rust call per level until its stack overflows. The
/// answer is an error naming `tower` when the call stops at a depth bound.
fn survives_a_deep_tree(call: impl FnOnce(&Env) -> (&'static str, Value)) {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.init();
    let (made, stderr) = codex_fs(&env, &[deep_tree_step(&env)]);
    assert!(made[0]["error"].is_null(), "{made:#?}\n{stderr}");
    assert_eq!(chain_depth(&env.path("tower")), DEEP, "{stderr}");
    let call = call(&env);
    let (answers, stderr) = codex_fs(
        &env,
        &[
            call,
            ("fs/getMetadata", json!({"path": uri(&env, "a.txt")})),
        ],
    );
    let answer = &answers[0];
    if !answer["error"].is_null() {
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("tower: "), "{answer}");
    }
    assert_eq!(answers[1]["result"]["size"], 2, "{answers:#?}\n{stderr}");
}

#[test]
fn codex_fs_remove_of_a_deep_tree_does_not_crash_the_exec_server() {
    survives_a_deep_tree(|env| {
        (
            "fs/remove",
            json!({"path": uri(env, "tower"), "recursive": true, "force": true}),
        )
    });
}

#[test]
fn codex_fs_copy_of_a_deep_tree_does_not_crash_the_exec_server() {
    survives_a_deep_tree(|env| {
        (
            "fs/copy",
            json!({"sourcePath": uri(env, "tower"), "destinationPath": uri(env, "copied"),
                "recursive": true, "sandbox": null}),
        )
    });
}

/// A step's `rm -rf dir` leaves what the sandbox masks in it (the mask is a mount: `Device or
/// resource busy`), and history holds no copy of a secret to bring back: Codex's `fs/remove`
/// of `dir` must leave it too, whether it was there when the session began or saved since
/// (`.env`, a `deny_read` glob's match).
#[test]
fn codex_fs_remove_leaves_what_the_sandbox_masks() {
    const SECRET: &str = "API_KEY=hunter2\n";
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.init();
    let mut yaml = std::fs::read_to_string(env.path("envgit.yaml")).unwrap();
    yaml.push_str("\nfilesystem:\n  deny_read: [\"**/*.pem\"]\n");
    std::fs::write(env.path("envgit.yaml"), yaml).unwrap();
    let secrets = ["old/k.pem", "old/.env", "new/k.pem", "new/.env"];
    for rel in secrets {
        env.write(rel, SECRET);
    }
    env.write("old/plain.txt", "p\n");
    env.write("new/plain.txt", "p\n");
    env.record();
    let run = env.envgit(&["run", "--", "sh", "-c", "rm -rf old new; true"]);
    for rel in secrets {
        assert_eq!(env.read(rel), SECRET, "{rel}: {}", run.stderr);
    }
    std::fs::remove_dir_all(env.path("new")).unwrap();

    let (answers, stderr) = codex_fs_after(
        &env,
        || {
            env.write("new/k.pem", SECRET);
            env.write("new/.env", SECRET);
        },
        &[
            (
                "fs/remove",
                json!({"path": uri(&env, "old"), "recursive": true, "force": true}),
            ),
            (
                "fs/remove",
                json!({"path": uri(&env, "new"), "recursive": true, "force": true}),
            ),
        ],
    );
    let gone: Vec<&str> = secrets
        .into_iter()
        .filter(|rel| std::fs::read_to_string(env.path(rel)).ok().as_deref() != Some(SECRET))
        .collect();
    assert!(
        gone.is_empty(),
        "fs/remove deleted {gone:?}, which a step cannot: {answers:#?}\n{stderr}"
    );
    for a in &answers {
        assert!(a.to_string().contains("filesystem.deny_read"), "{a}");
    }
}

/// Codex's `fs/*` calls write on the host, file by file: a directory laid out as a git
/// directory (`HEAD` with `objects/` and `refs/`, or with `commondir`) and a `config` naming a
/// `core.fsmonitor` and a `core.worktree` is the repository of every git run in it, so the
/// person's prompt's `git status` there runs the agent's command. In the directories
/// `snapshot.exclude` leaves out (`target/`, `node_modules/`) no snapshot sees it; anywhere,
/// the write that makes the layout or lands in one is refused, in whatever order it comes.
#[test]
fn codex_fs_cannot_lay_out_a_repository_the_hosts_git_runs() {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    for (dir, head_last) in [
        ("target", false),
        ("node_modules/left-pad/lib", true),
        ("lib", false),
        ("sub", true),
    ] {
        let env = Env::new();
        env.write("a.txt", "a\n");
        env.write("node_modules/left-pad/index.js", "module.exports = 1;\n");
        env.init();
        let marker = env.tmp.path().join("pwned");
        let root = env.project.canonicalize().unwrap();
        let config = format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {}\n\tfsmonitor = \"touch {}; false\"\n",
            root.display(),
            marker.display()
        );
        let write = |rel: &str, data: &str| {
            (
                "fs/writeFile",
                json!({"path": uri(&env, &format!("{dir}/{rel}")), "dataBase64": b64(data)}),
            )
        };
        let mkdir = |rel: &str| {
            (
                "fs/createDirectory",
                json!({"path": uri(&env, &format!("{dir}/{rel}")), "recursive": true}),
            )
        };
        let head = write("HEAD", "ref: refs/heads/main\n");
        let mut calls = vec![write("config", &config)];
        if !head_last {
            calls.push(head.clone());
        }
        calls.extend([mkdir("objects/info"), mkdir("refs/heads")]);
        if head_last {
            calls.push(head);
        }
        let (answers, stderr) = codex_fs(&env, &calls);
        let said = format!("{answers:#?}\n{stderr}");
        let _ = env
            .host_git(&env.path(dir))
            .args(["status", "--short"])
            .output()
            .unwrap();
        assert!(
            !marker.exists(),
            "the host's `git status` in {dir} ran the core.fsmonitor Codex's fs/* calls laid \
             out there\n{said}"
        );
        // The refusal names its rule, and the history keeps it.
        assert!(said.contains("git.data-only"), "{said}");
    }
}

/// Not an attack: a file named `HEAD`, or a directory named `refs`, where they make no
/// repository (no `objects/` or `commondir` beside them) is written.
#[test]
fn codex_fs_still_writes_a_head_that_makes_no_repository() {
    let env = Env::new();
    env.write("docs/a.txt", "a\n");
    env.init();
    let (answers, stderr) = codex_fs(
        &env,
        &[
            (
                "fs/writeFile",
                json!({"path": uri(&env, "docs/HEAD"), "dataBase64": "aGkK"}),
            ),
            (
                "fs/createDirectory",
                json!({"path": uri(&env, "docs/refs"), "recursive": false}),
            ),
        ],
    );
    for a in &answers {
        assert!(a["error"].is_null(), "{answers:#?}\n{stderr}");
    }
    assert!(env.path("docs/refs").is_dir());
    assert_eq!(
        std::fs::read_to_string(env.path("docs/HEAD")).unwrap(),
        "hi\n"
    );
}
