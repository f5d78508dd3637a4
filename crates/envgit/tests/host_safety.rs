//! Nothing the agent writes runs on the host. The project's `.git` is an overlay inside: the
//! host's hooks cannot be touched even in the middle of a step (`mv .git` is refused, the hooks
//! are read-only), so the attacks below try that first and check it failed. Editor and agent
//! configuration (`.github/hooks/`, `.vscode/`, …) stays list-based: it is put back by content after every step,
//! from a copy taken before it — also when padded past the snapshot's size limit, and when
//! envgit itself is ended by a signal or killed in the middle of the step. Each attack is run
//! for real inside `envgit run`, and then the host's own git is run to show the hook it would
//! execute.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};

use support::mid_step::{go, pausing, started_until_go, wait_for};
use support::{Env, Run};

const ORIGINAL_HOOK: &str = "#!/bin/sh\nexit 0\n";
const ORIGINAL_TASKS: &str = "{\"version\": \"2.0.0\", \"tasks\": []}\n";

/// Tries to replace the host's git hook (renaming `.git`, then writing the hook in place),
/// printing how each try ended, then replaces `.github/hooks/hooks.json` behind a renamed parent
/// (which works: the put-back is what undoes it). `then` runs last.
fn tamper(marker: &std::path::Path, then: &str) -> String {
    format!(
        "printf '#!/bin/sh\\necho pwned >> {m}\\n' > planted-hook; chmod +x planted-hook; \
         mv .git .g; echo mv-git=$?; cp planted-hook .git/hooks/pre-commit; echo hook=$?; \
         mv .github .gh && mkdir -p .github/hooks && cp planted-hook .github/hooks/hooks.json && {then}",
        m = marker.display()
    )
}

/// The tries on `.git` failed inside: it is a mount point and its hooks are read-only.
fn git_tamper_failed(stdout: &str) {
    assert!(
        stdout.contains("mv-git=1") && stdout.contains("hook=1"),
        "{stdout}"
    );
}

/// The hook as the host's git would run it, shown short (a padded one is 101 MiB).
fn hook_of(env: &Env) -> String {
    let bytes = std::fs::read(env.path(".git/hooks/pre-commit")).unwrap();
    let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
    if bytes.len() > 200 {
        format!("{shown}… ({} bytes)", bytes.len())
    } else {
        shown
    }
}

/// A git project with a pre-commit hook of the user's, and an envgit policy.
fn project() -> Env {
    let env = Env::new();
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    let hook = env.path(".git/hooks/pre-commit");
    std::fs::write(&hook, ORIGINAL_HOOK).unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.write("a.txt", "a\n");
    env.write(".github/hooks/hooks.json", ORIGINAL_TASKS);
    env.envgit(&["init"]).ok();
    env
}

#[test]
fn a_file_padded_past_the_size_limit_behind_a_renamed_parent_is_put_back() {
    let env = project();
    let marker = env.tmp.path().join("MARKER");
    let attack = tamper(
        &marker,
        "truncate -s 101M .github/hooks/hooks.json && printf 'export X=1\\n' > .envrc && echo planted",
    );
    let out = env.envgit(&["run", "sh", "-c", &attack]).ran_to("planted");
    git_tamper_failed(&out.stdout);
    assert!(
        out.stderr
            .contains(".github/hooks changed during the step and was put back"),
        "{}",
        out.stderr
    );
    assert_eq!(hook_of(&env), ORIGINAL_HOOK);
    assert_eq!(env.read(".github/hooks/hooks.json"), ORIGINAL_TASKS);
    assert!(!env.path(".envrc").exists(), "a new .envrc stayed");
    let step = &env.log_json()[0];
    assert!(
        step["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "protected_restored"),
        "{step}"
    );
    env.host_commit_runs_no_planted_hook(&marker);
}

/// A step that ignores SIGTERM and SIGHUP plants a hook, then waits; the user's `kill` ends
/// envgit: the sandbox is ended first, the hook is put back, and the step is recorded.
#[test]
fn ending_envgit_with_a_signal_still_puts_the_hook_back() {
    for signal in ["TERM", "HUP"] {
        let env = project();
        let marker = env.tmp.path().join("MARKER");
        let attack = format!(
            "trap '' TERM HUP INT; {}",
            tamper(&marker, "touch TAMPERED && sleep 600")
        );
        let child = env
            .cmd(&env.project)
            .args(["run", "sh", "-c", &attack])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&env, "TAMPERED");
        // Mid-step: the host's hook was never touched; the editor config was.
        assert_eq!(hook_of(&env), ORIGINAL_HOOK);
        let tasks = env.read(".github/hooks/hooks.json");
        assert!(tasks.contains("pwned"), "not tampered with: {tasks}");
        let kill = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(hook_of(&env), ORIGINAL_HOOK, "SIG{signal}: {stderr}");
        assert_eq!(
            env.read(".github/hooks/hooks.json"),
            ORIGINAL_TASKS,
            "SIG{signal}"
        );
        assert!(stderr.contains("put back"), "SIG{signal}: {stderr}");
        let step = &env.log_json()[0];
        assert_eq!(step["kind"], "run", "{step}");
        std::fs::remove_file(env.path("TAMPERED")).unwrap();
        env.host_commit_runs_no_planted_hook(&marker);
    }
}

/// git files outside the old protected list: `.git/commondir` aimed at a directory with its
/// own config, `.git/config.worktree`, a file `.git/config` includes, and symlinks planted
/// where the host's `git commit` writes. After the step the host's git reads none of them.
#[test]
fn git_files_that_redirect_or_write_through_are_put_back() {
    let env = project();
    env.write("included.cfg", "[user]\n\tname = host\n");
    let cfg = std::fs::read_to_string(env.path(".git/config")).unwrap();
    std::fs::write(
        env.path(".git/config"),
        format!("{cfg}[include]\n\tpath = ../included.cfg\n"),
    )
    .unwrap();
    env.envgit(&["record"]).ok();
    let victim = env.tmp.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let marker = env.tmp.path().join("MARKER");
    let attack = format!(
        "mkdir -p evil && printf '[core]\\n\\tfsmonitor = echo pwned >> {m}\\n' > evil/config && \
         printf '../evil\\n' > .git/commondir; \
         printf '[core]\\n\\tfsmonitor = echo pwned >> {m}\\n' > .git/config.worktree; \
         printf '[core]\\n\\tfsmonitor = echo pwned >> {m}\\n' > included.cfg; \
         mkdir -p .git/logs && ln -sf {v} .git/COMMIT_EDITMSG && ln -sf {v} .git/logs/HEAD; echo planted",
        m = marker.display(),
        v = victim.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &attack]).ran_to("planted");
    for p in [
        ".git/commondir",
        ".git/config.worktree",
        ".git/COMMIT_EDITMSG",
        ".git/logs/HEAD",
    ] {
        assert!(
            std::fs::symlink_metadata(env.path(p)).is_err(),
            "{p} stayed: {}",
            out.stderr
        );
    }
    assert_eq!(env.read("included.cfg"), "[user]\n\tname = host\n");
    let status = Command::new("git")
        .args(["status", "--short"])
        .current_dir(&env.project)
        .env("HOME", env.user_home())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    env.host_commit_runs_no_planted_hook(&marker);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

/// `envgit run sh -c ATTACK` killed (`SIGKILL`) once the attack made `at` in the project, after
/// `meanwhile` looked at the project mid-step.
fn killed_once_at(env: &Env, attack: &str, at: &str, meanwhile: impl FnOnce()) {
    let mut child = env
        .cmd(&env.project)
        .args(["run", "sh", "-c", attack])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(env, at);
    meanwhile();
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `kill -9` of envgit in the middle of a step: nothing can run in envgit then, so the next
/// envgit command puts the planted hook back from the copy in the store, before anything
/// else, and records the step as interrupted with its command.
#[test]
fn after_a_kill_9_the_next_command_puts_back_and_records_the_step() {
    let env = project();
    let marker = env.tmp.path().join("MARKER");
    let attack = tamper(&marker, "touch TAMPERED && sleep 600");
    killed_once_at(&env, &attack, "TAMPERED", || {
        assert_eq!(hook_of(&env), ORIGINAL_HOOK);
        assert!(env.read(".github/hooks/hooks.json").contains("pwned"));
    });
    let log = env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(
        log.stderr.contains("was put back") || log.stderr.contains("put back"),
        "{}",
        log.stderr
    );
    assert_eq!(hook_of(&env), ORIGINAL_HOOK);
    assert_eq!(env.read(".github/hooks/hooks.json"), ORIGINAL_TASKS);
    let steps = log.json();
    let last = &steps[0];
    assert_eq!(last["kind"], "interrupted", "{last:#}");
    assert!(
        last.to_string().contains("TAMPERED"),
        "the command is on the record: {last:#}"
    );
    std::fs::remove_file(env.path("TAMPERED")).unwrap();
    env.host_commit_runs_no_planted_hook(&marker);
}

/// `kill -9` of envgit in the middle of a step that planted what the host runs below the root:
/// editor configuration in a subfolder, a nested repository's hook manager file, a nested
/// Mercurial repository's hook, a subfolder made a git repository by its layout alone. No
/// snapshot follows such a step, so the next envgit command
/// finds them on disk (changed since the step began) and puts them back.
#[test]
fn after_a_kill_9_what_the_step_planted_below_the_root_goes_back() {
    let env = Env::new();
    let marker = env.tmp.path().join("MARKER");
    env.write("a.txt", "a\n");
    env.write("packages/web/index.js", "module.exports = 1;\n");
    env.write(
        "packages/api/.vscode/settings.json",
        "{\"the\": \"person's\"}\n",
    );
    let z = env.path("libs/z");
    std::fs::create_dir_all(&z).unwrap();
    env.git(&z, &["init", "-q", "-b", "main"]);
    env.git(&z, &["config", "core.hooksPath", ".husky"]);
    env.write("libs/z/lib.txt", "z\n");
    env.write("vendor/h/lib.txt", "h\n");
    let hg_init = persons_hg(&env, "vendor/h", &["init"]);
    assert!(hg_init.status.success(), "{hg_init:?}");
    env.write("vendor/h/.hg/hgrc", "[ui]\n");
    env.envgit(&["init"]).ok();
    let attack = format!(
        "printf '#!/bin/sh\\necho pwned >> {m}\\n' > evil; chmod +x evil; \
         mkdir -p packages/web/.vscode libs/z/.husky && \
         echo '{{\"tasks\": [{{\"runOptions\": {{\"runOn\": \"folderOpen\"}}}}]}}' > packages/web/.vscode/tasks.json && \
         echo '{{\"the\": \"agent\"}}' > packages/api/.vscode/settings.json && \
         cp evil libs/z/.husky/pre-commit && \
         printf '[hooks]\\npre-status = echo pwned >> {m}\\n' >> vendor/h/.hg/hgrc && \
         mkdir -p packages/web/objects packages/web/refs/heads && \
         echo 'ref: refs/heads/main' > packages/web/HEAD && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n\\tfsmonitor = \"echo pwned >> {m}; false\"\\n' > packages/web/config && \
         echo zz >> libs/z/lib.txt && touch PLANTED && sleep 600",
        m = marker.display()
    );
    killed_once_at(&env, &attack, "PLANTED", || {
        assert!(env.path("packages/web/.vscode/tasks.json").exists());
    });
    let log = env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(
        !env.path("packages/web/.vscode").exists(),
        "the killed step's editor configuration stayed: {}",
        log.stderr
    );
    assert_eq!(
        env.read("packages/api/.vscode/settings.json"),
        "{\"the\": \"person's\"}\n",
        "{}",
        log.stderr
    );
    let commit = env
        .host_git(&z)
        .args(["commit", "-q", "--allow-empty", "-m", "the person's"])
        .output()
        .unwrap();
    let status = persons_hg(&env, "vendor/h", &["status"]);
    // A directory the step made a repository by its layout (`HEAD`, `objects/`, `refs/`).
    let git_status = env
        .host_git(&env.path("packages/web"))
        .args(["status"])
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the host ran what the killed step planted\n{}{}{}\n--- the next command:\n{}",
        String::from_utf8_lossy(&commit.stderr),
        String::from_utf8_lossy(&status.stderr),
        String::from_utf8_lossy(&git_status.stdout),
        log.stderr
    );
    assert!(!env.path("packages/web/HEAD").exists(), "{}", log.stderr);
    assert_eq!(env.read("vendor/h/.hg/hgrc"), "[ui]\n");
    // The step's own work stays.
    assert_eq!(env.read("libs/z/lib.txt"), "z\nzz\n");
}

