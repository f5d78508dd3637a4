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
