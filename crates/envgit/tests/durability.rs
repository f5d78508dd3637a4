//! Crash safety, corruption, a full disk, locking and gc, against the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{Env, envgit_bin};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn noise(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next() as u8).collect()
}

/// (number, tree) of every committed step, oldest first.
fn history(env: &Env) -> Vec<(u64, String)> {
    let mut h: Vec<(u64, String)> = env
        .log_json()
        .iter()
        .map(|s| {
            (
                s["number"].as_u64().unwrap(),
                s["tree"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    h.reverse();
    h
}

#[test]
fn kill_9_at_random_moments_loses_at_most_the_step_in_flight() {
    let env = Env::new();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for i in 0..300 {
        env.write(
            &format!("d{}/f{i}.txt", i % 30),
            &format!("file {i}\n").repeat(20),
        );
    }
    std::fs::write(env.path("big.bin"), noise(&mut rng, 3 << 20)).unwrap();
    env.init();
    let mut seen = history(&env);
    let (mut landed, mut finished) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut round = 0;
    while Instant::now() < deadline && round < 150 {
        round += 1;
        for _ in 0..5 {
            let i = rng.next() % 300;
            env.write(
                &format!("d{}/f{i}.txt", i % 30),
                &format!("round {round}\n"),
            );
        }
        let mut big = std::fs::read(env.path("big.bin")).unwrap();
        let at = (rng.next() % big.len() as u64) as usize;
        big[at] ^= 0x5a;
        std::fs::write(env.path("big.bin"), &big).unwrap();
        let mut child = env.cmd(&env.project).arg("record").spawn().unwrap();
        std::thread::sleep(Duration::from_micros(rng.next() % 60_000));
        match child.try_wait().unwrap() {
            Some(_) => finished += 1,
            None => {
                child.kill().unwrap(); // SIGKILL
                landed += 1;
            }
        }
        child.wait().unwrap();
        if round % 10 == 0 {
            env.envgit(&["fsck"]).ok();
        }
        let now = history(&env);
        assert!(now.len() >= seen.len(), "round {round}: steps were lost");
        assert_eq!(
            &now[..seen.len()],
            &seen[..],
            "round {round}: an earlier step changed"
        );
        seen = now;
    }
    assert!(
        landed > 5,
        "too few kills landed mid-snapshot ({landed}) for the test to mean anything"
    );
    assert!(finished > 0 || seen.len() > 1, "no snapshot ever completed");
    env.envgit(&["fsck"]).ok();
    // Every surviving step still restores, the first one to exactly what it was.
    env.envgit(&["rewind", "1"]).ok();
    assert_eq!(env.read("d0/f0.txt"), "file 0\n".repeat(20));
    // The next writer cut off whatever the killed ones left in packs and journal.
    env.envgit(&["record"]).ok();
    env.envgit(&["fsck"]).ok();
}

#[test]
fn fsck_names_a_corrupt_object_and_the_steps_that_need_it() {
    let env = Env::new();
    let marker = "precious-content-0123456789";
    env.write("keep/precious.txt", marker);
    env.write("other.txt", "other");
    env.init();
    env.write("other.txt", "changed");
    env.record();
    let packs = env.store_dir().join("packs");
    let mut hit = false;
    for e in std::fs::read_dir(&packs).unwrap() {
        let p = e.unwrap().path();
        let mut bytes = std::fs::read(&p).unwrap();
        if let Some(pos) = bytes
            .windows(marker.len())
            .position(|w| w == marker.as_bytes())
        {
            bytes[pos + 3] ^= 0x01;
            std::fs::write(&p, bytes).unwrap();
            hit = true;
        }
    }
    assert!(hit, "the test could not find the object to corrupt");
    let r = env.envgit(&["fsck"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("checksum mismatch"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("step 1 cannot be fully restored: keep/precious.txt"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("step 2 cannot be fully restored: keep/precious.txt"),
        "{}",
        r.stderr
    );
    let j = env.envgit(&["fsck", "--json"]).json();
    assert_eq!(j["bad_objects"].as_object().unwrap().len(), 1);
    // Restoring what is damaged fails loudly, never with a silently wrong file.
    std::fs::remove_file(env.path("keep/precious.txt")).unwrap();
    let r = env.envgit(&["rewind", "1"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("corrupt"), "{}", r.stderr);
}

#[test]
fn a_small_disk_is_never_filled_and_a_disk_full_anyway_fails_the_step_whole() {
    let env = Env::new();
    env.write("small.txt", "small");
    let big = env.tmp.path().join("big.bin");
    let mut rng = Rng(42);
    std::fs::write(&big, noise(&mut rng, 3 << 20)).unwrap();
    let mnt = env.tmp.path().join("tiny");
    std::fs::create_dir_all(&mnt).unwrap();
    // A private mount namespace with a 1 MiB tmpfs as the store: nothing outside is touched.
    // A 3 MiB file cannot fit: it becomes a marker and the disk keeps its reserve. Then the
    // disk fills from elsewhere (a filler file leaving 16 KiB), and a step that must write
    // more than that during its snapshot (300 new directories mean 300 new trees, which are
    // written whatever the budget) fails whole with the disk-full message, the store intact.
    let script = format!(
        r#"set -u
mount -t tmpfs -o size=1m tmpfs "{mnt}" || {{ echo MOUNT-FAILED; exit 0; }}
export ENVGIT_HOME="{mnt}/home" NO_COLOR=1
cd "{proj}"
"{bin}" init >/dev/null 2>&1 || echo INIT-FAILED
cp "{big}" big.bin
"{bin}" record; echo "RECORD-EXIT=$?"
"{bin}" log --json | grep -c '"number"' | sed 's/^/STEPS=/'
stat -f -c 'FREE=%a*%S' "{mnt}"
"{bin}" fsck >/dev/null 2>&1; echo "FSCK-EXIT=$?"
dd if=/dev/zero of="{mnt}/filler" bs=4096 2>/dev/null
truncate -s -16384 "{mnt}/filler"
for i in $(seq 1 300); do mkdir "d$i"; echo "$i" > "d$i/f$i"; done
"{bin}" record; echo "FULL-EXIT=$?"
"{bin}" log --json | grep -c '"number"' | sed 's/^/STEPS-FULL=/'
"{bin}" fsck >/dev/null 2>&1; echo "FSCK-FULL-EXIT=$?"
rm "{mnt}/filler" big.bin
"{bin}" record >/dev/null 2>&1; echo "AFTER-EXIT=$?"
"{bin}" fsck >/dev/null 2>&1; echo "FSCK2-EXIT=$?"
"{bin}" show @ --json | grep -c '"d300/f300"' | sed 's/^/CAPTURED=/'
"#,
        mnt = mnt.display(),
        proj = env.project.display(),
        bin = envgit_bin(),
        big = big.display()
    );
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stdout.contains("MOUNT-FAILED"),
        "no private tmpfs: {stdout}{stderr}"
    );
    assert!(!stdout.contains("INIT-FAILED"), "{stdout}{stderr}");
    // The big file is a marker, the step recorded, the disk not filled.
    assert!(stdout.contains("RECORD-EXIT=0"), "{stdout}{stderr}");
    assert!(stdout.contains("STEPS=2"), "{stdout}{stderr}");
    assert!(
        stderr.contains("big.bin (3.0 MiB)") && stderr.contains("envgit keeps"),
        "{stderr}"
    );
    let free = stdout
        .lines()
        .find_map(|l| l.strip_prefix("FREE="))
        .and_then(|f| {
            let (a, b) = f.split_once('*')?;
            Some(a.parse::<u64>().ok()? * b.parse::<u64>().ok()?)
        })
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        free >= 32 << 10,
        "the store left {free} bytes free: {stdout}"
    );
    assert!(stdout.contains("FSCK-EXIT=0"), "{stdout}{stderr}");
    // Full anyway: the step fails, nothing half-written appears.
    assert!(stdout.contains("FULL-EXIT=1"), "{stdout}{stderr}");
    assert!(stderr.contains("the disk is full"), "{stderr}");
    assert!(
        stdout.contains("STEPS-FULL=2"),
        "a half-written step appeared: {stdout}{stderr}"
    );
    assert!(stdout.contains("FSCK-FULL-EXIT=0"), "{stdout}{stderr}");
    assert!(
        stdout.contains("AFTER-EXIT=0") && stdout.contains("FSCK2-EXIT=0"),
        "{stdout}{stderr}"
    );
    assert!(stdout.contains("CAPTURED=1"), "{stdout}{stderr}");
}

#[test]
fn readers_never_wait_for_the_commit_lock_but_writers_do() {
    let env = Env::new();
    env.write("f.txt", "1");
    env.init();
    let lock = env.store_dir().join("lock");
    let mut holder = Command::new("flock")
        .arg(&lock)
        .args(["sleep", "20"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let bin = envgit_bin();
    let run = |args: &[&str]| {
        Command::new("timeout")
            .arg("3")
            .arg(bin)
            .args(args)
            .current_dir(&env.project)
            .env("ENVGIT_HOME", &env.home)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(run(&["log"]), Some(0));
    assert_eq!(run(&["show", "1"]), Some(0));
    assert_eq!(run(&["diff", "1"]), Some(0));
    env.write("f.txt", "2");
    assert_eq!(
        run(&["record"]),
        Some(124),
        "a writer committed while another held the lock"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    env.envgit(&["record"]).ok();
    env.envgit(&["fsck"]).ok();
}

#[test]
fn gc_keeps_the_store_under_budget_and_pruned_steps_refuse_a_rewind() {
    let env = Env::new();
    let mut rng = Rng(7);
    env.write("base.txt", "base");
    env.init();
    for i in 0..40 {
        std::fs::write(env.path(&format!("blob{i}.bin")), noise(&mut rng, 8_000)).unwrap();
        if i > 0 {
            std::fs::remove_file(env.path(&format!("blob{}.bin", i - 1))).unwrap();
        }
        env.record();
    }
    let r = env
        .envgit(&["gc", "--budget", "300KiB", "--json"])
        .ok()
        .json();
    let pruned: Vec<u64> = r["pruned_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(!pruned.is_empty());
    assert!(r["bytes_after"].as_u64().unwrap() < r["bytes_before"].as_u64().unwrap());
    assert!(r["bytes_after"].as_u64().unwrap() <= 300 * 1024, "{r}");
    let log = env.log_json();
    assert_eq!(log.len(), 41, "pruned steps stay in the log");
    let p = pruned[0];
    let entry = log.iter().find(|s| s["number"] == p).unwrap();
    assert!(
        entry["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "pruned")
    );
    let r = env.envgit(&["rewind", &p.to_string()]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("pruned"), "{}", r.stderr);
    env.envgit(&["fsck"]).ok();
    // The newest steps were kept and still restore.
    env.envgit(&["rewind", "35"]).ok();
    assert!(env.path("blob33.bin").exists() && !env.path("blob39.bin").exists());
}

#[test]
fn gc_purge_removes_a_captured_secret_from_every_snapshot() {
    let env = Env::new();
    let secret = "SECRET-TOKEN-do-not-keep-98765";
    env.write("app.txt", "app v1");
    env.write(".env.local", secret);
    env.init();
    env.write("app.txt", "app v2");
    env.record();
    std::fs::remove_file(env.path(".env.local")).unwrap();
    env.record();
    let store = env.store_dir();
    let contains_secret = || {
        let mut found = false;
        for dir in [store.clone(), store.join("packs")] {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_file() {
                    let b = std::fs::read(&p).unwrap();
                    found |= b.windows(secret.len()).any(|w| w == secret.as_bytes());
                }
            }
        }
        found
    };
    assert!(
        contains_secret(),
        "the test needs the secret captured first"
    );
    let r = env.envgit(&["gc", "--purge", ".env.local"]).ok();
    assert!(
        r.stderr.contains("purged .env.local from 2 step(s)"),
        "{}",
        r.stderr
    );
    assert!(!contains_secret(), "the secret is still in the store");
    env.envgit(&["fsck"]).ok();
    let r = env.envgit(&["rewind", "1"]).ok();
    assert_eq!(env.read("app.txt"), "app v1");
    assert!(!env.path(".env.local").exists());
    // Rewind and fork say what gc --purge took away.
    assert!(
        r.stderr.contains(".env.local (purged) was not restored"),
        "{}",
        r.stderr
    );
    let fork_dir = env.tmp.path().join("fork");
    let r = env.envgit(&["fork", "1", fork_dir.to_str().unwrap()]).ok();
    assert!(!fork_dir.join(".env.local").exists());
    assert!(r.stderr.contains(".env.local (purged)"), "{}", r.stderr);
}

/// The entries of the directories `dirs` whose names start with `prefix`.
fn entries_starting(dirs: &[std::path::PathBuf], prefix: &str) -> Vec<std::path::PathBuf> {
    dirs.iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect()
}

/// The directories a running step of `pid` keeps its gate sockets and trust files in: on
/// tmpfs (`/dev/shm/envgit-UID-*`) or, where there is none, under `$ENVGIT_HOME/rt-UID`.
/// Only those made since `since_ms` (a directory is named `PID-MS`): an older one belongs to
/// an earlier process that had the same PID (PIDs wrap).
fn step_dirs_of(env: &Env, pid: u32, since_ms: u128) -> Vec<std::path::PathBuf> {
    let uid = env.sh("id -u").ok().stdout.trim().to_owned();
    let mut bases = entries_starting(&["/dev/shm".into()], &format!("envgit-{uid}-"));
    bases.push(env.home.join(format!("rt-{uid}")));
    entries_starting(&bases, &format!("{pid}-"))
        .into_iter()
        .filter(|dir| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split_once('-'))
                .and_then(|(_, ms)| ms.parse::<u128>().ok())
                .is_none_or(|ms| ms >= since_ms)
        })
        .collect()
}

/// The trust files are the project's for the day, beside the steps' directories (`step_ca.rs`):
/// a killed run leaves only its sockets and staging directory.
#[test]
fn a_killed_runs_sockets_are_removed_by_the_next_run() {
    let env = Env::new();
    env.init();
    let since_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut child = env
        .cmd(&env.project)
        .args(["run", "sh", "-c", "touch started; sleep 60"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !env.path("started").exists() {
        assert!(Instant::now() < deadline, "the step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = step_dirs_of(&env, child.id(), since_ms);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].join("gate.sock").exists(), "{:?}", left[0]);
    child.kill().unwrap(); // SIGKILL: nothing of envgit cleans up
    child.wait().unwrap();
    assert!(left[0].exists(), "removed by whom?");
    env.envgit(&["run", "true"]).ok();
    assert!(
        !left[0].exists(),
        "the killed run's directory outlived the next run: {:?}",
        left[0]
    );
}

/// As a person who is not root: what a step makes unreadable to them (`chmod 0` on a directory
/// it wrote) is a marker in the snapshot, not its content. The step says so, with the fix;
/// rewind leaves it in place (removing it would lose what no snapshot holds) and says the
/// fix; once readable, a rewind records it as the person's edit first, then removes it.
#[test]
fn what_a_step_makes_unreadable_is_said_kept_and_recorded_once_readable() {
    let env = Env::new();
    env.write("a.txt", "1\n");
    let project = env.project.to_str().unwrap().to_owned();
    let user = |args: &[&str]| {
        let mut all = vec!["-C", project.as_str()];
        all.extend_from_slice(args);
        env.as_a_user_in_own_tmpdir(&all)
            .map(|(out, _)| support::Run::from(out))
    };
    let Some(init) = user(&["init"]) else {
        eprintln!("skipped: needs root (to run envgit as another user)");
        return;
    };
    init.ok();
    let script = "mkdir d && echo only-here > d/f && chmod 0 d";
    let run = user(&["run", "--", "sh", "-c", script]).unwrap().ok();
    assert!(
        run.stderr
            .contains("unreadable to envgit, so not in this step's snapshot")
            && run
                .stderr
                .contains("`chmod -R u+rwX d` lets the next step take them"),
        "{}",
        run.stderr
    );
    let shown = user(&["show", "2", "--json"]).unwrap().ok().json();
    assert!(
        shown["notes"]
            .to_string()
            .contains("unreadable, content not in the snapshot: d"),
        "{shown:#}"
    );
    let rewind = user(&["rewind", "1"]).unwrap().ok();
    assert!(
        rewind.stderr.contains(
            "d (unreadable) was left as it is (step 1 did not have it): its content is in no \
             snapshot; to have it recorded and then removed, `chmod -R u+rwX d` and rewind again"
        ),
        "{}",
        rewind.stderr
    );
    assert!(
        env.path("d").exists(),
        "rewind removed what no snapshot holds"
    );
    // The fix the message gives.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(env.path("d"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let again = user(&["rewind", "1"]).unwrap().ok();
    assert!(!env.path("d").exists(), "{}", again.stderr);
    assert_eq!(env.read("a.txt"), "1\n");
    // What it held is in the history, in the edits recorded before the rewind.
    let log = user(&["log", "--json"]).unwrap().ok().json();
    let recorded = log
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["changes"].to_string().contains("\"d/f\""));
    assert!(recorded, "{log:#}");
}