/// A tool as the person installed it, outside the project (`scripts/install-deps-host-tools`,
/// as a global install would be): its path under the tools' `node_modules`.
fn host_tool(rel: &str) -> std::path::PathBuf {
    support::installed_by("install-deps-host-tools", "ENVGIT_HOST_TOOLS", "host-tools")
        .join("node_modules")
        .join(rel)
}

/// `lefthook install` in the project, as the person ran it: its hook in `.git/hooks`.
fn lefthook_install(env: &Env, lefthook: &std::path::Path) {
    let installed = Command::new(lefthook)
        .arg("install")
        .current_dir(&env.project)
        .env("HOME", env.user_home())
        .output()
        .unwrap();
    assert!(installed.status.success(), "{installed:?}");
}

/// The person's next commit on the host (changing `a.txt`), which runs lefthook's hook.
fn host_commit_with_lefthook(env: &Env, lefthook: &std::path::Path) -> Output {
    std::fs::write(env.path("a.txt"), "changed on the host\n").unwrap();
    env.git(&env.project, &["add", "a.txt"]);
    env.host_git(&env.project)
        .args(["commit", "-q", "-m", "host commit"])
        .env("LEFTHOOK_BIN", lefthook)
        .output()
        .unwrap()
}

/// A git hook manager reads its configuration from the project each time the person runs
/// git, and runs what it says: lefthook's hook in `.git/hooks` is the person's and read-only,
/// but `lefthook.yml` says what it runs. The agent rewrites it, adds a `-local` config and a
/// config under `.config/` (lefthook merges them), and a script in its scripts folder; then the
/// person commits on the host with the real lefthook.
#[test]
fn a_hook_managers_configuration_is_protected_like_the_hooks() {
    let lefthook = host_tool(".bin/lefthook");
    let env = Env::new();
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    env.write("a.txt", "a\n");
    env.write(
        "lefthook.yml",
        "pre-commit:\n  commands:\n    lint:\n      run: \"true\"\n",
    );
    lefthook_install(&env, &lefthook);
    env.envgit(&["init"]).ok();
    let marker = env.tmp.path().join("MARKER");
    let planted = format!("      run: echo pwned >> {}\n", marker.display());
    let attack = format!(
        "printf 'pre-commit:\\n  commands:\\n    lint:\\n{planted}' > lefthook.yml; \
         printf 'pre-commit:\\n  commands:\\n    local:\\n{planted}' > lefthook-local.yml; \
         mkdir -p .config && printf 'pre-commit:\\n  commands:\\n    dot:\\n{planted}' > .config/lefthook-local.yml; \
         mkdir -p .lefthook/pre-commit && printf '#!/bin/sh\\necho pwned >> {m}\\n' > .lefthook/pre-commit/x.sh; \
         chmod +x .lefthook/pre-commit/x.sh; echo planted",
        m = marker.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &attack]).ran_to("planted");
    let commit = host_commit_with_lefthook(&env, &lefthook);
    assert!(commit.status.success(), "{commit:?}");
    assert!(
        !marker.exists(),
        "the person's commit ran what the agent wrote into lefthook's configuration: {}",
        String::from_utf8_lossy(&commit.stderr)
    );
    assert!(
        out.stderr.contains("put back (protected path)"),
        "{}",
        out.stderr
    );
    // lefthook itself still ran, with the person's configuration.
    assert!(
        String::from_utf8_lossy(&commit.stderr).contains("lint"),
        "{commit:?}"
    );
}

/// What lefthook's configuration names runs at the person's commit too: the `rc` file its
/// installed hook sources before every hook, and the commands of the files `extends` names.
#[test]
fn what_a_hook_managers_configuration_names_is_protected_like_it() {
    let lefthook = host_tool(".bin/lefthook");
    let env = Env::new();
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    env.write("a.txt", "a\n");
    let root = env.project.canonicalize().unwrap();
    env.write(
        "lefthook.yml",
        &format!(
            "rc: {}/.lefthookrc\nextends:\n  - ci/lefthook-extra.yml\n\
             pre-commit:\n  commands:\n    lint:\n      run: \"true\"\n",
            root.display()
        ),
    );
    env.write(".lefthookrc", "export PROJECT_MODE=dev\n");
    env.write(
        "ci/lefthook-extra.yml",
        "pre-commit:\n  commands:\n    extra:\n      run: \"true\"\n",
    );
    lefthook_install(&env, &lefthook);
    env.envgit(&["init"]).ok();
    let sourced = env.tmp.path().join("sourced");
    let ran = env.tmp.path().join("ran");
    let attack = format!(
        "printf 'echo pwned >> {s}\\n' >> .lefthookrc; \
         printf 'pre-commit:\\n  commands:\\n    extra:\\n      run: echo pwned >> {r}\\n' > ci/lefthook-extra.yml; \
         echo planted",
        s = sourced.display(),
        r = ran.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &attack]).ran_to("planted");
    let commit = host_commit_with_lefthook(&env, &lefthook);
    let said = format!("{}\n--- commit:\n{commit:?}", out.stderr);
    assert!(commit.status.success(), "{said}");
    assert!(
        !sourced.exists(),
        "the person's commit sourced what the step wrote\n{said}"
    );
    assert!(
        !ran.exists(),
        "the person's commit ran what the step wrote\n{said}"
    );
    // lefthook itself ran, with the person's configuration and what it extends.
    assert!(
        String::from_utf8_lossy(&commit.stderr).contains("extra"),
        "{said}"
    );
}

/// The real mise, installed outside the project.
fn mise() -> std::path::PathBuf {
    host_tool(&format!(
        "@jdxcode/mise-linux-{}/bin/mise",
        if cfg!(target_arch = "aarch64") {
            "arm64"
        } else {
            "x64"
        }
    ))
}

/// `args` run in the project as the person: their home, mise's directories in it, and
/// `$MISE_BIN`.
fn as_the_person_with_mise(env: &Env, mise: &std::path::Path, args: &[&str]) -> Output {
    as_the_person_with_mise_in(env, &env.project, mise, args)
}

/// [`as_the_person_with_mise`] in `dir`.
fn as_the_person_with_mise_in(
    env: &Env,
    dir: &std::path::Path,
    mise: &std::path::Path,
    args: &[&str],
) -> Output {
    let home = env.user_home();
    Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .env("HOME", &home)
        .env("MISE_DATA_DIR", home.join(".local/share/mise"))
        .env("MISE_STATE_DIR", home.join(".local/state/mise"))
        .env("MISE_CONFIG_DIR", home.join(".config/mise"))
        .env("MISE_CACHE_DIR", home.join(".cache/mise"))
        .env("MISE_BIN", mise)
        .output()
        .unwrap()
}

