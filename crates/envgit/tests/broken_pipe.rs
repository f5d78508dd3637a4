//! A reader that goes away early (`envgit log --json | head`) ends envgit quietly: exit 141 (what
//! a shell reports for a process ended by SIGPIPE), nothing on stderr, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Read;
use std::process::Stdio;

use support::Env;

/// A project whose history prints far more than a pipe holds (6 steps of 200 changes each).
fn busy_project() -> Env {
    let env = Env::new();
    env.init();
    for step in 0..6 {
        for i in 0..200 {
            env.write(
                &format!("src/step{step}/a-rather-long-directory-name/file-number-{i:04}.txt"),
                "x\n",
            );
        }
        env.record();
    }
    env
}

/// Run `envgit ARGS` with stdout a pipe closed after reading a few bytes; (exit code, stderr).
fn closed_early(env: &Env, args: &[&str]) -> (Option<i32>, String) {
    let mut child = env
        .cmd(&env.project)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout); // the reader goes away, like `head -c 16`
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_printing_command_ends_quietly_when_its_reader_goes_away() {
    let env = busy_project();
    // (command, prints more than a pipe holds)
    for (args, big) in [
        (&["log", "--json"][..], true),
        (&["log", "-v"], true),
        (&["diff", "1", "7"], true),
        (&["show", "3", "--json"], false),
    ] {
        let (code, stderr) = closed_early(&env, args);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "envgit {args:?} panicked on a closed pipe:\n{stderr}"
        );
        assert_eq!(
            stderr, "",
            "envgit {args:?} said something on a closed pipe"
        );
        // Output that fits in the pipe may be written whole before the reader goes away.
        let want: &[i32] = if big { &[141] } else { &[0, 141] };
        assert!(
            code.is_some_and(|c| want.contains(&c)),
            "envgit {args:?} exited {code:?}, not {want:?}"
        );
    }
}
