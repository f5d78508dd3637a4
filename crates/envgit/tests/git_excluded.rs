//! Repositories inside the directories `snapshot.exclude` leaves out (`target/`,
//! `node_modules/`, `.venv/`): no snapshot holds them, yet the person's git runs their
//! configuration and hooks there (a shell prompt's `git status` on `cd`, an editor opening
//! each repository it finds below the project). Each test plants that code for real inside
//! `envgit run`, then runs the host's git in the repository.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use support::Env;

/// A git project with envgit's default excludes, initialised.
fn project() -> Env {
    let env = Env::new();
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    env.init();
    env
}

/// The host's git in `repo` as a person's prompt and editor run it, then a commit there: none
/// may run what the step planted, which would write `marker`.
fn persons_git_runs_nothing(env: &Env, repo: &Path, marker: &Path, said: &str) {
    // `status` runs `core.fsmonitor`; a commit runs the hooks.
    let _ = env.host_git(repo).args(["status"]).output().unwrap();
    let _ = env
        .host_git(repo)
        .args(["commit", "-q", "--allow-empty", "-m", "person"])
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the host's git in {} ran what the step planted: {said}",
        repo.display()
    );
}

/// What a step plants in a repository it makes at `dir` (relative): a `core.fsmonitor` and a
/// `pre-commit` hook, each writing `marker`.
fn new_repository_with_code(dir: &str, marker: &Path) -> String {
    let m = marker.display();
    format!(
        "mkdir -p {dir} && git -C {dir} init -q && \
         git -C {dir} config core.fsmonitor 'touch {m}; false' && \
         printf '#!/bin/sh\\ntouch {m}\\n' > {dir}/.git/hooks/pre-commit && \
         chmod +x {dir}/.git/hooks/pre-commit && echo planted {dir}"
    )
}

/// A repository the step makes in an excluded directory (a new `target/`, deep in
/// `node_modules/`, in `.venv/`) keeps its objects but loses what git would run.
#[test]
fn a_repository_a_step_makes_in_an_excluded_directory_runs_nothing_on_the_host() {
    for dir in ["target", "node_modules/left-pad/lib", ".venv/src/pkg"] {
        let env = project();
        let marker = env.tmp.path().join("MARKER");
        let out = env.attack(&new_repository_with_code(dir, &marker));
        let said = format!("{dir}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains(&format!("planted {dir}")), "{said}");
        persons_git_runs_nothing(&env, &env.path(dir), &marker, &said);
        assert!(
            out.stderr
                .contains(&format!("{dir}/.git/config core.fsmonitor"))
                && out.stderr.contains(&format!("{dir}/.git/hooks/pre-commit"))
                && out.stderr.contains("rule git.data-only"),
            "{said}"
        );
        assert!(env.path(dir).join(".git/HEAD").exists(), "{said}");
        let refused = env.log_json()[0]["refusals"].to_string();
        assert!(refused.contains("git.data-only"), "{refused}");
    }
}

/// A `gitdir:` file the step plants in an excluded directory, pointing at a git directory it
/// laid out there (`HEAD`, `objects/`, `refs/`, a `config`): git in the first directory
/// runs the second's `core.fsmonitor`. Both go.
#[test]
fn a_gitdir_file_to_a_layout_the_step_made_runs_nothing_on_the_host() {
    let env = project();
    let marker = env.tmp.path().join("MARKER");
    let m = marker.display();
    let out = env.attack(&format!(
        "mkdir -p node_modules/b/objects node_modules/b/refs node_modules/c && \
         echo 'ref: refs/heads/main' > node_modules/b/HEAD && \
         printf '[core]\\n\\tfsmonitor = touch {m}; false\\n' > node_modules/b/config && \
         echo 'gitdir: ../b' > node_modules/c/.git && echo planted"
    ));
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("planted"), "{said}");
    persons_git_runs_nothing(&env, &env.path("node_modules/c"), &marker, &said);
    let _ = env
        .host_git(&env.path("node_modules/b"))
        .args(["log"])
        .output()
        .unwrap();
    assert!(!marker.exists(), "{said}");
    assert!(!env.path("node_modules/c/.git").exists(), "{said}");
    assert!(
        out.stderr.contains("node_modules/b/config core.fsmonitor"),
        "{said}"
    );
}