/// mise, as the person's shell runs it on every prompt (`mise activate`: `mise hook-env`),
/// loads the project's `mise.toml` and runs what it says (`_.source` runs a script), once the
/// person has trusted the file: by its path, not its content. The agent rewrites the trusted
/// file; then the person's shell shows a prompt in the project. (A file mise merges that the
/// person never trusted stops mise instead: those names are protected too, and `is_protected`'s
/// own test names them.)
#[test]
fn a_trusted_environment_managers_configuration_is_protected() {
    let mise = mise();
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.write("mise.toml", "[env]\nGREETING = \"from the person\"\n");
    let as_the_person = |args: &[&str]| {
        let out = as_the_person_with_mise(&env, &mise, args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    as_the_person(&[mise.to_str().unwrap(), "trust"]);
    env.envgit(&["init"]).ok();
    let marker = env.tmp.path().join("MARKER");
    let source = "[env]\\nGREETING = \"from the agent\"\\n_.source = \"./evil.sh\"\\n";
    let attack = format!(
        "printf '#!/bin/sh\\necho pwned >> {m}\\n' > evil.sh; \
         printf '{source}' > mise.toml; echo planted",
        m = marker.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &attack]).ran_to("planted");
    let prompt = as_the_person(&[
        "bash",
        "-c",
        "eval \"$(\"$MISE_BIN\" hook-env -s bash)\"; echo \"GREETING=$GREETING\"",
    ]);
    assert!(
        !marker.exists(),
        "the person's shell ran what the agent wrote into mise's configuration: {prompt}"
    );
    assert!(
        prompt.contains("GREETING=from the person"),
        "{prompt}\n{}",
        out.stderr
    );
    // The file is read-only inside: the agent's write failed there.
    assert!(
        out.stderr.contains("Read-only file system"),
        "{}",
        out.stderr
    );
}

/// mise trusts a directory by its path: one deeper in the project (a monorepo's
/// `packages/web`) has its configuration loaded at the person's prompt there, whatever it now
/// says, and the script its `_.source` names run. The agent rewrites both.
#[test]
fn a_directory_deeper_in_the_project_that_mise_trusts_is_protected_like_the_root() {
    let mise = mise();
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.write(
        "packages/web/mise.toml",
        "[env]\nGREETING = \"from the person\"\n_.source = \"./tools/setup.sh\"\n",
    );
    env.write("packages/web/tools/setup.sh", "export SETUP=done\n");
    let web = env.path("packages/web");
    let as_the_person = |args: &[&str]| {
        let out = as_the_person_with_mise_in(&env, &web, &mise, args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    as_the_person(&[mise.to_str().unwrap(), "trust", "mise.toml"]);
    env.envgit(&["init"]).ok();
    let marker = env.tmp.path().join("MARKER");
    let attack = format!(
        "cd packages/web; \
         echo 'echo pwned >> {m}' >> tools/setup.sh; \
         printf '[env]\\nGREETING = \"from the agent\"\\n_.source = \"./evil.sh\"\\n' > mise.toml; \
         printf 'echo pwned >> {m}\\n' > evil.sh; echo planted",
        m = marker.display()
    );
    let out = Run::from(
        env.cmd(&env.project)
            .env("MISE_STATE_DIR", env.user_home().join(".local/state/mise"))
            .args(["run", "sh", "-c", &attack])
            .output()
            .unwrap(),
    )
    .ran_to("planted");
    let prompt = as_the_person(&[
        "bash",
        "-c",
        "eval \"$(\"$MISE_BIN\" hook-env -s bash)\"; echo \"GREETING=$GREETING $SETUP\"",
    ]);
    assert!(
        !marker.exists(),
        "the person's shell ran what the agent wrote into a trusted directory's mise \
         configuration: {prompt}\n--- the step:\n{}",
        out.stderr
    );
    assert!(
        prompt.contains("GREETING=from the person done"),
        "{prompt}\n{}",
        out.stderr
    );
}

/// mise loads more than `mise.toml` from a directory it trusts: `conf.d/*.toml` under
/// `mise/` and `.config/mise/`, `.config/mise.local.toml`, and with the person's `MISE_ENV=dev`
/// `mise.dev.toml`, `.config/mise.dev.toml`, `mise/config.dev.toml`. At the root and in a
/// trusted directory deeper in the project, a step writes each; the person's prompt in either
/// must not run what they source.
#[test]
fn every_configuration_mise_loads_in_a_trusted_directory_is_protected() {
    let mise = mise();
    let env = Env::new();
    env.write("a.txt", "a\n");
    for dir in [".", "packages/web"] {
        env.write(&format!("{dir}/mise.toml"), "[env]\nGREETING = \"hi\"\n");
        let out = as_the_person_with_mise_in(
            &env,
            &env.path(dir),
            &mise,
            &[mise.to_str().unwrap(), "trust", "mise.toml"],
        );
        assert!(out.status.success(), "{out:?}");
    }
    env.envgit(&["init"]).ok();
    let marker = env.tmp.path().join("MARKER");
    let names = [
        "mise/conf.d/x.toml",
        ".config/mise/conf.d/x.toml",
        ".config/mise.local.toml",
        ".config/mise.dev.toml",
        "mise.dev.toml",
        "mise/config.dev.toml",
    ];
    let mut attack = format!("printf 'echo pwned >> {}\\n' > evil.sh; ", marker.display());
    for dir in [".", "packages/web"] {
        for name in names {
            let path = format!("{dir}/{name}");
            let evil = env.path("evil.sh");
            attack.push_str(&format!(
                "mkdir -p $(dirname {path}) && printf '[env]\\n_.source = \"{}\"\\n' > {path}; ",
                evil.display()
            ));
        }
    }
    attack.push_str("echo planted");
    let out = Run::from(
        env.cmd(&env.project)
            .env("MISE_STATE_DIR", env.user_home().join(".local/state/mise"))
            .env("MISE_ENV", "dev")
            .args(["run", "sh", "-c", &attack])
            .output()
            .unwrap(),
    )
    .ran_to("planted");
    for dir in [".", "packages/web"] {
        let prompt = as_the_person_with_mise_in(
            &env,
            &env.path(dir),
            &mise,
            &[
                "env",
                "MISE_ENV=dev",
                "bash",
                "-c",
                "eval \"$(\"$MISE_BIN\" hook-env -s bash)\"; echo \"GREETING=$GREETING\"",
            ],
        );
        assert!(
            !marker.exists(),
            "the person's prompt in {dir} ran what the step wrote into mise's configuration: \
             {prompt:?}\n--- the step:\n{}",
            out.stderr
        );
    }
}

/// Configuration that other hook managers, environment managers, editors and coding agents
/// read from the project and run commands from when the person uses them there (MCP servers
/// they start, language servers, hook scripts): the agent's step writes each, and none is left
/// afterwards (new ones are removed as the put-back of a protected path).
#[test]
fn what_other_host_tools_run_from_the_project_is_put_back() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.envgit(&["init"]).ok();
    let planted = [
        "lefthook-local.yml",
        ".config/lefthook.yml",
        ".lefthook/pre-commit/x.sh",
        ".overcommit.yml",
        ".git-hooks/pre_commit/x.rb",
        ".hg/hgrc",
        ".hg/sharedpath",
        ".sl/config",
        ".jj/repo/config.toml",
        ".mise.local.toml",
        ".config/mise/conf.d/x.toml",
        ".helix/languages.toml",
        ".roo/mcp.json",
        ".kiro/settings/mcp.json",
        ".amazonq/mcp.json",
        ".continue/mcpServers/x.yaml",
        ".junie/mcp/mcp.json",
        "opencode.json",
        "opencode.jsonc",
        ".opencode/plugin/x.js",
        "crush.json",
        ".crush.json",
        ".kilocode/mcp.json",
        ".qwen/settings.json",
        ".clinerules/hooks/TaskStart",
        ".windsurf/hooks.json",
        ".aider.conf.yml",
        ".exrc",
        ".vimrc",
        ".gvimrc",
        ".nvimrc",
        ".nvim.lua",
    ];
    let script = planted
        .iter()
        .map(|p| format!("mkdir -p \"$(dirname '{p}')\" && echo planted > '{p}'"))
        .collect::<Vec<_>>()
        .join("; ")
        + "; echo planted";
    let out = env.envgit(&["run", "sh", "-c", &script]).ran_to("planted");
    let left: Vec<&str> = planted
        .iter()
        .copied()
        .filter(|p| env.path(p).exists())
        .collect();
    assert!(
        left.is_empty(),
        "left on the host: {left:?}\n{}",
        out.stderr
    );
}

/// git takes a directory for a repository by its layout alone (`HEAD`, `objects/`, `refs/`),
/// before looking further up for the project's `.git`: a step that writes that layout and a
/// `config` naming a `core.fsmonitor` into the project's `src/` would have every git the
/// person runs below `src/` run it. The same in a directory the step makes, and in a bare
/// repository the project already had (a test fixture).
#[test]
fn a_directory_the_step_makes_a_repository_by_its_layout_runs_nothing() {
    let env = project();
    env.write("src/pkg/deep/lib.rs", "\n");
    env.git(&env.project, &["init", "-q", "--bare", "fixtures/repo.git"]);
    env.envgit(&["run", "true"]).ok();
    let marker = env.path("../fsmonitor-ran");
    let plant = |dir: &str| {
        format!(
            "mkdir -p {dir}/objects {dir}/refs/heads && echo 'ref: refs/heads/main' > {dir}/HEAD \
             && printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n\\tfsmonitor = \"echo ran >> {m}; false\"\\n' > {dir}/config",
            m = marker.display()
        )
    };
    let script = format!(
        "{} && {} && {} && echo planted",
        plant("src"),
        plant("made"),
        plant("fixtures/repo.git")
    );
    let out = env.envgit(&["run", "sh", "-c", &script]).ran_to("planted");
    for dir in ["src", "src/pkg/deep", "made", "fixtures/repo.git"] {
        let status = env
            .host_git(&env.path(dir))
            .args(["status"])
            .output()
            .unwrap();
        assert!(
            !marker.exists(),
            "the person's git status in {dir} ran the step's fsmonitor: {}{}\n{}",
            String::from_utf8_lossy(&status.stdout),
            String::from_utf8_lossy(&status.stderr),
            out.stderr
        );
    }
    assert!(!env.path("src/HEAD").exists(), "{}", out.stderr);
}

/// rustup's proxies (the person's `rustc`, `cargo`, what a shell prompt runs at every prompt)
/// read `rust-toolchain.toml` from the directory the person is in and each parent, and run
/// the programs of the directory its `path` names. A step that writes one, at the root or in
/// a directory of the project that was there before it, must not make the person's next
/// `rustc --version` run the step's program.
#[test]
fn a_toolchain_file_the_step_writes_does_not_choose_the_persons_rustc() {
    let rustup_rustc = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cargo")))
        .map(|c| c.join("bin/rustc"))
        .filter(|p| p.exists())
        .expect(
            "rustup's rustc proxy in $CARGO_HOME/bin (the machine's toolchain comes from rustup)",
        );
    let env = project();
    env.write("crates/x/src/lib.rs", "\n");
    env.envgit(&["run", "true"]).ok();
    let marker = env.path("../toolchain-ran");
    let script = format!(
        "mkdir -p tc/bin && printf '#!/bin/sh\\necho ran >> {m}\\necho rustc 9.9.9\\n' > tc/bin/rustc \
         && chmod +x tc/bin/rustc \
         && printf '[toolchain]\\npath = \"{tc}\"\\n' > rust-toolchain.toml \
         && cp rust-toolchain.toml crates/x/rust-toolchain.toml \
         && printf 'rust path:{tc}\\n' > .tool-versions && echo planted",
        m = marker.display(),
        tc = env.path("tc").display(),
    );
    let out = env.envgit(&["run", "sh", "-c", &script]).ran_to("planted");
    for dir in ["", "crates/x"] {
        // As in the person's shell: cargo, which runs this test, names its own toolchain.
        let rustc = Command::new(&rustup_rustc)
            .env_remove("RUSTUP_TOOLCHAIN")
            .arg("--version")
            .current_dir(env.path(dir))
            .output()
            .unwrap();
        assert!(
            !marker.exists(),
            "the person's rustc in '{dir}' ran the step's program: {}{}\n{}",
            String::from_utf8_lossy(&rustc.stdout),
            String::from_utf8_lossy(&rustc.stderr),
            out.stderr
        );
    }
    for left in [
        "rust-toolchain.toml",
        "crates/x/rust-toolchain.toml",
        ".tool-versions",
    ] {
        assert!(!env.path(left).exists(), "{left} left: {}", out.stderr);
    }
}

/// The person's `~/.gitconfig` is a link into the project (a dotfiles repository): a step
/// that puts a pipe in its place must not leave their next envgit command waiting on it
/// forever (envgit reads that file before every step).
#[test]
fn a_pipe_in_place_of_the_persons_git_configuration_does_not_stop_envgit() {
    let env = Env::new();
    env.write("dotfiles/gitconfig", "[user]\n\tname = Person\n");
    std::fs::create_dir_all(env.user_home()).unwrap();
    std::os::unix::fs::symlink(
        env.path("dotfiles/gitconfig"),
        env.user_home().join(".gitconfig"),
    )
    .unwrap();
    env.envgit(&["init"]).ok();
    env.envgit(&[
        "run",
        "sh",
        "-c",
        "rm dotfiles/gitconfig && mkfifo dotfiles/gitconfig && echo planted",
    ])
    .ran_to("planted");
    let mut next = env.cmd(&env.project);
    next.env_remove("XDG_CONFIG_HOME")
        .env_remove("GIT_CONFIG_GLOBAL")
        .args(["run", "true"]);
    let status = within_a_minute(next).expect("envgit waited a minute on the pipe the step left");
    assert!(status.success(), "{status:?}");
}

/// A nested repository's `.git/config` is read at the end of a step that changed something in
/// that repository: a pipe the step left in its place must not stop envgit.
#[test]
fn a_pipe_in_place_of_a_nested_repositorys_git_configuration_does_not_stop_envgit() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    let z = env.path("libs/z");
    std::fs::create_dir_all(&z).unwrap();
    env.git(&z, &["init", "-q", "-b", "main"]);
    env.write("libs/z/lib.txt", "z\n");
    env.envgit(&["init"]).ok();
    let mut step = env.cmd(&env.project);
    step.args([
        "run",
        "sh",
        "-c",
        "rm libs/z/.git/config && mkfifo libs/z/.git/config && echo zz >> libs/z/lib.txt",
    ]);
    let status = within_a_minute(step).expect("envgit waited a minute on the pipe the step left");
    assert!(status.success(), "{status:?}");
    assert_eq!(env.read("libs/z/lib.txt"), "z\nzz\n");
}

/// `cmd` run to its end, or killed after a minute (far beyond a step, on any machine): its
/// status, `None` when it had to be killed.
fn within_a_minute(mut cmd: Command) -> Option<std::process::ExitStatus> {
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A Mercurial repository's `.hg/hgrc` runs hooks and imports extensions at the person's
/// every `hg` command: a hook a step adds there must not run on the host.
#[test]
fn a_mercurial_repositorys_configuration_is_protected() {
    let env = Env::new();
    let marker = env.tmp.path().join("pwned");
    let hg = |args: &[&str]| persons_hg(&env, ".", args);
    std::fs::create_dir_all(env.user_home()).unwrap();
    env.write("a.txt", "a\n");
    assert!(hg(&["init"]).status.success());
    env.write(".hg/hgrc", "[ui]\nusername = Person <p@example.invalid>\n");
    env.envgit(&["init"]).ok();
    let script = format!(
        "printf '[hooks]\\npre-status = echo pwned >> {m}\\n' >> .hg/hgrc; \
         mv .hg .hg-moved && mkdir .hg && cp -r .hg-moved/* .hg/ \
         && printf '[hooks]\\npre-status = echo pwned >> {m}\\n' >> .hg/hgrc; echo planted",
        m = marker.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &script]).ran_to("planted");
    let status = hg(&["status"]);
    assert!(
        !marker.exists(),
        "the person's hg ran the hook the step added\n{}\n--- the step:\n{}",
        String::from_utf8_lossy(&status.stderr),
        out.stderr
    );
    assert_eq!(
        env.read(".hg/hgrc"),
        "[ui]\nusername = Person <p@example.invalid>\n"
    );
}

/// The person's `hg ARGS` in the project directory `dir`: their home, no system or user
/// configuration but the repository's.
fn persons_hg(env: &Env, dir: &str, args: &[&str]) -> Output {
    Command::new("hg")
        .args(args)
        .current_dir(env.path(dir))
        .env("HOME", env.user_home())
        .env("HGUSER", "Person <p@example.invalid>")
        .env("HGRCPATH", "")
        .output()
        .unwrap()
}

/// A Mercurial repository nested in the project (a vendored checkout the person runs `hg` in):
/// a hook a step adds to its `.hg/hgrc` must not run there either. One the step cloned itself
/// keeps its own configuration.
#[test]
fn a_nested_mercurial_repositorys_configuration_is_put_back() {
    let env = Env::new();
    let marker = env.tmp.path().join("pwned");
    let hg = |dir: &str, args: &[&str]| persons_hg(&env, dir, args);
    std::fs::create_dir_all(env.user_home()).unwrap();
    env.write("a.txt", "a\n");
    env.write("vendor/h/lib.txt", "h\n");
    assert!(hg("vendor/h", &["init"]).status.success());
    env.write(
        "vendor/h/.hg/hgrc",
        "[ui]\nusername = Person <p@example.invalid>\n",
    );
    env.envgit(&["init"]).ok();
    let script = format!(
        "printf '[hooks]\\npre-status = echo pwned >> {m}\\n' >> vendor/h/.hg/hgrc; \
         mkdir -p vendor/new/.hg && echo '[ui]' > vendor/new/.hg/hgrc; \
         echo hh >> vendor/h/lib.txt; echo planted",
        m = marker.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &script]).ran_to("planted");
    let status = hg("vendor/h", &["status"]);
    assert!(
        !marker.exists(),
        "the person's hg in the nested repository ran the hook the step added\n{}\n--- the step:\n{}",
        String::from_utf8_lossy(&status.stderr),
        out.stderr
    );
    assert_eq!(
        env.read("vendor/h/.hg/hgrc"),
        "[ui]\nusername = Person <p@example.invalid>\n"
    );
    assert_eq!(env.read("vendor/h/lib.txt"), "h\nhh\n");
    assert_eq!(env.read("vendor/new/.hg/hgrc"), "[ui]\n");
}

