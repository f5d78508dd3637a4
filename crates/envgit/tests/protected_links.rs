//! A protected path reached through a symbolic link into the project: `.git/hooks ->
//! ../tools/hooks` (a team's hooks kept under version control), a hook that is a link to a
//! script, `.vscode` or a parent of `.github/hooks` linked to a directory of the project. The
//! host's git and editors follow those links, so what they point to is protected too: each
//! attack below writes the link's target inside `envgit run` (directly, through the link, and
//! behind a renamed parent), and then the host's own git or the file itself shows what the host
//! would run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use support::Env;

const ORIGINAL_HOOK: &str = "#!/bin/sh\nexit 0\n";
const ORIGINAL_TASKS: &str = "{\"version\": \"2.0.0\", \"tasks\": []}\n";

/// A git project whose files are committed, with `envgit init` done after `arrange`.
fn project(arrange: impl FnOnce(&Env)) -> Env {
    let env = Env::new();
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    env.write("a.txt", "a\n");
    arrange(&env);
    env.git(&env.project, &["add", "-A"]);
    env.git(&env.project, &["commit", "-q", "-m", "start"]);
    env.envgit(&["init"]).ok();
    env
}

fn executable(env: &Env, rel: &str, content: &str) {
    env.write(rel, content);
    std::fs::set_permissions(env.path(rel), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `printf` of a hook that leaves `marker` behind when the host runs it, into `dest`.
fn plant(marker: &Path, dest: &str) -> String {
    format!(
        "printf '#!/bin/sh\\necho pwned >> {m}\\n' > {dest}; chmod +x {dest} 2>/dev/null",
        m = marker.display()
    )
}

/// Runs `attack` as one step; it must have run to its end (`planted`).
fn run_attack(env: &Env, attack: &str) -> support::Run {
    env.envgit(&["run", "sh", "-c", &format!("{attack}; echo planted")])
        .ran_to("planted")
}

#[test]
fn a_hooks_directory_linked_into_the_project_keeps_the_users_hooks() {
    let env = project(|env| {
        executable(env, "tools/hooks/pre-commit", ORIGINAL_HOOK);
        std::fs::remove_dir_all(env.path(".git/hooks")).unwrap();
        symlink("../tools/hooks", env.path(".git/hooks")).unwrap();
    });
    let marker = env.tmp.path().join("MARKER");
    // Through the link, then the target itself, then a fresh directory where the target was.
    let attack = [
        plant(&marker, ".git/hooks/pre-commit"),
        plant(&marker, "tools/hooks/pre-commit"),
        format!(
            "mv tools tools.old && mkdir -p tools/hooks && {}",
            plant(&marker, "tools/hooks/pre-commit")
        ),
    ]
    .join("; ");
    let out = run_attack(&env, &attack);
    assert_eq!(
        std::fs::read_to_string(env.path(".git/hooks/pre-commit")).unwrap(),
        ORIGINAL_HOOK,
        "{}",
        out.stderr
    );
    env.host_commit_runs_no_planted_hook(&marker);
}

#[test]
fn a_hook_linked_to_a_script_of_the_project_keeps_the_script() {
    let env = project(|env| {
        executable(env, "scripts/pre-commit.sh", ORIGINAL_HOOK);
        symlink(
            "../../scripts/pre-commit.sh",
            env.path(".git/hooks/pre-commit"),
        )
        .unwrap();
    });
    let marker = env.tmp.path().join("MARKER");
    let attack = [
        plant(&marker, "scripts/pre-commit.sh"),
        format!(
            "rm -f scripts/pre-commit.sh; {}",
            plant(&marker, "scripts/pre-commit.sh")
        ),
    ]
    .join("; ");
    let out = run_attack(&env, &attack);
    assert_eq!(
        env.read("scripts/pre-commit.sh"),
        ORIGINAL_HOOK,
        "{}",
        out.stderr
    );
    env.host_commit_runs_no_planted_hook(&marker);
}

/// Editor and agent configuration reached through a link: `.vscode` itself, and `.github`, a
/// parent of the protected `.github/hooks`.
#[test]
fn editor_configuration_behind_a_link_is_kept() {
    let env = project(|env| {
        env.write("config/vscode/tasks.json", ORIGINAL_TASKS);
        symlink("config/vscode", env.path(".vscode")).unwrap();
        env.write("ci/github/hooks/hooks.json", ORIGINAL_TASKS);
        symlink("ci/github", env.path(".github")).unwrap();
    });
    let planted = "{\"tasks\": [{\"command\": \"touch PWNED\", \"runOptions\": {\"runOn\": \"folderOpen\"}}]}";
    let attack = format!(
        "printf '%s' '{planted}' > config/vscode/tasks.json; \
         printf '%s' '{planted}' > .github/hooks/hooks.json"
    );
    let out = run_attack(&env, &attack);
    assert_eq!(
        env.read(".vscode/tasks.json"),
        ORIGINAL_TASKS,
        "{}",
        out.stderr
    );
    assert_eq!(
        env.read(".github/hooks/hooks.json"),
        ORIGINAL_TASKS,
        "{}",
        out.stderr
    );
    // The links themselves are the user's, left as they were.
    assert_eq!(
        std::fs::read_link(env.path(".vscode")).unwrap(),
        Path::new("config/vscode")
    );
}

/// The project's other files stay writable: only what a protected path reaches is kept.
#[test]
fn the_rest_of_the_project_stays_writable() {
    let env = project(|env| {
        executable(env, "tools/hooks/pre-commit", ORIGINAL_HOOK);
        env.write("tools/build.sh", "echo build\n");
        std::fs::remove_dir_all(env.path(".git/hooks")).unwrap();
        symlink("../tools/hooks", env.path(".git/hooks")).unwrap();
    });
    let out = run_attack(&env, "echo 'echo built' > tools/build.sh && echo wrote");
    assert!(
        out.stdout.contains("wrote"),
        "{} {}",
        out.stdout,
        out.stderr
    );
    assert_eq!(env.read("tools/build.sh"), "echo built\n");
    assert!(
        !out.stderr.contains("put back"),
        "nothing protected changed: {}",
        out.stderr
    );
}
