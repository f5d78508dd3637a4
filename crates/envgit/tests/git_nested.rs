//! Repositories of the user's nested in the project (`libs/foo` with its own `.git`) are not
//! behind the git layer: their data stays as the step leaves it, but what would make the
//! user's git there read content other than what an id names does not. Each test forges that
//! data for real inside `envgit run`, then runs the host's git in the nested repository.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use support::Env;
use support::git_forge::{blob, forge_commit_graph, lfs_commit, lfs_path, lying_pack, scratch};
use support::mid_step::{go, killed_once_planted, pausing, started_until_go};

/// A git project holding `libs/foo`, a repository of its own with `build.sh` in `commits`
/// commits, recorded; with `small_files`, files over 16 bytes are markers in the snapshot (the
/// step's objects then can only be read from the project).
fn project_with_nested(commits: usize, small_files: bool) -> (Env, PathBuf) {
    project_with_nested_refs(commits, small_files, "files")
}

/// [`project_with_nested`] with the nested repository's refs kept the way `ref_format` says.
fn project_with_nested_refs(commits: usize, small_files: bool, ref_format: &str) -> (Env, PathBuf) {
    let env = Env::new();
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    let nested = env.path("libs/foo");
    std::fs::create_dir_all(&nested).unwrap();
    let format = format!("--ref-format={ref_format}");
    env.git(&nested, &["init", "-q", "-b", "main", &format]);
    for n in 0..commits {
        let text = if n == 0 {
            "echo hello\n".to_owned()
        } else {
            format!("echo hello {n}\n")
        };
        std::fs::write(nested.join("build.sh"), text).unwrap();
        env.git(&nested, &["add", "build.sh"]);
        env.git(&nested, &["commit", "-q", "-m", &format!("c{n}")]);
    }
    env.envgit(&["init"]).ok();
    if small_files {
        let yaml = env
            .read("envgit.yaml")
            .replace("  # max_file_size: 100MiB", "  max_file_size: 16B");
        env.write("envgit.yaml", &yaml);
        env.envgit(&["record"]).ok();
    }
    (env, nested)
}