/// Editor and agent configuration in a subfolder the person opens (VS Code's trust of a folder
/// covers its subfolders; an agent started there reads its own): a step's new
/// `packages/web/.vscode/tasks.json` or `.claude/settings.json` there goes, as at the root. A
/// directory the step made itself (a clone, a scaffold) keeps its own.
#[test]
fn editor_and_agent_configuration_below_the_root_is_put_back() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.write("packages/web/index.js", "module.exports = 1;\n");
    env.write(
        "packages/api/.vscode/settings.json",
        "{\"the\": \"person's\"}\n",
    );
    env.envgit(&["init"]).ok();
    let script = "mkdir -p packages/web/.vscode packages/web/.claude newclone/.vscode && \
         echo '{\"tasks\": [{\"runOptions\": {\"runOn\": \"folderOpen\"}}]}' \
           > packages/web/.vscode/tasks.json && \
         echo '{\"hooks\": {}}' > packages/web/.claude/settings.json && \
         echo '{}' > packages/web/.mcp.json && \
         echo '{\"the\": \"agent'\"'\"'s\"}' > packages/api/.vscode/settings.json && \
         echo '{}' > newclone/.vscode/settings.json && \
         echo 'module.exports = 2;' > packages/web/index.js && echo planted";
    let out = env.envgit(&["run", "sh", "-c", script]).ran_to("planted");
    for gone in [
        "packages/web/.vscode",
        "packages/web/.claude",
        "packages/web/.mcp.json",
    ] {
        assert!(!env.path(gone).exists(), "{gone} stayed\n{}", out.stderr);
    }
    assert_eq!(
        env.read("packages/api/.vscode/settings.json"),
        "{\"the\": \"person's\"}\n",
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("packages/web/.vscode changed during the step and was put back"),
        "{}",
        out.stderr
    );
    // The step's own work stays: a directory it made, and the project's code.
    assert!(env.path("newclone/.vscode/settings.json").exists());
    assert_eq!(env.read("packages/web/index.js"), "module.exports = 2;\n");
}

/// A repository nested in the project (a submodule, a vendored checkout) whose hooks the
/// person set up: its hook manager's files at its own root (`libs/z/.githooks` that its
/// `core.hooksPath` names, `.husky/`, `lefthook.yml`) run at their commit there. A step's
/// change to them goes back; a repository the step made itself keeps its own.
#[test]
fn a_nested_repositorys_hook_manager_files_are_put_back() {
    let env = Env::new();
    let marker = env.tmp.path().join("pwned");
    env.write("a.txt", "a\n");
    let z = env.path("libs/z");
    std::fs::create_dir_all(&z).unwrap();
    env.git(&z, &["init", "-q", "-b", "main"]);
    env.git(&z, &["config", "core.hooksPath", ".githooks"]);
    env.write("libs/z/.githooks/pre-commit", "#!/bin/sh\nexit 0\n");
    std::fs::set_permissions(
        env.path("libs/z/.githooks/pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    env.write("libs/z/lib.txt", "z\n");
    env.envgit(&["init"]).ok();
    let script = format!(
        "printf '#!/bin/sh\\necho pwned >> {m}\\n' > libs/z/.githooks/pre-commit; \
         mkdir -p new/.githooks && git -C new init -q && echo x > new/.githooks/pre-commit; \
         echo zz >> libs/z/lib.txt; echo planted",
        m = marker.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &script]).ran_to("planted");
    let commit = env
        .host_git(&z)
        .args(["commit", "-q", "--allow-empty", "-m", "the person's"])
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the person's commit in the nested repository ran the hook the step wrote\n{}\n\
         --- the step:\n{}",
        String::from_utf8_lossy(&commit.stderr),
        out.stderr
    );
    assert!(
        out.stderr
            .contains("libs/z/.githooks changed during the step and was put back"),
        "{}",
        out.stderr
    );
    assert_eq!(env.read("libs/z/lib.txt"), "z\nzz\n");
    assert!(env.path("new/.githooks/pre-commit").exists());
}

/// What git configuration has the person's git run from a nested repository, beyond a hook
/// manager's files: that repository's own `core.hooksPath` (`.config/hooks`) and a `!` alias's
/// script, and the person's global `core.hooksPath = scripts/hooks`, which every repository's
/// `scripts/hooks` answers, the nested ones' too. The person's commit and `git st` there must
/// not run what the step wrote.
#[test]
fn what_a_nested_repositorys_git_configuration_runs_is_put_back() {
    let env = Env::new();
    let marker = env.tmp.path().join("pwned");
    std::fs::create_dir_all(env.user_home()).unwrap();
    std::fs::write(
        env.user_home().join(".gitconfig"),
        "[core]\n\thooksPath = scripts/hooks\n",
    )
    .unwrap();
    env.write("a.txt", "a\n");
    // `z` names its own hooks directory and an alias; `y` follows the person's global one.
    for repo in ["libs/z", "libs/y"] {
        let dir = env.path(repo);
        std::fs::create_dir_all(&dir).unwrap();
        env.git(&dir, &["init", "-q", "-b", "main"]);
        env.write(&format!("{repo}/lib.txt"), "lib\n");
    }
    let z = env.path("libs/z");
    env.git(&z, &["config", "core.hooksPath", ".config/hooks"]);
    env.git(&z, &["config", "alias.st", "!./tools/st.sh"]);
    for hook in [
        "libs/z/.config/hooks/pre-commit",
        "libs/y/scripts/hooks/pre-commit",
    ] {
        env.write(hook, ORIGINAL_HOOK);
        std::fs::set_permissions(env.path(hook), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    env.envgit(&["init"]).ok();
    let script = format!(
        "printf '#!/bin/sh\\necho pwned >> {m}\\n' > evil; chmod +x evil; \
         cp evil libs/z/.config/hooks/pre-commit; mkdir -p libs/z/tools; cp evil libs/z/tools/st.sh; \
         cp evil libs/y/scripts/hooks/pre-commit; echo yy >> libs/y/lib.txt; echo planted",
        m = marker.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &script]).ran_to("planted");
    for (repo, args) in [
        (
            "libs/z",
            &["commit", "-q", "--allow-empty", "-m", "the person's"][..],
        ),
        ("libs/z", &["st"][..]),
        (
            "libs/y",
            &["commit", "-q", "--allow-empty", "-m", "the person's"][..],
        ),
    ] {
        let ran = env.host_git(&env.path(repo)).args(args).output().unwrap();
        assert!(
            !marker.exists(),
            "the person's `git {}` in {repo} ran what the step wrote\n{}\n--- the step:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&ran.stderr),
            out.stderr
        );
    }
    assert!(
        out.stderr
            .contains("libs/z/.config/hooks changed during the step and was put back"),
        "{}",
        out.stderr
    );
    assert!(!env.path("libs/z/tools/st.sh").exists(), "{}", out.stderr);
    assert_eq!(env.read("libs/y/lib.txt"), "lib\nyy\n");
}

/// The person's `PATH` with `dirs` of the project first, as an activated virtualenv
/// (`.venv/bin`) or direnv's `PATH_add bin` leaves it in their shell, and so in envgit's.
fn path_with_project_dirs(env: &Env, dirs: &[&str]) -> String {
    let mut entries: Vec<String> = dirs
        .iter()
        .map(|d| env.path(d).display().to_string())
        .collect();
    entries.push(std::env::var("PATH").unwrap());
    entries.join(":")
}

/// An attack's step: `envgit run sh -c SCRIPT` in the project, envgit started with `path`.
fn step_with_path(env: &Env, path: &str, script: &str) -> Run {
    step_with(env, "PATH", path, script)
}

/// `envgit run sh -c SCRIPT` with the person's `var` set to `value`; `script` ends by
/// printing `planted`.
fn step_with(env: &Env, var: &str, value: &str, script: &str) -> Run {
    Run::from(
        env.cmd(&env.project)
            .env(var, value)
            .args(["run", "sh", "-c", script])
            .output()
            .unwrap(),
    )
    .ran_to("planted")
}

/// The person's shell, with `path`, runs each of `programs` in the project: none may run what
/// the step planted (which writes `marker`).
fn host_runs_nothing_planted(
    env: &Env,
    path: &str,
    programs: &[&str],
    marker: &std::path::Path,
    step: &Run,
) {
    for program in programs {
        let ran = Command::new("sh")
            .args(["-c", program])
            .current_dir(&env.project)
            .env("PATH", path)
            .output()
            .unwrap();
        assert!(
            !marker.exists(),
            "the host's `{program}` ran what the step planted on the PATH ({})\n{}",
            String::from_utf8_lossy(&ran.stderr),
            step.stderr
        );
    }
}

/// The host's own program `name` as the test's `PATH` finds it, its links resolved.
fn host_program(name: &str) -> std::path::PathBuf {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!found.is_empty(), "{name} is not on the test's PATH");
    std::fs::canonicalize(found).unwrap()
}

