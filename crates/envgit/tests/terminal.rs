#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `envgit run` on a terminal: the command gets a pty of its own, which follows the real
//! terminal's size (a person resizing the window reaches the command).

mod support;

use std::process::Command;

use support::Env;

#[test]
fn resizing_the_real_terminal_resizes_the_commands() {
    let env = Env::new();
    env.init();
    // The command waits (bounded) until its terminal is 33x111, then says what it sees.
    let script = "echo READY; i=0; while [ $i -lt 100 ]; do s=$(stty size); \
                  [ \"$s\" = '33 111' ] && break; i=$((i+1)); sleep 0.1; done; echo SIZE=$s";
    let out = Command::new("python3")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/pty_run.py"))
        .args(["never-asked", "", "--", support::envgit_bin(), "run", "--"])
        .args(["sh", "-c", script])
        .current_dir(&env.project)
        .env("ENVGIT_HOME", &env.home)
        .env("HOME", env.user_home())
        .env("NO_COLOR", "1")
        .env("PTY_RESIZE", "READY:33:111")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("SIZE=33 111"), "{shown}");
    assert!(shown.contains("EXIT=0"), "{shown}");
}

/// What the command prints and what envgit says while it runs reach the terminal with one
/// `\r\n` per line (the command's pty turns `\n` into `\r\n`; the real terminal must not do it
/// again: `\r\r\n` is what a log of the session showed).
#[test]
fn lines_reach_the_terminal_with_single_line_ends() {
    let env = Env::new();
    env.init();
    let out = Command::new("python3")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/pty_run.py"))
        .args(["never-asked", "", "--", support::envgit_bin(), "run", "--"])
        .args([
            "sh",
            "-c",
            "echo first; echo second; curl -s -m 5 http://example.invalid/ >/dev/null; echo third",
        ])
        .current_dir(&env.project)
        .env("ENVGIT_HOME", &env.home)
        .env("HOME", env.user_home())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("first\r\nsecond\r\n"), "{shown:?}");
    assert!(shown.contains("third\r\n"), "{shown:?}");
    // envgit's own line, printed while the command runs, ends the same way.
    assert!(shown.contains("(rule network.allow)"), "{shown:?}");
    assert!(!shown.contains("\r\r\n"), "{shown:?}");
}
