#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `envgit run` on a terminal: the command gets a pty of its own, which follows the real
//! terminal's size (a person resizing the window reaches the command).

mod support;

use std::path::Path;
use std::process::Command;

use support::Env;

#[test]
fn resizing_the_real_terminal_resizes_the_commands() {
    let env = Env::new();
    env.init();
    // The command waits (bounded) until its terminal is 33x111, then says what it sees.
    let script = "echo READY; i=0; while [ $i -lt 100 ]; do s=$(stty size); \
                  [ \"$s\" = '33 111' ] && break; i=$((i+1)); sleep 0.1; done; echo SIZE=$s";
    let out = env
        .on_terminal("never-asked", "", &["run", "--"])
        .args(["sh", "-c", script])
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
    let out = env
        .on_terminal("never-asked", "", &["run", "--"])
        .args([
            "sh",
            "-c",
            "echo first; echo second; curl -s -m 5 http://example.invalid/ >/dev/null; echo third",
        ])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("first\r\nsecond\r\n"), "{shown:?}");
    assert!(shown.contains("third\r\n"), "{shown:?}");
    // envgit's own line, printed while the command runs, ends the same way.
    assert!(shown.contains("(rule network.allow)"), "{shown:?}");
    assert!(!shown.contains("\r\r\n"), "{shown:?}");
}

/// What a command prints about its terminal, run by `envgit run` on a terminal in `env`.
fn terminal_facts(env: &Env) -> String {
    let script = "printf 'TTY=%s\\n' \"$(tty)\"; \
                  (: </dev/tty) 2>/dev/null && echo CTTY=yes || echo CTTY=no; \
                  printf 'OWNER=%s\\n' \"$(stat -c %u \"$(tty)\")\"; \
                  printf 'ME=%s\\n' \"$(id -u)\"";
    let out = env
        .on_terminal("never-asked", "", &["run", "--"])
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fact(shown: &str, key: &str) -> String {
    shown
        .lines()
        .find_map(|l| {
            l.trim_end_matches('\r')
                .strip_prefix(key)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no {key} in {shown:?}"))
}

/// The command's terminal is a real one inside its own view: `tty` names it (a pty of the
/// sandbox's own devpts, not a node it cannot see), it is the controlling terminal (`/dev/tty`
/// opens, so shells get job control), the command's user owns it, and nothing was typed into
/// it before the command started (no stray `^@`).
fn assert_own_controlling_terminal(shown: &str) {
    let tty = fact(shown, "TTY=");
    assert!(
        tty.strip_prefix("/dev/pts/")
            .is_some_and(|n| n.parse::<u32>().is_ok()),
        "tty inside names no pty: {tty:?} in {shown:?}"
    );
    assert_eq!(fact(shown, "CTTY="), "yes", "{shown:?}");
    assert_eq!(fact(shown, "OWNER="), fact(shown, "ME="), "{shown:?}");
    assert!(!shown.contains("^@") && !shown.contains('\0'), "{shown:?}");
    assert!(shown.contains("EXIT=0"), "{shown:?}");
}

#[test]
fn the_command_has_a_named_controlling_terminal() {
    let env = Env::new();
    env.init();
    assert_own_controlling_terminal(&terminal_facts(&env));
}

/// As root on a project another user owns, the command runs as that owner (see
/// `foreign_owner.rs`), and its terminal is theirs too.
#[test]
fn the_terminal_belongs_to_the_projects_owner() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("SKIPPED: needs root (to own a project as another uid)");
        return;
    }
    let env = Env::new();
    env.write("README", "hello\n");
    let ok = Command::new("chown")
        .args(["-R", "1001:1001"])
        .arg(&env.project)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    env.init();
    let shown = terminal_facts(&env);
    assert_own_controlling_terminal(&shown);
    assert_eq!(fact(&shown, "ME="), "1001", "{shown:?}");
}

/// Ctrl-C typed at the real terminal reaches the command's foreground job through its own
/// pty, as at any terminal: the running `sleep` is interrupted, and the shell, which traps
/// the signal, carries on (a signal sent only to the shell would leave `sleep` running).
#[test]
fn ctrl_c_interrupts_the_commands_foreground_job() {
    let env = Env::new();
    env.init();
    // The subshell says READY and becomes `sleep`: whichever it is when Ctrl-C arrives, the
    // signal ends it (a subshell does not keep the parent's trap).
    let script = "trap 'echo SHELL-GOT-INT' INT; (echo READY; exec sleep 60); echo \"SLEEP=$?\"";
    let out = env
        .on_terminal("READY", "\u{3}", &["run", "--"])
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("SLEEP=130"), "{shown:?}");
    assert!(shown.contains("EXIT=0"), "{shown:?}");
}