#[test]
fn a_program_the_step_puts_on_the_persons_path_before_the_hosts_is_removed() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    // An activated virtualenv: its bin is on the person's PATH, ahead of the host's programs.
    env.write(".venv/bin/activate", "# the venv's\n");
    env.write(".venv/bin/pip", "#!/bin/sh\necho the venv's pip\n");
    std::fs::set_permissions(
        env.path(".venv/bin/pip"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    env.envgit(&["init"]).ok();
    // `bin` does not exist yet: direnv's `PATH_add bin` puts it on the PATH all the same.
    let path = path_with_project_dirs(&env, &[".venv/bin", "bin"]);
    let marker = env.tmp.path().join("pwned");
    let git = host_program("git");
    let shell = host_program("sh");
    let payload = format!(
        "#!/bin/sh\\necho pwned >> {m}\\nexec {git} \"$@\"\\n",
        m = marker.display(),
        git = git.display()
    );
    let script = format!(
        "printf '{payload}' > .venv/bin/git; chmod +x .venv/bin/git; \
         mkdir -p bin && printf '#!/bin/sh\\necho pwned >> {m}\\n' > bin/ls && chmod 755 bin/ls; \
         printf '#!/bin/sh\\necho pwned >> {m}\\n' > evil.sh && chmod +x evil.sh && ln -s ../../evil.sh .venv/bin/env; \
         printf '#!/bin/sh\\necho mine\\n' > .venv/bin/envgit-test-tool && chmod +x .venv/bin/envgit-test-tool; \
         printf '#!/bin/sh\\necho the upgraded pip\\n' > .venv/bin/pip; \
         ln -s {shell} .venv/bin/sh; \
         echo planted",
        m = marker.display(),
        shell = shell.display()
    );
    let out = step_with_path(&env, &path, &script);
    // The person's shell, with the same PATH, runs git, ls and env in the project.
    host_runs_nothing_planted(&env, &path, &["git --version", "ls", "env"], &marker, &out);
    for removed in [".venv/bin/git", "bin/ls", ".venv/bin/env"] {
        assert!(
            std::fs::symlink_metadata(env.path(removed)).is_err(),
            "{removed} is still there\n{}",
            out.stderr
        );
        assert!(
            out.stderr.contains(removed) && out.stderr.contains("filesystem.path-shadow"),
            "{removed} was not named with its rule:\n{}",
            out.stderr
        );
    }
    assert!(
        out.stderr
            .contains("add `git` to `filesystem.allow_shadowing` in envgit.yaml"),
        "the refusal does not say the fix:\n{}",
        out.stderr
    );
    // What shadows no host program, a program the venv already had, and a link to the very
    // program it shadows are the project's, as before.
    assert_eq!(
        env.read(".venv/bin/pip"),
        "#!/bin/sh\necho the upgraded pip\n"
    );
    assert!(env.path(".venv/bin/envgit-test-tool").exists());
    assert!(env.path(".venv/bin/sh").exists());
    let log = env.log_json();
    let refusals = log[0]["refusals"].to_string();
    assert!(
        refusals.contains(".venv/bin/git") && refusals.contains("filesystem.path-shadow"),
        "{refusals}"
    );
}

#[test]
fn a_program_the_step_puts_on_the_path_through_a_writable_directory_or_a_link_is_removed() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.envgit(&["init"]).ok();
    // A toolchain's bin the policy lets steps write, first on the PATH (as rustup puts
    // `~/.cargo/bin`), and the project's `bin` after it.
    let tools = env.tmp.path().join("tools");
    std::fs::create_dir_all(tools.join("bin")).unwrap();
    let yaml = env.read("envgit.yaml").replace(
        "# filesystem:\n#   deny_read:",
        &format!(
            "filesystem:\n  allow_write: [\"{}\"]\n#   deny_read:",
            tools.display()
        ),
    );
    env.write("envgit.yaml", &yaml);
    // The person's own link out of the project, on the PATH: theirs, left alone.
    let theirs = env.tmp.path().join("their-venv");
    std::fs::create_dir_all(theirs.join("bin")).unwrap();
    std::os::unix::fs::symlink(&theirs, env.path("venv")).unwrap();
    let path = format!(
        "{}:{}",
        tools.join("bin").display(),
        path_with_project_dirs(&env, &["venv/bin", "bin"])
    );
    let marker = env.tmp.path().join("pwned");
    let planted = format!("#!/bin/sh\\necho pwned >> {}\\n", marker.display());
    let script = format!(
        "printf '{planted}' > {t}/bin/git && chmod +x {t}/bin/git; \
         mkdir -p {t}/elsewhere && printf '{planted}' > {t}/elsewhere/ls && chmod +x {t}/elsewhere/ls; \
         ln -s {t}/elsewhere bin; echo planted",
        t = tools.display()
    );
    let out = step_with_path(&env, &path, &script);
    host_runs_nothing_planted(&env, &path, &["git --version", "ls"], &marker, &out);
    assert!(!tools.join("bin/git").exists(), "{}", out.stderr);
    assert!(
        std::fs::symlink_metadata(env.path("bin")).is_err(),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("filesystem.path-shadow"),
        "{}",
        out.stderr
    );
    assert!(env.path("venv/bin").is_dir(), "{}", out.stderr);
}

/// `cc ARGS` in `dir`; panics with the compiler's output when it fails.
fn cc(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("cc")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_library_the_step_puts_on_the_persons_library_path_before_the_hosts_is_removed() {
    let env = Env::new();
    // A host program and the library it loads from a host directory.
    let host = env.tmp.path().join("host");
    std::fs::create_dir_all(host.join("lib")).unwrap();
    std::fs::write(host.join("demo.c"), "int demo(void) { return 1; }\n").unwrap();
    std::fs::write(
        host.join("main.c"),
        "extern int demo(void);\nint main(void) { return demo() == 1 ? 0 : 3; }\n",
    )
    .unwrap();
    cc(
        &host,
        &[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libenvgitdemo.so",
            "-o",
            "lib/libenvgitdemo.so",
            "demo.c",
        ],
    );
    cc(&host, &["-o", "program", "main.c", "-Llib", "-lenvgitdemo"]);
    // The same library with a constructor, in the project (the person's file, harmless there).
    let marker = env.tmp.path().join("pwned");
    env.write(
        "vendor/evil.c",
        &format!(
            "#include <stdio.h>\n\
             __attribute__((constructor)) static void pwn(void) {{\n\
               FILE *f = fopen(\"{}\", \"a\"); if (f) {{ fputs(\"pwned\\n\", f); fclose(f); }}\n\
             }}\n\
             int demo(void) {{ return 1; }}\n",
            marker.display()
        ),
    );
    cc(
        &env.project,
        &["-shared", "-fPIC", "-o", "vendor/evil.so", "vendor/evil.c"],
    );
    env.envgit(&["init"]).ok();
    // The person builds into the project's build/lib and has it first on LD_LIBRARY_PATH.
    let library_path = format!(
        "{}:{}",
        env.path("build/lib").display(),
        host.join("lib").display()
    );
    let out = step_with(
        &env,
        "LD_LIBRARY_PATH",
        &library_path,
        "mkdir -p build/lib && cp vendor/evil.so build/lib/libenvgitdemo.so && \
                 cp vendor/evil.so build/lib/libtheprojectsown.so && echo planted",
    );
    let ran = Command::new(host.join("program"))
        .env("LD_LIBRARY_PATH", &library_path)
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the host's program loaded the library the step planted (exit {:?})\n{}",
        ran.status.code(),
        out.stderr
    );
    assert!(ran.status.success(), "{ran:?}");
    assert!(
        out.stderr.contains("build/lib/libenvgitdemo.so")
            && out.stderr.contains("LD_LIBRARY_PATH")
            && out.stderr.contains("filesystem.path-shadow"),
        "{}",
        out.stderr
    );
    assert!(env.path("build/lib/libtheprojectsown.so").exists());
}