fn run(env: &Env, script: &str) -> support::Run {
    let out = env.envgit(&["run", "sh", "-c", script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    out
}

/// What `git checkout -- build.sh` writes in `repo` on the host.
fn checked_out(env: &Env, repo: &std::path::Path) -> String {
    std::fs::remove_file(repo.join("build.sh")).unwrap();
    env.git(repo, &["checkout", "--", "build.sh"]);
    std::fs::read_to_string(repo.join("build.sh")).unwrap()
}

/// A pack whose index gives `build.sh`'s id to other content: the nested repository's
/// `git checkout` wrote that content. The pack and its index go back.
#[test]
fn a_pack_whose_index_lies_goes_back() {
    for small_files in [false, true] {
        let (env, nested) = project_with_nested(1, small_files);
        env.git(&nested, &["gc", "-q"]);
        // The repository's own packs are older than the step's (git searches newest first).
        env.sh("touch -d '1 hour ago' libs/foo/.git/objects/pack/*")
            .ok();
        let trusted = env.git(&nested, &["rev-parse", "HEAD:build.sh"]);
        lying_pack(&env, trusted.trim());
        let out = run(
            &env,
            "cp forged/pack-* libs/foo/.git/objects/pack/ && \
             echo planted: $(git -C libs/foo cat-file -p $(git -C libs/foo rev-parse HEAD:build.sh))",
        );
        let what = format!("small files {small_files}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("planted: echo PWNED"), "{what}");
        assert!(out.stderr.contains("verify-pack"), "{what}");
        assert_eq!(checked_out(&env, &nested), "echo hello\n", "{what}");
        env.git(&nested, &["fsck", "--no-dangling"]);
        // The packs of an honest `git gc` stay, checked from the project when the snapshot
        // could not hold them.
        let out = run(
            &env,
            "git -C libs/foo -c user.name=a -c user.email=b commit -q --allow-empty -m more && \
             git -C libs/foo gc -q && echo packed",
        );
        let what = format!("small files {small_files}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("packed"), "{what}");
        assert!(!out.stderr.contains(".pack"), "{what}");
        env.git(&nested, &["fsck", "--no-dangling"]);
        assert_eq!(env.git(&nested, &["log", "--oneline"]).lines().count(), 2);
    }
}

/// A loose object whose content hashes to another id would stand in for that object.
#[test]
fn a_loose_object_under_another_name_goes_back() {
    for small_files in [false, true] {
        let (env, nested) = project_with_nested(1, small_files);
        let other = scratch(&env);
        let evil = blob(&env, &other, "echo PWNED\n");
        let claimed = blob(&env, &other, "echo the real one\n");
        std::fs::copy(
            other.join(format!(".git/objects/{}/{}", &evil[..2], &evil[2..])),
            env.path("forged-object"),
        )
        .unwrap();
        let out = run(
            &env,
            &format!(
                "mkdir -p libs/foo/.git/objects/{dir} && \
             cp forged-object libs/foo/.git/objects/{dir}/{rest}",
                dir = &claimed[..2],
                rest = &claimed[2..]
            ),
        );
        assert!(
            out.stderr.contains("does not hash to its name"),
            "{}",
            out.stderr
        );
        let has = env.sh(&format!("git -C libs/foo cat-file -e {claimed}"));
        assert_ne!(
            has.code, 0,
            "the nested repository kept the step's object for {claimed}"
        );
        let path = format!(".git/objects/{}/{}", &claimed[..2], &claimed[2..]);
        assert!(!nested.join(path).exists());
    }
}

/// A commit-graph gives each commit its root tree, and git believes it over the commit
/// (`git status`, `git diff HEAD`, `git show`): one that gives the user's commit the step's
/// tree shows the user a history that is not theirs. What git derives from the objects (graphs,
/// multi-pack indexes, bitmaps, reverse indexes) goes back; git works without them.
#[test]
fn a_commit_graph_that_lies_goes_back() {
    let (env, nested) = project_with_nested(1, false);
    // The graph as git writes it for these commits, then given the step's tree for HEAD.
    let copy = env.tmp.path().join("copy");
    env.git(
        env.tmp.path(),
        &["clone", "-q", nested.to_str().unwrap(), "copy"],
    );
    env.git(&copy, &["commit-graph", "write", "--reachable"]);
    let evil = blob(&env, &copy, "echo PWNED\n");
    let tree = std::process::Command::new("sh")
        .args([
            "-c",
            &format!("printf '100644 blob {evil}\\tbuild.sh\\n' | git mktree"),
        ])
        .current_dir(&copy)
        .output()
        .unwrap();
    let tree = String::from_utf8(tree.stdout).unwrap().trim().to_owned();
    let head = env.git(&nested, &["rev-parse", "HEAD"]);
    let graph = std::fs::read(copy.join(".git/objects/info/commit-graph")).unwrap();
    std::fs::write(
        env.path("forged-graph"),
        forge_commit_graph(&graph, head.trim(), &tree),
    )
    .unwrap();
    let out = run(
        &env,
        "cd libs/foo && B=$(echo 'echo PWNED' | git hash-object -w --stdin) && \
         printf '100644 blob %s\\tbuild.sh\\n' $B | git mktree >/dev/null && \
         cp ../../forged-graph .git/objects/info/commit-graph && \
         echo inside: $(git status --short)",
    );
    assert!(out.stdout.contains("inside: M build.sh"), "{}", out.stdout);
    assert!(out.stderr.contains("commit-graph"), "{}", out.stderr);
    assert_eq!(env.git(&nested, &["status", "--short"]), "");
    assert!(!nested.join(".git/objects/info/commit-graph").exists());
}

/// A `shallow` file naming a commit the repository has hides the history behind it (and its
/// `git gc` would delete it); it goes back. A shallow clone the step makes keeps its own.
#[test]
fn a_shallow_file_cutting_history_goes_back_a_shallow_clone_stays() {
    for small_files in [false, true] {
        let (env, nested) = project_with_nested(3, small_files);
        let out = run(
            &env,
            "git -C libs/foo rev-parse HEAD~1 > libs/foo/.git/shallow && \
             echo inside: $(git -C libs/foo log --oneline | wc -l)",
        );
        let what = format!("small files {small_files}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("inside: 2"), "{what}");
        assert!(out.stderr.contains("libs/foo/.git/shallow"), "{what}");
        assert!(!nested.join(".git/shallow").exists(), "{what}");
        assert_eq!(
            env.git(&nested, &["log", "--oneline"]).lines().count(),
            3,
            "{what}"
        );

        let out = run(
            &env,
            "git clone -q --depth 1 file://$PWD/libs/foo vendor/x && echo cloned",
        );
        let what = format!("small files {small_files}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("cloned"), "{what}");
        // A clone is no news: its shallow boundary, its objects, and what git's template wrote
        // (sample hooks, a commented `info/exclude`) stay without a word. (With files over 16
        // bytes kept as markers, `info/exclude` cannot be read to be vouched for: it goes back.)
        let said: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.contains("vendor/x"))
            .collect();
        if small_files {
            assert!(
                said.iter().all(|l| l.contains("vendor/x/.git/info ")),
                "{what}"
            );
        } else {
            assert!(said.is_empty(), "{what}");
        }
        let x = env.path("vendor/x");
        assert!(x.join(".git/hooks/pre-commit.sample").exists(), "{what}");
        assert!(x.join(".git/shallow").exists(), "{what}");
        assert_eq!(env.git(&x, &["log", "--oneline"]).lines().count(), 1);
        env.git(&x, &["fsck", "--no-dangling"]);
    }
}

/// A repository of the user's inside the project (`libs/foo`, its own `.git`) is not behind
/// the layer: its data stays as the step leaves it. A replace ref there would make the user's
/// `git checkout` in it write the step's content: a loose one goes back alone (the step's
/// other refs there stay), a packed one with its `packed-refs`.
#[test]
fn a_replace_ref_in_a_nested_repository_is_put_back() {
    let (env, nested) = project_with_nested(1, false);
    let script = "cd libs/foo && X=$(git rev-parse HEAD:build.sh) && \
                  Y=$(echo 'echo PWNED' | git hash-object -w --stdin) && \
                  git replace $X $Y && git branch agent && echo replaced";
    let out = env.envgit(&["run", "sh", "-c", script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("replaced"), "{}", out.stdout);
    assert!(
        out.stderr.contains("libs/foo/.git/refs/replace"),
        "{}",
        out.stderr
    );
    assert!(!nested.join(".git/refs/replace").exists());
    env.git(&nested, &["rev-parse", "--verify", "agent"]);
    std::fs::remove_file(nested.join("build.sh")).unwrap();
    env.git(&nested, &["checkout", "--", "build.sh"]);
    assert_eq!(
        std::fs::read_to_string(nested.join("build.sh")).unwrap(),
        "echo hello\n"
    );

    // Packed (`git pack-refs`), it can only go back with the file that holds it.
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        &format!(
            "{} && git pack-refs --all",
            script.replace("branch agent", "branch agent2")
        ),
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("libs/foo/.git/packed-refs"),
        "{}",
        out.stderr
    );
    assert_eq!(env.git(&nested, &["replace", "-l"]), "");
    std::fs::remove_file(nested.join("build.sh")).unwrap();
    env.git(&nested, &["checkout", "--", "build.sh"]);
    assert_eq!(
        std::fs::read_to_string(nested.join("build.sh")).unwrap(),
        "echo hello\n"
    );
}

/// In a reftable repository the refs live in tables named by `reftable/tables.list`: one that
/// gained a replace ref goes back with its tables, whole.
#[test]
fn a_replace_ref_in_a_nested_reftable_goes_back() {
    let (env, nested) = project_with_nested_refs(1, false, "reftable");
    let out = run(
        &env,
        "cd libs/foo && X=$(git rev-parse HEAD:build.sh) && \
         Y=$(echo 'echo PWNED' | git hash-object -w --stdin) && \
         git replace $X $Y && echo inside: $(git cat-file -p $X)",
    );
    assert!(out.stdout.contains("inside: echo PWNED"), "{}", out.stdout);
    assert!(
        out.stderr.contains("libs/foo/.git/reftable"),
        "{}",
        out.stderr
    );
    assert_eq!(env.git(&nested, &["replace", "-l"]), "");
    assert_eq!(checked_out(&env, &nested), "echo hello\n");
    // An ordinary commit there arrives.
    let out = run(
        &env,
        "git -C libs/foo -c user.name=a -c user.email=b commit -q --allow-empty -m more && \
         echo committed",
    );
    assert!(!out.stderr.contains("reftable"), "{}", out.stderr);
    assert_eq!(env.git(&nested, &["log", "--oneline"]).lines().count(), 2);
}

/// Git LFS's smudge filter writes an object's file for a pointer without checking it: one the
/// step rewrote goes back, or, too large for the snapshot to hold, is removed (read from the
/// project to be checked).
#[test]
fn a_git_lfs_object_that_is_not_what_it_says_goes_back() {
    for small_files in [false, true] {
        let (env, nested) = project_with_nested(1, small_files);
        let oid = lfs_commit(&env, &nested, "a.bin", "the real content, 32 bytes long\n");
        let rel = format!("libs/foo/.git/{}", lfs_path(&oid));
        if small_files {
            // An object the repository lacks (not fetched yet), planted by the step: the
            // snapshot keeps only the size of a file over its limit, so a rewrite in place at
            // the same size is not seen there (the project's own `.git` is read in full).
            std::fs::remove_file(env.path(&rel)).unwrap();
        }
        env.envgit(&["record"]).ok();
        let out = run(
            &env,
            &format!("printf 'echo PWNED; the same size, 32 b\\n' > {rel} && echo planted"),
        );
        let what = format!("small files {small_files}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("planted"), "{what}");
        assert!(out.stderr.contains(&rel), "{what}");
        if small_files {
            assert!(!env.path(&rel).exists(), "{what}");
            continue;
        }
        std::fs::remove_file(nested.join("a.bin")).unwrap();
        env.git(&nested, &["checkout", "--", "a.bin"]);
        let checked_out = std::fs::read_to_string(nested.join("a.bin")).unwrap();
        assert_eq!(checked_out, "the real content, 32 bytes long\n", "{what}");
    }
}

/// A hook padded past `snapshot.max_file_size` is only a marker in the snapshot, and a restore
/// never touches a marker: the put-back said it put the hook back and left it there. It is
/// removed now (here with a 16-byte limit; the default is 100 MiB of padding).
#[test]
fn a_hook_too_large_for_the_snapshot_goes_too() {
    let (env, nested) = project_with_nested(1, true);
    let out = run(
        &env,
        "printf '#!/bin/sh\\necho PWNED-BY-HOOK\\n' > libs/foo/.git/hooks/pre-commit && \
         chmod +x libs/foo/.git/hooks/pre-commit && echo planted",
    );
    assert!(out.stdout.contains("planted"), "{}", out.stdout);
    assert!(out.stderr.contains("libs/foo/.git/hooks"), "{}", out.stderr);
    assert!(!nested.join(".git/hooks/pre-commit").exists());
    // The next step finds nothing of it as an edit of the user's.
    let out = run(&env, "true");
    assert!(!out.stderr.contains("your edits"), "{}", out.stderr);
}

/// A `packed-refs` too large for the snapshot is read from the project to look for replace
/// refs; one that gained one cannot be put back from the snapshot, so it goes (the
/// repository's packed refs with it: failing closed).
#[test]
fn a_packed_replace_ref_too_large_for_the_snapshot_goes_too() {
    let (env, nested) = project_with_nested(1, true);
    let out = run(
        &env,
        "cd libs/foo && X=$(git rev-parse HEAD:build.sh) && \
         Y=$(echo 'echo PWNED' | git hash-object -w --stdin) && \
         git replace $X $Y && git pack-refs --all && echo packed",
    );
    assert!(out.stdout.contains("packed"), "{}", out.stdout);
    assert!(
        out.stderr.contains("libs/foo/.git/packed-refs"),
        "{}",
        out.stderr
    );
    assert_eq!(env.git(&nested, &["replace", "-l"]), "");
}

/// `chattr +i` (or `-i`) on `paths`: whether it worked (root on ext4 and most filesystems).
fn chattr(flag: &str, paths: &[PathBuf]) -> bool {
    std::process::Command::new("chattr")
        .arg(flag)
        .args(paths)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The person's git in `nested` after the step: `git reset --hard`, then a commit of an edit
/// of theirs (which runs the repository's pre-commit hook); the hook's file as it is then.
fn persons_reset_and_commit(env: &Env, nested: &Path) -> String {
    persons_commit(env, nested, true);
    std::fs::read_to_string(nested.join(".husky/pre-commit")).unwrap_or_default()
}

/// The person's `git reset --hard` in `nested` (when `reset`), then their commit of an edit,
/// which runs the repository's pre-commit hook.
fn persons_commit(env: &Env, nested: &Path, reset: bool) {
    if reset {
        let _ = env
            .host_git(nested)
            .args(["reset", "-q", "--hard"])
            .output();
    }
    std::fs::write(nested.join("build.sh"), "echo the person's commit\n").unwrap();
    let _ = env
        .host_git(nested)
        .args(["commit", "-q", "-am", "person"])
        .output();
}
/// Runs the paused step `attack` ([`pausing`]) and makes the store's packs immutable while it
/// waits, standing in for a disk the step filled, so its snapshot fails; the output and what
/// it said. `None` without `chattr +i`.
fn run_with_a_failing_snapshot(env: &Env, attack: &str) -> Option<(Output, String)> {
    let child = started_until_go(env.cmd(&env.project), env, attack);
    let packs_dir = env.store_dir().join("packs");
    let mut packs: Vec<PathBuf> = std::fs::read_dir(&packs_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    packs.push(packs_dir);
    let immutable = chattr("+i", &packs);
    go(env);
    let out = child.wait_with_output().unwrap();
    chattr("-i", &packs);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    immutable.then_some((out, said))
}

/// The step plants a hook in the nested repository, makes a repository of its own with a
/// hook and a config that runs a program, and tries to leave a file setuid (refused by
/// seccomp, checked all the same); then the store cannot be written (its packs made immutable
/// on the host mid-step, standing in for a disk the step filled). The snapshot fails, so there is no tree after the step to diff: the step fails,
/// and its end compares the nested repositories with the tree before it, by content, and puts
/// their code back all the same. The host's git then runs nothing the step wrote. Needs
/// `chattr +i`; says so and passes without it.
#[test]
fn a_snapshot_that_fails_still_puts_the_nested_repositories_code_back() {
    let (env, nested) = project_with_nested(1, false);
    let marker = env.tmp.path().join("MARKER");
    let hook = format!("#!/bin/sh\\necho pwned >> {}\\n", marker.display());
    let attack = pausing(&format!(
        "printf '{hook}' > libs/foo/.git/hooks/pre-commit && chmod +x libs/foo/.git/hooks/pre-commit \
         && git init -q vendor/x && cp libs/foo/.git/hooks/pre-commit vendor/x/.git/hooks/post-checkout \
         && git -C vendor/x config core.fsmonitor 'echo pwned >> {m}; false' \
         && cp /bin/true setid-tool && (chmod u+s setid-tool || true)",
        m = marker.display()
    ));
    let Some((out, said)) = run_with_a_failing_snapshot(&env, &attack) else {
        eprintln!("skipped: `chattr +i` is not available here");
        return;
    };
    assert!(
        !out.status.success(),
        "the store's failure went unsaid: {said}"
    );
    assert!(
        !nested.join(".git/hooks/pre-commit").exists(),
        "a failed snapshot left the hook planted in the nested repository: {said}"
    );
    assert!(
        nested.join(".git/hooks/pre-commit.sample").exists(),
        "the nested repository's own hooks went with the planted one: {said}"
    );
    assert!(
        !env.path("vendor/x/.git/hooks/post-checkout").exists(),
        "a failed snapshot left the hook of the repository the step made: {said}"
    );
    let config = std::fs::read_to_string(env.path("vendor/x/.git/config")).unwrap_or_default();
    assert!(!config.contains("fsmonitor"), "{config}\n{said}");
    let mode = std::fs::metadata(env.path("setid-tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o6000, 0, "the setuid bit outlived the step: {said}");
    assert!(said.contains("put back"), "{said}");
    // The host's git, in both repositories.
    std::fs::write(nested.join("build.sh"), "echo changed\n").unwrap();
    env.git(&nested, &["commit", "-q", "-am", "host commit"]);
    env.git(&env.path("vendor/x"), &["status", "--short"]);
    assert!(
        !marker.exists(),
        "the host ran what the step planted: {said}"
    );
}

/// `envgit run sh -c PLANT` killed with `SIGKILL` once `plant` has run (an event: the step
/// touches `PLANTED` and waits).
fn killed_after(env: &Env, plant: &str) {
    killed_once_planted(env.cmd(&env.project), env, plant);
}

/// `kill -9` of envgit in the middle of a step that planted a hook in the nested repository:
/// nothing can run in envgit then, so the next envgit command checks the nested repositories
/// against the tree before the step, puts the hook back and says so on the interrupted step.
#[test]
fn after_a_kill_9_the_next_command_puts_the_nested_repositories_code_back() {
    let (env, nested) = project_with_nested(1, false);
    let marker = env.tmp.path().join("MARKER");
    killed_after(
        &env,
        &format!(
            "printf '#!/bin/sh\\necho pwned >> {m}\\n' > libs/foo/.git/hooks/pre-commit \
             && chmod +x libs/foo/.git/hooks/pre-commit",
            m = marker.display()
        ),
    );
    assert!(nested.join(".git/hooks/pre-commit").exists());
    let log = env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(
        !nested.join(".git/hooks/pre-commit").exists(),
        "the hook the killed step planted is still there: {}",
        log.stderr
    );
    assert!(log.stderr.contains("libs/foo/.git/hooks"), "{}", log.stderr);
    let steps = log.json();
    let last = &steps[0];
    assert_eq!(last["kind"], "interrupted", "{last:#}");
    assert!(
        last.to_string().contains("libs/foo/.git/hooks"),
        "the put-back is on the record: {last:#}"
    );
    std::fs::remove_file(env.path("PLANTED")).unwrap();
    std::fs::write(nested.join("build.sh"), "echo changed\n").unwrap();
    env.git(&nested, &["commit", "-q", "-am", "host commit"]);
    assert!(
        !marker.exists(),
        "the host ran the hook the killed step planted"
    );
}

/// A step stages a file in the nested repository, then renames its index entry
/// `.git/hooks/pre-commit` (fixing the index's checksum; the blob is genuine). Kept as data,
/// the user's `git restore .` there wrote the hook, executable, and their next commit there
/// ran it. The index goes back to its pre-step state.
#[test]
fn a_nested_index_entry_at_a_path_git_never_allows_goes_back() {
    let (env, nested) = project_with_nested(1, false);
    let marker = env.tmp.path().join("MARKER");
    let name = "-aaaaaaaaaaaaaaaaaaaa"; // as long as `.git/hooks/pre-commit`, sorted first
    let out = run(
        &env,
        &format!(
            "cd libs/foo && printf '#!/bin/sh\\necho pwned >> {m}\\n' > ./{name} && \
             chmod +x ./{name} && git add -- ./{name} && rm -- ./{name} && \
             /usr/bin/python3 -c \"import hashlib; d=open('.git/index','rb').read()[:-20]; \
             d=d.replace(b'{name}', b'.git/hooks/pre-commit'); \
             open('.git/index','wb').write(d+hashlib.sha1(d).digest())\" && \
             git ls-files && echo staged",
            m = marker.display()
        ),
    );
    assert!(
        out.stdout.contains("staged") && out.stdout.contains(".git/hooks/pre-commit"),
        "{}",
        out.stdout
    );
    // The user's git in the nested repository, as they run it next.
    let _ = env.host_git(&nested).args(["restore", "."]).output();
    let _ = env
        .host_git(&nested)
        .args(["checkout-index", "-a", "-f"])
        .output();
    assert!(
        !nested.join(".git/hooks/pre-commit").exists(),
        "the user's git wrote the agent's hook"
    );
    std::fs::write(nested.join("build.sh"), "echo changed\n").unwrap();
    env.git(&nested, &["commit", "-q", "-am", "user commit"]);
    assert!(
        !marker.exists(),
        "the user's git ran a hook the agent wrote"
    );
    assert!(
        out.stderr.contains("libs/foo/.git/index") && out.stderr.contains("verify_path"),
        "{}",
        out.stderr
    );
}

/// A project holding `libs/z`, a repository of its own whose husky hook is committed and run
/// by its git (`core.hooksPath=.husky`, set by the person), recorded.
fn project_with_nested_husky() -> (Env, PathBuf) {
    project_with_nested_hook(".husky/pre-commit", Some(".husky"), "files")
}

/// A project holding `libs/z`, a repository of its own (refs kept as `ref_format` says) with
/// `file` committed, executable, and `core.hooksPath` set to `hooks_path`, recorded.
fn project_with_nested_hook(
    file: &str,
    hooks_path: Option<&str>,
    ref_format: &str,
) -> (Env, PathBuf) {
    let env = Env::new();
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    let nested = env.path("libs/z");
    std::fs::create_dir_all(nested.join(file).parent().unwrap()).unwrap();
    let format = format!("--ref-format={ref_format}");
    env.git(&nested, &["init", "-q", "-b", "main", &format]);
    env.git(&nested, &["config", "user.name", "person"]);
    env.git(&nested, &["config", "user.email", "person@example.invalid"]);
    std::fs::write(nested.join(file), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(nested.join(file), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(nested.join("build.sh"), "echo hello\n").unwrap();
    env.git(&nested, &["add", "-A"]);
    env.git(&nested, &["commit", "-q", "-m", "hook"]);
    if let Some(hooks) = hooks_path {
        env.git(&nested, &["config", "core.hooksPath", hooks]);
    }
    env.envgit(&["init"]).ok();
    (env, nested)
}

/// A shell script's start, run in `libs/z`, that makes the agent's commit there without
/// moving `HEAD` or touching the index (its hook in `.husky/pre-commit`, appending to `$M`),
/// leaving `$b` its hook's blob, `$t` its `.husky` tree, `$c` the commit, `$h` the commit
/// `HEAD` names and `$who` an identity.
const NESTED_AGENTS_COMMIT: &str = "\
    b=$(printf '#!/bin/sh\\necho pwned >> %s\\n' \"$M\" | git hash-object -w --stdin) && \
    t=$(printf '100755 blob %s\\tpre-commit\\n' $b | git mktree) && \
    export GIT_INDEX_FILE=$PWD/.git/scratch-index && git read-tree HEAD && \
    git update-index --cacheinfo 100755,$b,.husky/pre-commit && \
    c=$(git commit-tree $(git write-tree) -p HEAD -m agent) && rm .git/scratch-index && \
    unset GIT_INDEX_FILE && h=$(git rev-parse HEAD) && \
    who='A <a@example.invalid> 1700000000 +0000'";

/// The class of the project's own git layer (`git_layer.rs`: a commit, index, pseudo-ref,
/// reflog, cache-tree, resolve-undo record or sparse directory entry naming another version of
/// a protected path), in a repository nested in the project: its `.git` is no overlay, the
/// put-back restores `libs/z/.husky/pre-commit` on disk, and the person's git there then wrote
/// the agent's hook (and their next commit ran it). Each must leave the person's git writing
/// and committing their own hook, and the step must say why.
#[test]
fn a_nested_repositorys_git_naming_its_hook_managers_change_goes_back() {
    // What each plants (in `libs/z`), the person's git there after it.
    let cases: [(&str, &str, &[&[&str]]); 11] = [
        (
            "a packed branch",
            "git update-ref refs/heads/feature $c && git pack-refs --all",
            &[&["checkout", "-q", "feature"]],
        ),
        (
            "a commit",
            "printf '#!/bin/sh\\necho pwned >> %s\\n' \"$M\" > .husky/pre-commit && \
             git add .husky/pre-commit && git commit -q -m agent",
            &[&["reset", "-q", "--hard"]],
        ),
        (
            "a commit behind the worktree",
            "git update-index --cacheinfo 100755,$b,.husky/pre-commit && git commit -q -m agent",
            &[&["stash"], &["reset", "-q", "--hard"]],
        ),
        (
            "a staged entry",
            "git update-index --cacheinfo 100755,$b,.husky/pre-commit",
            &[&["checkout", "--", "."]],
        ),
        (
            "ORIG_HEAD",
            "echo $c > .git/ORIG_HEAD",
            &[&["reset", "-q", "--hard", "ORIG_HEAD"]],
        ),
        (
            "HEAD's reflog",
            "printf '%s %s %s\\tagent\\n%s %s %s\\tback\\n' $h $c \"$who\" $c $h \"$who\" \
             >> .git/logs/HEAD",
            &[&["reset", "-q", "--hard", "HEAD@{1}"]],
        ),
        (
            "FETCH_HEAD",
            "printf '%s\\t\\tbranch main of elsewhere\\n' $c > .git/FETCH_HEAD",
            &[&["reset", "-q", "--hard", "FETCH_HEAD"]],
        ),
        (
            "MERGE_HEAD",
            "echo $c > .git/MERGE_HEAD",
            &[&["reset", "-q", "--hard", "MERGE_HEAD"]],
        ),
        (
            "the cache-tree",
            "git write-tree > /dev/null && python3 $P tree .husky $t",
            &[
                &["add", "build.sh"],
                &["commit", "-q", "-m", "person"],
                &["checkout", "-q", "HEAD~1"],
                &["checkout", "-q", "main"],
            ],
        ),
        (
            "a resolve-undo record",
            "python3 $P reuc .husky/pre-commit $b",
            &[&["checkout", "-m", "--", ".husky/pre-commit"]],
        ),
        (
            "a sparse directory entry",
            "r=$( (git ls-tree HEAD | grep -v '\t.husky$'; \
             printf '040000 tree %s\\t.husky\\n' $t) | git mktree) && \
             git sparse-checkout set --cone --sparse-index src && \
             git read-tree -m HEAD $r && git ls-files --sparse | grep -qx .husky/",
            &[
                &["add", "build.sh"],
                &["commit", "-q", "-m", "person"],
                &["checkout", "-q", "HEAD~1"],
                &["checkout", "-q", "main"],
            ],
        ),
    ];
    let mut wrote = Vec::new();
    for (what, plant, person) in cases {
        let (env, nested) = project_with_nested_husky();
        let marker = env.tmp.path().join("MARKER");
        // The agent's tool, beside its work.
        env.write("patch_index.py", support::git_forge::PATCH_INDEX);
        let script = format!(
            "M={m} && P=$PWD/patch_index.py && cd libs/z && {NESTED_AGENTS_COMMIT} && \
             {plant} && echo planted",
            m = marker.display()
        );
        let out = env.envgit(&["run", "sh", "-c", &script]);
        let (stdout, stderr) = (out.stdout, out.stderr);
        assert_eq!(out.code, 0, "{what}: {stdout}{stderr}");
        assert!(stdout.contains("planted"), "{what}: {stdout}{stderr}");
        // The put-back keeps the file on disk the person's.
        assert_eq!(
            std::fs::read_to_string(nested.join(".husky/pre-commit")).unwrap(),
            "#!/bin/sh\nexit 0\n",
            "{what}"
        );
        // The person's git in `libs/z`, as they run it next.
        std::fs::write(nested.join("build.sh"), "echo the person's edit\n").unwrap();
        for args in person {
            let _ = env.host_git(&nested).args(*args).output();
        }
        let grep = env
            .host_git(&nested)
            .args(["grep", "-l", "pwned", "HEAD", "--"])
            .output()
            .unwrap();
        let committed = String::from_utf8_lossy(&grep.stdout).into_owned();
        let hook = std::fs::read_to_string(nested.join(".husky/pre-commit")).unwrap_or_default();
        // The person's next commit there.
        std::fs::write(nested.join("build.sh"), "echo the person's commit\n").unwrap();
        let _ = env
            .host_git(&nested)
            .args(["commit", "-q", "-am", "person"])
            .output();
        if !committed.trim().is_empty() || hook.contains("pwned") || marker.exists() {
            wrote.push(format!(
                "{what}: committed {committed:?}, written {}, run {}",
                hook.contains("pwned"),
                marker.exists()
            ));
            continue;
        }
        assert!(
            stderr.contains("libs/z/.git/")
                && stderr.contains("`.husky")
                && stderr.contains("rule git.data-only"),
            "{what}: {stderr}"
        );
    }
    assert!(
        wrote.is_empty(),
        "the person's git in libs/z took the agent's hook: {wrote:#?}"
    );
}

/// Ordinary work in a nested repository with a hook manager still arrives: commits of its
/// files, a reset that leaves `ORIG_HEAD`, their reflog lines, a staged file.
#[test]
fn ordinary_work_in_a_nested_repository_with_a_hook_manager_arrives() {
    let (env, nested) = project_with_nested_husky();
    let out = run(
        &env,
        "cd libs/z && echo b > b.txt && git add b.txt && git commit -q -m one && \
         echo c > c.txt && git add c.txt && git commit -q -m two && \
         git reset -q --soft HEAD~1 && echo d > d.txt && git add d.txt && echo done",
    );
    assert!(out.stdout.contains("done"), "{}", out.stdout);
    assert!(
        !out.stderr.contains("protected path") && !out.stderr.contains("put back"),
        "{}",
        out.stderr
    );
    assert_eq!(
        env.git(&nested, &["log", "-1", "--format=%s"]).trim(),
        "one"
    );
    let orig = env.git(&nested, &["log", "-1", "--format=%s", "ORIG_HEAD"]);
    assert_eq!(orig.trim(), "two");
    let staged = env.git(&nested, &["diff", "--cached", "--name-only"]);
    assert_eq!(staged, "c.txt\nd.txt\n");
}

/// The same for the other files a nested repository's git hands the person's machine: a hook
/// in the directory its `core.hooksPath` names (`tools/hooks`, no hook manager's name), a
/// `lefthook.yml` or `.config/lefthook.yml` (lefthook's hook runs its commands), in a
/// repository of either ref format. The step commits its version behind the work tree; the
/// person's `git reset --hard` there must write theirs.
#[test]
fn a_nested_commit_naming_a_hook_file_its_config_or_a_manager_names_goes_back() {
    let cases: [(&str, Option<&str>, &str); 5] = [
        (".config/lefthook.yml", None, "files"),
        ("tools/hooks/pre-commit", Some("tools/hooks"), "files"),
        ("lefthook.yml", None, "files"),
        (".husky/pre-commit", Some(".husky"), "reftable"),
        ("tools/hooks/pre-commit", Some("tools/hooks"), "reftable"),
    ];
    let mut wrote = Vec::new();
    for (file, hooks_path, ref_format) in cases {
        let what = format!("{file} ({ref_format})");
        let (env, nested) = project_with_nested_hook(file, hooks_path, ref_format);
        let marker = env.tmp.path().join("MARKER");
        let script = format!(
            "cd libs/z && b=$(printf '#!/bin/sh\\necho pwned >> %s\\n' {m} | \
             git hash-object -w --stdin) && \
             git update-index --cacheinfo 100755,$b,{file} && git commit -q -m agent && \
             echo planted",
            m = marker.display()
        );
        let out = env.envgit(&["run", "sh", "-c", &script]);
        assert_eq!(out.code, 0, "{what}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("planted"), "{what}: {}", out.stdout);
        let _ = env
            .host_git(&nested)
            .args(["reset", "-q", "--hard"])
            .output();
        std::fs::write(nested.join("build.sh"), "echo the person's commit\n").unwrap();
        let _ = env
            .host_git(&nested)
            .args(["commit", "-q", "-am", "person"])
            .output();
        let on_disk = std::fs::read_to_string(nested.join(file)).unwrap_or_default();
        let committed = env.git(&nested, &["show", &format!("HEAD:{file}")]);
        if on_disk.contains("pwned") || committed.contains("pwned") || marker.exists() {
            wrote.push(format!(
                "{what}: written {}, committed {}, run {}; {}",
                on_disk.contains("pwned"),
                committed.contains("pwned"),
                marker.exists(),
                out.stderr
            ));
            continue;
        }
        assert!(
            out.stderr.contains("libs/z/.git/")
                && out.stderr.contains(&format!("`{file}`"))
                && out.stderr.contains("rule git.data-only"),
            "{what}: {}",
            out.stderr
        );
    }
    assert!(
        wrote.is_empty(),
        "the person's git in libs/z took the agent's version: {wrote:#?}"
    );
}

/// A submodule's checkout (`libs/z/.git` a file naming the project's `.git/modules/z`): its
/// git directory is the project's, behind the git layer, which takes nothing of `modules/`.
/// The step's commit there, naming its `.husky/pre-commit`, reaches neither the person's
/// `git reset --hard` in the submodule nor their next commit.
#[test]
fn a_submodules_commit_naming_its_hook_managers_change_stays_out() {
    let env = Env::new();
    let (_origin_env, origin) =
        project_with_nested_hook(".husky/pre-commit", Some(".husky"), "files");
    env.git(&env.project, &["init", "-q", "-b", "main"]);
    env.git(&env.project, &["config", "user.name", "person"]);
    env.git(
        &env.project,
        &["config", "user.email", "person@example.invalid"],
    );
    let url = origin.display().to_string();
    env.git(
        &env.project,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &url,
            "libs/z",
        ],
    );
    env.git(&env.project, &["commit", "-q", "-m", "submodule"]);
    let nested = env.path("libs/z");
    env.git(&nested, &["config", "core.hooksPath", ".husky"]);
    env.envgit(&["init"]).ok();
    let marker = env.tmp.path().join("MARKER");
    let script = format!(
        "cd libs/z && b=$(printf '#!/bin/sh\\necho pwned >> %s\\n' {m} | \
         git hash-object -w --stdin) && \
         git update-index --cacheinfo 100755,$b,.husky/pre-commit && \
         git -c user.name=a -c user.email=a@example.invalid commit -q -m agent && echo planted",
        m = marker.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("planted"), "{}", out.stdout);
    let hook = persons_reset_and_commit(&env, &nested);
    assert_eq!(hook, "#!/bin/sh\nexit 0\n", "{}", out.stderr);
    assert!(!marker.exists(), "the person's git ran the agent's hook");
    assert_eq!(
        env.git(&nested, &["log", "-1", "--format=%s"]).trim(),
        "person"
    );
}

/// The same when the step's snapshot fails (the store's packs made immutable mid-step,
/// standing in for a disk the step filled): the put-back of `libs/z/.husky/pre-commit` is then
/// found on disk, and so must be what the nested repository's index and refs name for it.
/// Needs `chattr +i`; says so and passes without it.
#[test]
fn a_nested_commit_naming_its_hook_managers_change_goes_back_without_a_snapshot() {
    let (env, nested) = project_with_nested_husky();
    let marker = env.tmp.path().join("MARKER");
    let attack = pausing(&format!(
        "cd libs/z && printf '#!/bin/sh\\necho pwned >> %s\\n' {m} > .husky/pre-commit && \
         git add .husky/pre-commit && git commit -q -m agent && cd ../..",
        m = marker.display()
    ));
    let Some((out, said)) = run_with_a_failing_snapshot(&env, &attack) else {
        eprintln!("skipped: `chattr +i` is not available here");
        return;
    };
    assert!(
        !out.status.success(),
        "the store's failure went unsaid: {said}"
    );
    assert_eq!(
        std::fs::read_to_string(nested.join(".husky/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n",
        "{said}"
    );
    let hook = persons_reset_and_commit(&env, &nested);
    assert!(
        !hook.contains("pwned") && !marker.exists(),
        "the person's git wrote ({}) or ran ({}) the agent's hook: {said}",
        hook.contains("pwned"),
        marker.exists()
    );
    assert!(
        said.contains("libs/z/.git/") && said.contains("put back"),
        "{said}"
    );
}

/// The hook file `core.hooksPath = tools/hooks` makes `libs/z`'s pre-commit hook.
const CONFIGURED_HOOK: &str = "tools/hooks/pre-commit";

/// How a step plants its version of [`CONFIGURED_HOOK`] in `libs/z` (`$b` its blob, `$M` the
/// marker it appends to): behind the work tree in a commit, which the person's `git reset
/// --hard` writes (`true`: the person resets first), or on disk.
fn configured_hook_plants() -> [(String, bool); 2] {
    let file = CONFIGURED_HOOK;
    [
        (
            format!("git update-index --cacheinfo 100755,$b,{file} && git commit -q -m agent"),
            true,
        ),
        (format!("git cat-file blob $b > {file}"), false),
    ]
}

/// The shell line that plants with `plant` in `libs/z`, its hook appending to `marker`.
fn configured_hook_attack(plant: &str, marker: &Path) -> String {
    format!(
        "cd libs/z && b=$(printf '#!/bin/sh\\necho pwned >> %s\\n' {m} | \
         git hash-object -w --stdin) && {plant} && cd ../..",
        m = marker.display()
    )
}

/// The person's git in `nested` after the step (`git reset --hard` first when `reset`, then a
/// commit of an edit of theirs, which runs the hook): whether it wrote or ran the agent's
/// [`CONFIGURED_HOOK`], said when it did.
fn persons_git_took_the_configured_hook(
    env: &Env,
    nested: &Path,
    reset: bool,
    marker: &Path,
) -> Option<String> {
    persons_commit(env, nested, reset);
    let hook = std::fs::read_to_string(nested.join(CONFIGURED_HOOK)).unwrap_or_default();
    (hook.contains("pwned") || marker.exists()).then(|| {
        format!(
            "the person's git wrote ({}) or ran ({}) the agent's hook",
            hook.contains("pwned"),
            marker.exists()
        )
    })
}

/// The same for the hooks directory a nested repository's own config names
/// (`core.hooksPath = tools/hooks`, no hook manager's name): without a snapshot its
/// protected paths were only the hook managers' fixed names, so a commit behind the work tree
/// naming the step's `tools/hooks/pre-commit` stayed (the person's `git reset --hard` there
/// wrote it), and so did the hook written on disk; their next commit ran it. Needs
/// `chattr +i`; says so and passes without it.
#[test]
fn a_nested_repositorys_configured_hook_goes_back_without_a_snapshot() {
    for (plant, reset) in configured_hook_plants() {
        let (env, nested) = project_with_nested_hook(CONFIGURED_HOOK, Some("tools/hooks"), "files");
        let marker = env.tmp.path().join("MARKER");
        let attack = pausing(&configured_hook_attack(&plant, &marker));
        let Some((out, said)) = run_with_a_failing_snapshot(&env, &attack) else {
            eprintln!("skipped: `chattr +i` is not available here");
            return;
        };
        assert!(
            !out.status.success(),
            "{plant}: the store's failure went unsaid: {said}"
        );
        if let Some(took) = persons_git_took_the_configured_hook(&env, &nested, reset, &marker) {
            panic!("{plant}: {took}: {said}");
        }
        // Behind the work tree the repository's data goes back; on disk, the hooks directory.
        let named = if reset {
            "libs/z/.git/"
        } else {
            "libs/z/tools/hooks changed"
        };
        assert!(
            said.lines()
                .any(|l| l.contains(named) && l.contains("put back")),
            "{plant}: {said}"
        );
    }
}

/// The same after envgit is killed mid-step (an agent's harness ends a command it timed out
/// with `SIGKILL`): the next envgit command makes the end the step owed, and judges the nested
/// repository's index, refs and files at what its git config names too.
#[test]
fn after_a_kill_9_a_nested_repositorys_configured_hook_goes_back() {
    for (plant, reset) in configured_hook_plants() {
        let (env, nested) = project_with_nested_hook(CONFIGURED_HOOK, Some("tools/hooks"), "files");
        let marker = env.tmp.path().join("MARKER");
        killed_after(&env, &configured_hook_attack(&plant, &marker));
        let log = env.envgit(&["log", "--json"]);
        assert_eq!(log.code, 0, "{plant}: {}", log.stderr);
        if let Some(took) = persons_git_took_the_configured_hook(&env, &nested, reset, &marker) {
            panic!("{plant}: {took}: {}", log.stderr);
        }
        assert!(log.stderr.contains("libs/z/"), "{plant}: {}", log.stderr);
    }
}

/// A project with no `.git` made a bare repository at its root by a step (`HEAD`, `objects/`,
/// `refs/` and a `config` naming a `core.fsmonitor`) whose snapshot then fails (the store's
/// packs made immutable mid-step): git takes the root for a repository by its layout, so the
/// person's `git status` anywhere in the project would run the step's program. Needs
/// `chattr +i`; says so and passes without it.
#[test]
fn the_project_root_made_a_bare_repository_runs_nothing_without_a_snapshot() {
    let env = Env::new();
    env.write("src/lib.rs", "\n");
    env.envgit(&["init"]).ok();
    let marker = env.tmp.path().join("MARKER");
    let attack = pausing(&format!(
        "mkdir -p objects refs/heads && echo 'ref: refs/heads/main' > HEAD && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n\\tfsmonitor = \"echo pwned >> {m}; false\"\\n' > config",
        m = marker.display()
    ));
    let Some((out, said)) = run_with_a_failing_snapshot(&env, &attack) else {
        eprintln!("skipped: `chattr +i` is not available here");
        return;
    };
    assert!(
        !out.status.success(),
        "the store's failure went unsaid: {said}"
    );
    for dir in [".", "src"] {
        let status = env
            .host_git(&env.path(dir))
            .args(["status"])
            .output()
            .unwrap();
        assert!(
            !marker.exists(),
            "the person's git status in {dir} ran the step's fsmonitor: {}{}\n{said}",
            String::from_utf8_lossy(&status.stdout),
            String::from_utf8_lossy(&status.stderr),
        );
    }
}

/// A nested repository whose git directory lies elsewhere in the project (`git init
/// --separate-git-dir`: `libs/z/.git` a file naming `gitdirs/z`): the step's commit there,
/// through `libs/z`, naming its `.husky/pre-commit`, must not reach the person's
/// `git reset --hard` in `libs/z` either.
#[test]
fn a_nested_repository_with_its_git_directory_elsewhere_in_the_project_keeps_its_hook() {
    let env = Env::new();
    let nested = env.path("libs/z");
    std::fs::create_dir_all(nested.join(".husky")).unwrap();
    std::fs::create_dir_all(env.path("gitdirs")).unwrap();
    env.git(
        &nested,
        &[
            "init",
            "-q",
            "-b",
            "main",
            "--separate-git-dir",
            "../../gitdirs/z",
        ],
    );
    env.git(&nested, &["config", "user.name", "person"]);
    env.git(&nested, &["config", "user.email", "person@example.invalid"]);
    std::fs::write(nested.join(".husky/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(
        nested.join(".husky/pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(nested.join("build.sh"), "echo hello\n").unwrap();
    env.git(&nested, &["add", "-A"]);
    env.git(&nested, &["commit", "-q", "-m", "hook"]);
    env.git(&nested, &["config", "core.hooksPath", ".husky"]);
    env.envgit(&["init"]).ok();
    let marker = env.tmp.path().join("MARKER");
    let script = format!(
        "cd libs/z && printf '#!/bin/sh\\necho pwned >> %s\\n' {m} > .husky/pre-commit && \
         git add .husky/pre-commit && git commit -q -m agent && echo planted",
        m = marker.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("planted"), "{}", out.stdout);
    let hook = persons_reset_and_commit(&env, &nested);
    assert!(
        !hook.contains("pwned") && !marker.exists(),
        "the person's git wrote ({}) or ran ({}) the agent's hook: {}",
        hook.contains("pwned"),
        marker.exists(),
        out.stderr
    );
}