/// A repository the person had in an excluded directory before the step (`pip install -e
/// git+…` keeps one in `.venv/src/`): what the step changes of its code goes back to what it
/// was, its own hook and remote included; the work the step did there (a commit) stays.
#[test]
fn a_repository_that_was_there_before_gets_its_code_back_and_keeps_the_steps_work() {
    let env = project();
    let repo = env.path(".venv/src/pkg");
    std::fs::create_dir_all(&repo).unwrap();
    env.git(&repo, &["init", "-q", "-b", "main"]);
    env.git(
        &repo,
        &["config", "remote.origin.url", "https://example.com/pkg"],
    );
    env.git(&repo, &["commit", "-q", "--allow-empty", "-m", "first"]);
    let hook = repo.join(".git/hooks/pre-commit");
    std::fs::write(&hook, "#!/bin/sh\necho the person's own hook\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.envgit(&["record"]).ok();
    let marker = env.tmp.path().join("MARKER");
    let m = marker.display();
    let out = env.attack(&format!(
        "cd .venv/src/pkg && git config core.fsmonitor 'touch {m}; false' && \
         printf 'touch {m}\\n' >> .git/hooks/pre-commit && \
         git -c user.name=a -c user.email=b commit -q --allow-empty --no-verify -m second && \
         echo planted"
    ));
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("planted"), "{said}");
    assert_eq!(
        std::fs::read_to_string(&hook).unwrap(),
        "#!/bin/sh\necho the person's own hook\n",
        "{said}"
    );
    let config = std::fs::read_to_string(repo.join(".git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}\n{said}");
    assert!(
        config.contains("https://example.com/pkg"),
        "{config}\n{said}"
    );
    assert_eq!(
        env.git(&repo, &["log", "--format=%s"]),
        "second\nfirst\n",
        "{said}"
    );
    persons_git_runs_nothing(&env, &repo, &marker, &said);
    assert!(out.stderr.contains(".venv/src/pkg/.git/config"), "{said}");
}

/// What `pip install -e git+…` or a `git clone` into an excluded directory does is no news: the
/// clone keeps its remote, its objects and git's sample hooks, and nothing is said.
#[test]
fn a_clone_into_an_excluded_directory_keeps_its_remote_and_work_silently() {
    let env = project();
    let origin = env.tmp.path().join("origin");
    std::fs::create_dir_all(&origin).unwrap();
    env.git(&origin, &["init", "-q", "-b", "main"]);
    env.git(
        &origin,
        &["commit", "-q", "--allow-empty", "-m", "upstream"],
    );
    // Inside the project, where the sandbox sees it: a local clone, no network.
    let from = env.path("upstream.git");
    env.git(
        env.tmp.path(),
        &[
            "clone",
            "-q",
            "--bare",
            &origin.display().to_string(),
            &from.display().to_string(),
        ],
    );
    env.envgit(&["record"]).ok();
    let out = env.attack("git clone -q upstream.git .venv/src/up && echo cloned");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("cloned"), "{said}");
    let repo = env.path(".venv/src/up");
    assert!(
        env.git(&repo, &["remote", "get-url", "origin"])
            .contains("upstream.git"),
        "{said}"
    );
    assert_eq!(
        env.git(&repo, &["log", "--format=%s"]),
        "upstream\n",
        "{said}"
    );
    assert!(repo.join(".git/hooks/pre-commit.sample").exists(), "{said}");
    assert!(!out.stderr.contains("snapshot.exclude"), "{said}");
}

/// `kill -9` of envgit while the step runs: nothing of envgit ends the step, so the next
/// envgit command makes the end it owed. A repository the step made in an excluded directory
/// loses what git would run there too; the person's own repository there keeps its hook
/// (its copy goes back).
#[test]
fn after_a_kill_9_a_repository_the_step_made_in_an_excluded_directory_runs_nothing() {
    let env = project();
    let own = env.path(".venv/src/pkg");
    std::fs::create_dir_all(&own).unwrap();
    env.git(&own, &["init", "-q", "-b", "main"]);
    let hook = own.join(".git/hooks/pre-commit");
    let persons_hook = "#!/bin/sh\necho the person's own hook\n";
    std::fs::write(&hook, persons_hook).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.envgit(&["record"]).ok();
    let marker = env.tmp.path().join("MARKER");
    let plant = new_repository_with_code("target", &marker);
    support::mid_step::killed_once_planted(env.cmd(&env.project), &env, &plant);
    let log = env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    persons_git_runs_nothing(&env, &env.path("target"), &marker, &log.stderr);
    assert!(
        log.stderr.contains("target/.git/hooks/pre-commit")
            && log.stderr.contains("rule git.data-only"),
        "{}",
        log.stderr
    );
    assert_eq!(std::fs::read_to_string(&hook).unwrap(), persons_hook);
    let last = &log.json()[0];
    assert_eq!(last["kind"], "interrupted", "{last:#}");
    assert!(
        last["refusals"].to_string().contains("git.data-only"),
        "{last:#}"
    );
}