/// The person has the project's `src` on `PYTHONPATH` (a direnv `export PYTHONPATH=src`, a
/// Python project's habit): a step puts `json.py`, a package `email/` and the start-up hooks
/// `sitecustomize.py` and `usercustomize.py` (which no library ships) there, each writing a
/// marker when imported. Both go after the step, so the host's own Python (and `pip`, and
/// every Python tool) imports the library's modules; the project's own module, a namespace
/// directory named like a library module, and a library-named module the person already had
/// there stay.
#[test]
fn a_module_the_step_puts_on_the_persons_pythonpath_before_the_librarys_is_removed() {
    let env = Env::new();
    let marker = env.tmp.path().join("pwned");
    // The module to plant, in the project (the person's file, harmless where it is).
    env.write(
        "vendor/evil.py",
        &format!(
            "open({:?}, 'a').write('pwned')\n",
            marker.display().to_string()
        ),
    );
    env.write(
        "src/calendar.py",
        "# the person's own, named like the library's\n",
    );
    env.envgit(&["init"]).ok();
    let pythonpath = env.path("src").display().to_string();
    let out = step_with(
        &env,
        "PYTHONPATH",
        &pythonpath,
        "cp vendor/evil.py src/json.py && mkdir -p src/email src/test \
                 && cp vendor/evil.py src/email/__init__.py \
                 && cp vendor/evil.py src/sitecustomize.py && cp vendor/evil.py src/usercustomize.py \
                 && echo 'X = 1' > src/mytool.py && touch src/test/notes.txt && echo planted",
    );
    let host = Command::new("python3")
        .args(["-c", "import json, email.message, calendar, mytool"])
        .env("PYTHONPATH", &pythonpath)
        .current_dir(env.tmp.path())
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the host's Python imported the module the step planted\n{}",
        out.stderr
    );
    assert!(host.status.success(), "{host:?}");
    for gone in [
        "src/json.py",
        "src/email",
        "src/sitecustomize.py",
        "src/usercustomize.py",
    ] {
        assert!(!env.path(gone).exists(), "{gone}\n{}", out.stderr);
        assert!(out.stderr.contains(gone), "{gone}\n{}", out.stderr);
    }
    assert!(
        out.stderr.contains("PYTHONPATH") && out.stderr.contains("filesystem.path-shadow"),
        "{}",
        out.stderr
    );
    for kept in ["src/mytool.py", "src/test/notes.txt", "src/calendar.py"] {
        assert!(env.path(kept).exists(), "{kept}\n{}", out.stderr);
    }
}

/// The person has the project's `lib` on `PERL5LIB` (`prove -l`'s habit, a direnv export): a
/// step puts a `strict.pm` there that writes a marker when loaded. It goes after the step, so
/// the host's Perl programs (nearly all say `use strict`) load Perl's own; the project's own
/// module and a Perl-named one the person already had there stay.
#[test]
fn a_module_the_step_puts_on_the_persons_perl5lib_before_perls_is_removed() {
    module_on_the_perl_path_is_removed("PERL5LIB");
}

/// Perl reads `PERLLIB` when `PERL5LIB` is unset, the same way.
#[test]
fn a_module_the_step_puts_on_the_persons_perllib_before_perls_is_removed() {
    module_on_the_perl_path_is_removed("PERLLIB");
}

/// A step puts a `strict.pm` in the project's `lib`, on the person's `var`.
fn module_on_the_perl_path_is_removed(var: &str) {
    let env = Env::new();
    let marker = env.tmp.path().join("pwned");
    env.write(
        "vendor/evil.pm",
        &format!(
            "package strict; BEGIN {{ open(my $f, '>>', {:?}); print $f \"pwned\\n\"; }} \
             sub import {{}} 1;\n",
            marker.display().to_string()
        ),
    );
    env.write("lib/vars.pm", "package vars; sub import {} 1;\n");
    env.envgit(&["init"]).ok();
    let lib_dir = env.path("lib").display().to_string();
    let out = step_with(
        &env,
        var,
        &lib_dir,
        "cp vendor/evil.pm lib/strict.pm && echo 'package MyProject; 1;' > lib/MyProject.pm \
                 && echo planted",
    );
    let host = Command::new("perl")
        .args(["-e", "use strict; use MyProject; print qq(ok\\n)"])
        .env(var, &lib_dir)
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the host's Perl loaded the module the step planted\n{}",
        out.stderr
    );
    assert!(host.status.success(), "{host:?}");
    assert!(!env.path("lib/strict.pm").exists(), "{}", out.stderr);
    assert!(
        out.stderr.contains("lib/strict.pm")
            && out.stderr.contains(var)
            && out.stderr.contains("filesystem.path-shadow"),
        "{}",
        out.stderr
    );
    for kept in ["lib/MyProject.pm", "lib/vars.pm"] {
        assert!(env.path(kept).exists(), "{kept}\n{}", out.stderr);
    }
}

/// `RUBYLIB`: a `rubygems.rb` (which Ruby requires before every program) or a `json.rb` a
/// step puts in a directory of it is removed; the project's own features stay.
#[test]
fn a_feature_the_step_puts_on_the_persons_rubylib_before_rubys_is_removed() {
    let env = Env::new();
    let marker = env.tmp.path().join("pwned");
    let m = marker.display().to_string();
    env.write(
        "vendor/evil.rb",
        &format!("File.open({m:?}, \"a\") {{ |f| f.puts \"pwned\" }}\nmodule JSON; end\n"),
    );
    env.write("lib/existing.rb", "module Existing; end\n");
    env.envgit(&["init"]).ok();
    let lib_dir = env.path("lib").display().to_string();
    let out = step_with(
        &env,
        "RUBYLIB",
        &lib_dir,
        "cp vendor/evil.rb lib/rubygems.rb && cp vendor/evil.rb lib/json.rb \
         && echo 'module MyProject; end' > lib/my_project.rb && echo planted",
    );
    let host = Command::new("ruby")
        .args(["-e", "require 'json'; require 'my_project'; puts 'ok'"])
        .env("RUBYLIB", &lib_dir)
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the host's Ruby required what the step planted\n{}",
        out.stderr
    );
    assert!(host.status.success(), "{host:?}");
    for planted in ["lib/rubygems.rb", "lib/json.rb"] {
        assert!(!env.path(planted).exists(), "{planted}\n{}", out.stderr);
    }
    assert!(
        out.stderr.contains("RUBYLIB") && out.stderr.contains("filesystem.path-shadow"),
        "{}",
        out.stderr
    );
    for kept in ["lib/my_project.rb", "lib/existing.rb"] {
        assert!(env.path(kept).exists(), "{kept}\n{}", out.stderr);
    }
}