/// What the command prints reaches the real terminal byte for byte (colours, titles,
/// hyperlinks), except the sequences a terminal acts on outside its screen: a clipboard write
/// (OSC 52, here also in its C1 form and wrapped for tmux) and iTerm2's file download (OSC
/// 1337 `File=`), which would put the command's text in the person's clipboard or a file on
/// the host.
#[test]
fn sequences_that_reach_outside_the_terminal_never_leave_the_relay() {
    let env = Env::new();
    env.init();
    let script = "printf 'a\\033]52;c;ZWNobyBvd25lZA==\\007b\\n'; \
                  printf 'c\\302\\23552;c;eA==\\302\\234d\\n'; \
                  printf 'e\\033Ptmux;\\033\\033]52;c;eA==\\007\\033\\\\f\\n'; \
                  printf 'g\\033]1337;File=name=eA==;inline=0:aGk=\\007h\\n'; \
                  printf '\\033[1mbold\\033[0m \\033]8;;https://example.com\\033\\\\link\\033]8;;\\033\\\\\\n'; \
                  printf 'i\\033]2;rm -rf ~\\007\\033[21tj\\033[0021;0tk\\033[2\\r0t\\n'; \
                  printf 'l\\033[3;0;0t\\033[9;1tm\\033[5i\\033[?5i\\033[7;1;1;1;1;1*yn\\n'; \
                  printf 'o\\033P1000p%%begin 1 1 1\\n%%exit\\n\\033\\\\p\\n'; \
                  printf '\\033[22;0t\\033[18tq\\033[23;0t\\n'";
    let out = env
        .on_terminal("never-asked", "", &["run", "--"])
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("EXIT=0"), "{shown:?}");
    for gone in [
        "]52;",
        "\u{9d}52",
        "tmux;",
        "]1337;",
        "ZWNobyBvd25lZA",
        // Reports whose answer is text the command chose (the title it set, typed into the
        // shell the person returns to), window operations, the printer, iTerm2's tmux mode.
        "[21t",
        "[0021;0t",
        "[2\r",
        "[3;0;0t",
        "[9;1t",
        "[5i",
        "[?5i",
        "*y",
        "1000p",
        "%begin",
    ] {
        assert!(
            !shown.contains(gone),
            "{gone:?} reached the terminal: {shown:?}"
        );
    }
    for kept in [
        "ab\r\n",
        "cd\r\n",
        "gh\r\n",
        "\x1b]2;rm -rf ~\x07jk",
        "lmn\r\n",
        "op\r\n",
        "\x1b[22;0t\x1b[18tq\x1b[23;0t\r\n",
        "\x1b[1mbold\x1b[0m \x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\\r\n",
    ] {
        assert!(
            shown.contains(kept),
            "{kept:?} did not reach the terminal: {shown:?}"
        );
    }
}

/// `envgit run` started from a terminal with one or two of its streams redirected: the
/// command's streams (as its shell sees them), the terminal's identity, and what the redirect
/// got.
fn streams_with(env: &Env, redirect: &str) -> (String, String) {
    let file = env.user_home().join("redirected");
    let _ = std::fs::remove_file(&file);
    let inner = "for f in 0 1 2; do echo \"FD$f=$(stat -L -c %d:%i /proc/$$/fd/$f)\"; done; \
                 echo ERR-LINE >&2";
    let outer = format!(
        "'{}' run -- sh -c '{inner}' {redirect}",
        support::envgit_bin()
    )
    .replace("{file}", file.to_str().unwrap());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/pty_run.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["never-asked", "", "--", "sh", "-c", &outer])
        .current_dir(&env.project)
        .env("ENVGIT_HOME", &env.home)
        .env("HOME", env.user_home())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    (shown, std::fs::read_to_string(&file).unwrap_or_default())
}

/// Whichever of envgit's streams is the terminal, the command gets the pty there, never the
/// real terminal (which it could read the person's keys from, or write any sequence to);
/// a stream redirected to a file or from `/dev/null` stays as redirected.
#[test]
fn the_command_never_holds_the_real_terminal_whichever_stream_it_is() {
    let env = Env::new();
    env.init();
    for redirect in [
        "< /dev/null",
        "> '{file}'",
        "2> '{file}'",
        "< /dev/null > '{file}'",
    ] {
        let (shown, redirected) = streams_with(&env, redirect);
        assert!(shown.contains("EXIT=0"), "{redirect}: {shown:?}");
        let outer = fact(&shown, "OUTER_TTY_ID=");
        let both = format!("{shown}\n{redirected}");
        for f in 0..3 {
            let inner = fact(&both, &format!("FD{f}="));
            assert_ne!(
                inner, outer,
                "{redirect}: the command's fd {f} is the real terminal"
            );
        }
        assert!(!shown.contains("\r\r\n"), "{redirect}: {shown:?}");
        match redirect {
            "< /dev/null" => assert!(shown.contains("ERR-LINE\r\n"), "{shown:?}"),
            "2> '{file}'" => {
                assert_eq!(redirected.trim(), "ERR-LINE", "{redirect}: {shown:?}");
                assert!(shown.contains("FD0="), "{shown:?}");
            }
            _ => {
                assert!(redirected.contains("FD0="), "{redirect}: {redirected:?}");
                assert!(shown.contains("ERR-LINE"), "{redirect}: {shown:?}");
            }
        }
    }
}