/// The person's own environment names project files their programs load or run
/// (`BASH_ENV`, Yarn's `NODE_OPTIONS=--require .pnp.cjs`, `LD_PRELOAD`, `GIT_CONFIG_GLOBAL`,
/// an `EDITOR` of the project's): a step that writes them must not run on the host at the
/// person's next shell, node, program, git or edit. The variables are set in envgit's
/// environment, as the person's shell hands them over.
#[test]
fn files_the_persons_environment_has_programs_load_are_protected() {
    let env = Env::new();
    let marker = env.tmp.path().join("pwned");
    let m = marker.display().to_string();
    let lib = env.tmp.path().join("lib-src");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("benign.c"), "void envgit_benign(void) {}\n").unwrap();
    std::fs::write(
        lib.join("evil.c"),
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) {{ \
             FILE *f = fopen({m:?}, \"a\"); if (f) {{ fputs(\"preload\\n\", f); fclose(f); }} }}\n"
        ),
    )
    .unwrap();
    cc(&lib, &["-shared", "-fPIC", "-o", "benign.so", "benign.c"]);
    cc(&lib, &["-shared", "-fPIC", "-o", "evil.so", "evil.c"]);
    env.write("a.txt", "a\n");
    // The person's `BASH_ENV`, which sources another file of the project, which sources one
    // more.
    env.write(".bashenv", "[ -f tools/env.sh ] && . tools/env.sh\n");
    env.write("tools/env.sh", "export PROJECT_MODE=dev\n. tools/more.sh\n");
    env.write("tools/more.sh", "export MORE=1\n");
    env.write(".pnp.cjs", "module.exports = {};\n");
    env.write("tools/gitconfig", "[user]\n\tname = Person\n");
    env.write("scripts/edit.sh", "#!/bin/sh\nexit 0\n");
    std::fs::set_permissions(
        env.path("scripts/edit.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::create_dir_all(env.path("build")).unwrap();
    std::fs::copy(lib.join("benign.so"), env.path("build/libhook.so")).unwrap();
    std::fs::copy(lib.join("evil.so"), env.path("vendor-evil.so")).unwrap();
    env.envgit(&["init"]).ok();
    let p = |rel: &str| env.path(rel).display().to_string();
    let vars = [
        ("BASH_ENV", p(".bashenv")),
        ("NODE_OPTIONS", format!("--require {}", p(".pnp.cjs"))),
        ("LD_PRELOAD", p("build/libhook.so")),
        ("GIT_CONFIG_GLOBAL", p("tools/gitconfig")),
        ("EDITOR", p("scripts/edit.sh")),
    ];
    let script = format!(
        "echo 'echo bash >> {m}' >> .bashenv; echo 'echo sourced >> {m}' >> tools/env.sh; \
         echo 'echo deeper >> {m}' >> tools/more.sh; \
         echo 'require(\"fs\").appendFileSync({m:?}, \"node\\n\");' >> .pnp.cjs; \
         cat vendor-evil.so > build/libhook.so; \
         printf '[alias]\\n\\thi = !echo git >> {m}\\n' >> tools/gitconfig; \
         mv scripts scripts-moved && mkdir scripts \
           && printf '#!/bin/sh\\necho editor >> {m}\\n' > scripts/edit.sh \
           && chmod +x scripts/edit.sh; \
         echo planted"
    );
    let mut step = env.cmd(&env.project);
    for (k, v) in &vars {
        step.env(k, v);
    }
    let out =
        Run::from(step.args(["run", "sh", "-c", &script]).output().unwrap()).ran_to("planted");
    // The person's next commands, with their environment.
    let host = |program: &str| {
        let mut c = Command::new("sh");
        c.args(["-c", program]).current_dir(&env.project);
        for (k, v) in &vars {
            c.env(k, v);
        }
        c.env("HOME", env.user_home());
        let ran = c.output().unwrap();
        format!("{program}: {}", String::from_utf8_lossy(&ran.stderr))
    };
    let said = [
        host("bash -c true"),
        host("node -e 0"),
        host("/bin/true"),
        host("git hi"),
        host("\"$EDITOR\" a.txt"),
    ]
    .join("\n");
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        ran.is_empty(),
        "the host ran what the step wrote into files the person's environment names: {ran}\n\
         {said}\n--- the step:\n{}",
        out.stderr
    );
    assert_eq!(env.read(".pnp.cjs"), "module.exports = {};\n");
    assert_eq!(env.read("tools/gitconfig"), "[user]\n\tname = Person\n");
    assert_eq!(
        env.read("tools/env.sh"),
        "export PROJECT_MODE=dev\n. tools/more.sh\n"
    );
    assert_eq!(env.read("tools/more.sh"), "export MORE=1\n");
    // Behind a renamed parent the write went through and was put back, saying why.
    assert!(
        out.stderr
            .contains("scripts/edit.sh changed during the step and was put back (protected path: EDITOR names it)"),
        "{}",
        out.stderr
    );
}

/// `git config --global core.hooksPath .githooks` (the person's own configuration, in their
/// home) makes every repository's `.githooks` its hooks: a hook a step writes there must not
/// run at the person's next commit, through the global setting or the environment's
/// (`GIT_CONFIG_COUNT`).
#[test]
fn the_hooks_directory_the_persons_own_git_configuration_names_is_protected() {
    for (how, dir) in [("global", ".githooks"), ("environment", "tools/hooks")] {
        let env = Env::new();
        let marker = env.tmp.path().join("pwned");
        std::fs::create_dir_all(env.user_home()).unwrap();
        let mut vars: Vec<(&str, &str)> = Vec::new();
        if how == "global" {
            std::fs::write(
                env.user_home().join(".gitconfig"),
                format!("[core]\n\thooksPath = {dir}\n"),
            )
            .unwrap();
        } else {
            vars = vec![
                ("GIT_CONFIG_COUNT", "1"),
                ("GIT_CONFIG_KEY_0", "core.hooksPath"),
                ("GIT_CONFIG_VALUE_0", dir),
            ];
        }
        env.git(&env.project, &["init", "-q", "-b", "main"]);
        env.write("a.txt", "a\n");
        env.envgit(&["init"]).ok();
        let script = format!(
            "mkdir -p {dir} && printf '#!/bin/sh\\necho pwned >> {m}\\n' > {dir}/pre-commit; \
             chmod +x {dir}/pre-commit; echo planted",
            m = marker.display()
        );
        let mut step = env.cmd(&env.project);
        step.envs(vars.iter().copied())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("GIT_CONFIG_GLOBAL");
        let out =
            Run::from(step.args(["run", "sh", "-c", &script]).output().unwrap()).ran_to("planted");
        let mut commit = env.host_git(&env.project);
        commit
            .envs(vars.iter().copied())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("GIT_CONFIG_GLOBAL")
            .args(["commit", "-q", "--allow-empty", "-m", "the person's commit"]);
        let committed = commit.output().unwrap();
        assert!(
            !marker.exists(),
            "{how}: the person's commit ran the hook the step wrote in {dir}\n{}\n--- the step:\n{}",
            String::from_utf8_lossy(&committed.stderr),
            out.stderr
        );
        assert!(committed.status.success(), "{how}: {committed:?}");
        assert!(!env.path(&format!("{dir}/pre-commit")).exists(), "{how}");
    }
}

/// The person's own `~/.gitconfig` runs project files (a `!` alias's script, a diff
/// driver's `textconv`) and reads one as configuration (`include.path`): a step that writes
/// them must not run on the host at the person's next `git st`, `git diff` or `git hi`.
#[test]
fn what_the_persons_own_git_configuration_runs_from_the_project_is_protected() {
    let env = Env::new();
    let marker = env.tmp.path().join("pwned");
    std::fs::create_dir_all(env.user_home()).unwrap();
    // Relative to the home, as git reads an include of ~/.gitconfig.
    let include = std::path::Path::new("..")
        .join(env.project.strip_prefix(env.tmp.path()).unwrap())
        .join("tools/extra.gitconfig");
    std::fs::write(
        env.user_home().join(".gitconfig"),
        format!(
            "[alias]\n\tst = !./tools/st.sh\n\tst2 = !sh tools/st2.sh -q\n[diff \"txt\"]\n\ttextconv = ./tools/textconv.sh\n\
             [include]\n\tpath = {}\n[init]\n\ttemplateDir = {}\n",
            include.display(),
            env.path("git-templates").display()
        ),
    )
    .unwrap();
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(env.path("git-templates/hooks")).unwrap();
    env.write("a.txt", "a\n");
    env.write(".gitattributes", "*.txt diff=txt\n");
    env.write("tools/extra.gitconfig", "[user]\n\tname = Person\n");
    for script in ["tools/st.sh", "tools/st2.sh", "tools/textconv.sh"] {
        env.write(script, "#!/bin/sh\ncat \"$@\"\n");
        std::fs::set_permissions(env.path(script), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    env.git(&env.project, &["add", "-A"]);
    env.git(&env.project, &["commit", "-q", "-m", "start"]);
    env.envgit(&["init"]).ok();
    let script = format!(
        "for s in tools/st.sh tools/st2.sh tools/textconv.sh; do \
           printf '#!/bin/sh\\necho pwned >> {m}\\n' > $s; done; \
         printf '[alias]\\n\\thi = !echo pwned >> {m}\\n' >> tools/extra.gitconfig; \
         printf '#!/bin/sh\\necho pwned >> {m}\\n' > git-templates/hooks/pre-commit; \
         chmod +x git-templates/hooks/pre-commit; \
         echo b >> a.txt; echo planted",
        m = marker.display()
    );
    let mut step = env.cmd(&env.project);
    step.env_remove("XDG_CONFIG_HOME")
        .env_remove("GIT_CONFIG_GLOBAL");
    let out =
        Run::from(step.args(["run", "sh", "-c", &script]).output().unwrap()).ran_to("planted");
    let mut said = String::new();
    // A repository the person makes later, from the template directory, and commits in.
    let later = env.tmp.path().join("later");
    for (dir, args) in [
        (&env.project, &["st"][..]),
        (&env.project, &["st2"]),
        (&env.project, &["diff"]),
        (&env.project, &["hi"]),
        (&env.project, &["init", "-q", later.to_str().unwrap()]),
        (&later, &["commit", "-q", "--allow-empty", "-m", "later"]),
    ] {
        let ran = env
            .host_git(dir)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("GIT_CONFIG_GLOBAL")
            .args(args)
            .output()
            .unwrap();
        said.push_str(&format!(
            "git {args:?}: {}\n",
            String::from_utf8_lossy(&ran.stderr)
        ));
    }
    assert!(
        !marker.exists(),
        "the person's git ran what the step wrote into files their configuration names \
         ({} times)\n{said}--- the step:\n{}",
        std::fs::read_to_string(&marker)
            .unwrap_or_default()
            .lines()
            .count(),
        out.stderr
    );
    assert_eq!(
        env.read("tools/extra.gitconfig"),
        "[user]\n\tname = Person\n"
    );
    assert_eq!(env.read("a.txt"), "a\nb\n", "the step's own edit stays");
}

/// `direnv ARGS` on the host as the person runs it: their home, their direnv allow list.
fn direnv(env: &Env) -> Command {
    let mut c = Command::new("direnv");
    c.current_dir(&env.project)
        .env("HOME", env.user_home())
        .env("XDG_DATA_HOME", env.user_home().join(".local/share"))
        .env("XDG_CONFIG_HOME", env.user_home().join(".config"))
        .env("XDG_CACHE_HOME", env.user_home().join(".cache"))
        .env_remove("DIRENV_DIR")
        .env_remove("DIRENV_FILE")
        .env_remove("DIRENV_DIFF")
        .env_remove("DIRENV_WATCHES");
    c
}

#[test]
fn what_the_persons_envrc_has_direnv_load_is_protected_like_the_envrc() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.write("tools/dev.sh", "export PROJECT_MODE=dev\n");
    env.write("flake.nix", "{ outputs = _: { }; }\n");
    env.write(
        ".envrc",
        "source_env tools/dev.sh\nPATH_add bin\nlayout node\nuse flake\n",
    );
    let allowed = direnv(&env).args(["allow", "."]).output().unwrap();
    assert!(allowed.status.success(), "{allowed:?}");
    env.envgit(&["init"]).ok();
    let sourced = env.tmp.path().join("sourced");
    let ran = env.tmp.path().join("ran");
    let script = format!(
        "printf 'echo pwned >> {s}\\n' >> tools/dev.sh; \
         printf '{{ outputs = _: {{ devShells = \"pwned\"; }}; }}\\n' > flake.nix; \
         mkdir -p bin .direnv && printf '#!/bin/sh\\necho pwned >> {r}\\n' > bin/git && chmod +x bin/git; \
         printf 'echo pwned >> {s}\\n' > .direnv/flake-profile-x.rc; echo planted",
        s = sourced.display(),
        r = ran.display()
    );
    // envgit started from outside the project: the person's PATH holds none of its directories
    // until direnv adds them at their next prompt there.
    let out = env
        .envgit_in(
            env.tmp.path(),
            &[
                "-C",
                &env.project.to_string_lossy(),
                "run",
                "sh",
                "-c",
                &script,
            ],
        )
        .ran_to("planted");
    // The person's next prompt in the project, and a `git` there.
    let loaded = direnv(&env)
        .args([
            "exec",
            ".",
            "sh",
            "-c",
            "echo mode=$PROJECT_MODE; git --version",
        ])
        .output()
        .unwrap();
    let said = format!(
        "{}\n--- direnv:\n{}",
        out.stderr,
        String::from_utf8_lossy(&loaded.stderr)
    );
    // direnv did load the person's `.envrc`, and with it their `tools/dev.sh`.
    assert!(
        String::from_utf8_lossy(&loaded.stdout).contains("mode=dev"),
        "{said}"
    );
    assert!(
        !sourced.exists(),
        "direnv sourced what the step wrote\n{said}"
    );
    assert!(
        !ran.exists(),
        "the host's `git` ran what the step put on the PATH\n{said}"
    );
    assert_eq!(env.read("flake.nix"), "{ outputs = _: { }; }\n", "{said}");
    assert!(!env.path(".direnv/flake-profile-x.rc").exists(), "{said}");
}

/// What a trusted mise configuration sources and puts on `PATH`, written in `mise.toml` or in
/// a file of its `conf.d/` directories, which mise merges.
#[test]
fn what_a_trusted_mise_configuration_loads_is_protected_like_it() {
    for config in [
        "mise.toml",
        "mise/conf.d/env.toml",
        ".config/mise/conf.d/env.toml",
    ] {
        what_a_trusted_mise_configuration_in_loads_is_protected(config);
    }
}

fn what_a_trusted_mise_configuration_in_loads_is_protected(config: &str) {
    let mise = mise();
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.write("scripts/env.sh", "export PROJECT_MODE=dev\n");
    env.write("mise.toml", "[env]\nPERSON = \"yes\"\n");
    env.write(
        config,
        "[env]\n_.source = \"scripts/env.sh\"\n_.path = [\"bin\"]\n",
    );
    let as_the_person = |args: &[&str]| as_the_person_with_mise(&env, &mise, args);
    let trusted = as_the_person(&[mise.to_str().unwrap(), "trust"]);
    assert!(trusted.status.success(), "{config}: {trusted:?}");
    env.envgit(&["init"]).ok();
    let sourced = env.tmp.path().join("sourced");
    let ran = env.tmp.path().join("ran");
    let attack = format!(
        "printf 'echo pwned >> {s}\\n' >> scripts/env.sh; \
         mkdir -p bin && printf '#!/bin/sh\\necho pwned >> {r}\\n' > bin/git && chmod +x bin/git; \
         echo planted",
        s = sourced.display(),
        r = ran.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &attack]).ran_to("planted");
    // The person's next prompt in the project, and a `git` there.
    let prompt = as_the_person(&[
        "bash",
        "-c",
        "eval \"$(\"$MISE_BIN\" hook-env -s bash)\"; echo mode=$PROJECT_MODE; git --version",
    ]);
    let said = format!("{config}: {}\n--- prompt:\n{prompt:?}", out.stderr);
    assert!(
        String::from_utf8_lossy(&prompt.stdout).contains("mode=dev"),
        "{said}"
    );
    assert!(
        !sourced.exists(),
        "mise sourced what the step wrote\n{said}"
    );
    assert!(
        !ran.exists(),
        "the host's `git` ran what the step put on mise's PATH\n{said}"
    );
}

#[test]
fn a_program_the_policy_lets_steps_put_on_the_path_stays() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    std::fs::create_dir_all(env.path(".venv/bin")).unwrap();
    env.envgit(&["init"]).ok();
    let yaml = env.read("envgit.yaml").replace(
        "# filesystem:\n#   deny_read:",
        "filesystem:\n  allow_shadowing: [git]\n#   deny_read:",
    );
    env.write("envgit.yaml", &yaml);
    let path = path_with_project_dirs(&env, &[".venv/bin"]);
    let out = step_with_path(
        &env,
        &path,
        "printf '#!/bin/sh\\necho the projects git\\n' > .venv/bin/git && chmod +x .venv/bin/git \
         && printf '#!/bin/sh\\n' > .venv/bin/ls && chmod +x .venv/bin/ls && echo planted",
    );
    assert!(env.path(".venv/bin/git").exists(), "{}", out.stderr);
    assert!(!env.path(".venv/bin/ls").exists(), "{}", out.stderr);
}

/// Protected paths too large to copy (a 65 MiB file in `.vscode/`) refuse the run before its
/// command starts: exit 2, the path and what to do said, the command never run, no step and
/// no copy left for the next command to take for an interrupted step's.
#[test]
fn protected_paths_too_large_to_copy_refuse_the_run_and_leave_nothing() {
    let env = project();
    let big = env.path(".vscode/big.bin");
    std::fs::create_dir_all(big.parent().unwrap()).unwrap();
    std::fs::File::create(&big)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    let out = env.envgit(&["run", "sh", "-c", "echo ran > ran.txt"]);
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(".vscode") && out.stderr.contains("make them smaller"),
        "{}",
        out.stderr
    );
    assert!(!env.path("ran.txt").exists(), "the command ran");
    // Its edits before the run are the person's (a step of their own); the run left none.
    let runs = |log: &[serde_json::Value]| {
        log.iter()
            .filter(|s| s.to_string().contains("echo ran"))
            .count()
    };
    assert_eq!(runs(&env.log_json()), 0, "the refused run left a step");

    std::fs::remove_file(&big).unwrap();
    let out = env.envgit(&["run", "sh", "-c", "echo ran > ran.txt"]).ok();
    assert!(!out.stderr.contains("put back"), "{}", out.stderr);
    assert_eq!(env.read("ran.txt"), "ran\n");
    let log = env.log_json();
    assert_eq!(runs(&log), 1, "{log:?}");
    let leftover: Vec<_> = std::fs::read_dir(env.store_dir().join("guard"))
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(leftover.is_empty(), "copies left behind: {leftover:?}");
}

/// A run refused during its set-up after its protected copy was taken (more files hard-linked
/// out of the project than it binds) leaves no copy behind: the next run finds nothing to put
/// back.
#[test]
fn a_run_refused_during_its_set_up_leaves_no_protected_copy() {
    let env = project();
    let outside = env.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(env.path("linked")).unwrap();
    for i in 0..4097 {
        let f = outside.join(format!("f{i}"));
        std::fs::write(&f, "x").unwrap();
        std::fs::hard_link(&f, env.path(&format!("linked/f{i}"))).unwrap();
    }
    let out = env.envgit(&["run", "sh", "-c", "echo ran > ran.txt"]);
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(!env.path("ran.txt").exists(), "the command ran");
    let guard = env.store_dir().join("guard");
    let leftover: Vec<_> = std::fs::read_dir(&guard)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(leftover.is_empty(), "copies left behind: {leftover:?}");

    std::fs::remove_dir_all(env.path("linked")).unwrap();
    let out = env.envgit(&["run", "sh", "-c", "echo ran > ran.txt"]).ok();
    assert!(!out.stderr.contains("put back"), "{}", out.stderr);
    assert_eq!(env.read("ran.txt"), "ran\n");
}

/// The step plants `.github/hooks/hooks.json` behind a renamed parent and commits, so the
/// git layer's import has state to save; the save then fails (the host makes its temporary a
/// directory, standing in for the disk the step filled). The step fails, and its protected
/// paths are put back all the same, and the hook it planted in a repository it made inside
/// the project is removed: an import that fails never leaves what the step planted.
#[test]
fn a_git_import_that_fails_still_puts_the_protected_paths_back() {
    let env = project();
    let marker = env.tmp.path().join("MARKER");
    let attack = tamper(
        &marker,
        &pausing(
            "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m step \
             && git init -q libs/y && cp planted-hook libs/y/.git/hooks/pre-commit",
        ),
    );
    let child = started_until_go(env.cmd(&env.project), &env, &attack);
    assert!(env.read(".github/hooks/hooks.json").contains("pwned"));
    let layers: Vec<_> = std::fs::read_dir(env.store_dir().join("gitlayer"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(layers.len(), 1, "{layers:?}");
    std::fs::create_dir(layers[0].join("layer.json.tmp")).unwrap();
    go(&env);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the import's failure went unsaid: {stderr}"
    );
    assert!(stderr.contains("layer.json.tmp"), "{stderr}");
    assert_eq!(
        env.read(".github/hooks/hooks.json"),
        ORIGINAL_TASKS,
        "{stderr}"
    );
    assert_eq!(hook_of(&env), ORIGINAL_HOOK);
    assert!(
        !env.path("libs/y/.git/hooks/pre-commit").exists(),
        "a failed import left the hook planted in a repository inside the project: {stderr}"
    );
    std::fs::remove_dir(layers[0].join("layer.json.tmp")).ok();
    env.host_commit_runs_no_planted_hook(&marker);
}

/// One protected path that cannot be put back (here made immutable on the host mid-step,
/// standing in for a disk the step filled) does not stop the others: the `.envrc` planted
/// beside it, the program planted on the person's PATH and the hook planted in a repository
/// the step made inside the project are still removed, and the step
/// fails naming the one that stayed; its copy is
/// kept, and the next command puts that one back once it can. Needs
/// `chattr +i` (root on ext4 and most filesystems); says so and passes without it.
#[test]
fn one_protected_path_that_cannot_be_put_back_does_not_stop_the_others() {
    let env = project();
    let marker = env.tmp.path().join("MARKER");
    let attack = tamper(
        &marker,
        &pausing(
            "printf 'export X=1\\n' > .envrc \
             && mkdir -p bin && printf '#!/bin/sh\\necho pwned\\n' > bin/ls && chmod 755 bin/ls \
             && git init -q libs/x && cp planted-hook libs/x/.git/hooks/pre-commit",
        ),
    );
    let mut run = env.cmd(&env.project);
    run.env("PATH", path_with_project_dirs(&env, &["bin"]));
    let child = started_until_go(run, &env, &attack);
    let planted = env.path(".github/hooks/hooks.json");
    let immutable = Command::new("chattr")
        .arg("+i")
        .arg(&planted)
        .output()
        .is_ok_and(|o| o.status.success());
    go(&env);
    let out = child.wait_with_output().unwrap();
    if !immutable {
        eprintln!("skipped: `chattr +i` is not available here");
        return;
    }
    let _ = Command::new("chattr").arg("-i").arg(&planted).status();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(".github/hooks"), "{stderr}");
    assert!(
        !env.path(".envrc").exists(),
        "a failed put-back left the .envrc planted beside it: {stderr}"
    );
    assert!(
        !env.path("bin/ls").exists(),
        "a failed put-back left the program planted on the PATH: {stderr}"
    );
    assert!(
        !env.path("libs/x/.git/hooks/pre-commit").exists(),
        "a failed put-back left the hook planted in a repository inside the project: {stderr}"
    );
    assert_eq!(hook_of(&env), ORIGINAL_HOOK);
    // The copy outlived the failed step: once the path can be written again, the next
    // command puts it back, as after a kill.
    let log = env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(log.stderr.contains("put back"), "{}", log.stderr);
    assert_eq!(env.read(".github/hooks/hooks.json"), ORIGINAL_TASKS);
}

/// `kill -9` of envgit while the step runs, after it put a `git` on the person's `PATH` ahead
/// of the host's: nothing of envgit swept the `PATH` at the step's end, so the next envgit
/// command does, before anything else (and the run after it would otherwise take the planted
/// `git` for the person's own).
#[test]
fn after_a_kill_9_a_program_the_step_put_on_the_persons_path_is_removed() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.write(".venv/bin/activate", "# the venv's\n");
    env.envgit(&["init"]).ok();
    let path = path_with_project_dirs(&env, &[".venv/bin"]);
    let marker = env.tmp.path().join("pwned");
    let plant = format!(
        "printf '#!/bin/sh\\necho pwned >> {m}\\n' > .venv/bin/git && chmod +x .venv/bin/git",
        m = marker.display()
    );
    let mut run = env.cmd(&env.project);
    run.env("PATH", &path);
    support::mid_step::killed_once_planted(run, &env, &plant);
    // The person's next envgit command, with the same PATH, then a run of theirs.
    let log = Run::from(
        env.cmd(&env.project)
            .env("PATH", &path)
            .args(["log", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(log.code, 0, "{}", log.stderr);
    step_with_path(&env, &path, "echo planted");
    host_runs_nothing_planted(&env, &path, &["git --version"], &marker, &log);
    assert!(
        log.stderr.contains(".venv/bin/git") && log.stderr.contains("filesystem.path-shadow"),
        "{}",
        log.stderr
    );
}

/// Every file below `dir` with a setuid or setgid bit, never through a link.
fn setid_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                todo.push(e.path());
            } else if m.permissions().mode() & 0o6000 != 0 {
                found.push(e.path());
            }
        }
    }
    found
}

/// A setuid or setgid file a step leaves is its owner's program (or group's) for whoever runs
/// it on the host: a setuid-root one in root's own project. Refused at the source, wherever
/// the step writes: in the project and in the excluded directories no snapshot checks
/// (`node_modules/`, `target/`), by `chmod`, `install -m`, `cp -p`, `mknod` and a file
/// created with the mode.
#[test]
fn a_step_leaves_no_setuid_or_setgid_file_anywhere() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.envgit(&["init"]).ok();
    let out = step_with(
        &env,
        "ENVGIT_TEST",
        "1",
        "mkdir -p node_modules/.bin target; \
         cp /bin/true node_modules/.bin/t && chmod u+s node_modules/.bin/t; \
         cp /bin/true target/g && chmod 2755 target/g; \
         install -m 4755 /bin/true target/i; \
         cp /bin/true ./p && chmod 4755 ./p; cp -p ./p target/copied; \
         python3 -c 'import os; os.close(os.open(\"target/o\", os.O_CREAT | os.O_WRONLY, 0o4755))'; \
         python3 -c 'import os, stat; os.mknod(\"node_modules/n\", stat.S_IFREG | 0o6755)'; \
         python3 -c 'import os; fd = os.open(\"target\", os.O_TMPFILE | os.O_WRONLY, 0o4755); \
         os.link(f\"/proc/self/fd/{fd}\", \"target/tmpfile\", follow_symlinks=True)'; \
         echo planted",
    );
    let left = setid_files(&env.project);
    assert!(
        left.is_empty(),
        "the step left setuid or setgid files on the host: {left:?}\n{}{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stderr.contains("Operation not permitted"),
        "{}",
        out.stderr
    );
    // Not an attack: plain modes still work, at creation and by chmod.
    let plain = step_with(
        &env,
        "ENVGIT_TEST",
        "1",
        "python3 -c 'import os; os.close(os.open(\"target/plain\", os.O_CREAT | os.O_WRONLY, 0o755))' \
         && chmod 700 target/plain && chmod +x node_modules/.bin/t && echo planted",
    );
    assert!(plain.stdout.contains("planted"), "{}", plain.stderr);
}
