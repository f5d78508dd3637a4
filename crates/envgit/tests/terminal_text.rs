//! What a step leaves behind is shown on the person's terminal later: file names the command
//! made, its command line, its working directory. Those are the agent's text, and a terminal
//! acts on control characters in them (`ESC]52;c;…` puts text in the clipboard, `ESC[2K` and
//! `ESC[1A` erase what envgit printed above, `ESC[8m` hides what follows). Every listing envgit
//! prints shows them escaped (as git quotes such paths), never raw.

mod support;

use support::Env;

/// A clipboard write, a line erase with the cursor moved up, a hidden-text switch, the same
/// CSI in its one-byte C1 form (UTF-8 `U+009B`), a newline that would forge a line of the
/// listing, and a right-to-left override that shows `exe.txt` as `txt.exe` (the person reads
/// a name other than the one there).
const HOSTILE: [&str; 6] = [
    "clip\x1b]52;c;ZWNobyBvd25lZA==\x07.txt",
    "erase\r\x1b[2K\x1b[1Afake.txt",
    "hide\x1b[8m.txt",
    "c1\u{9b}8m.txt",
    "nl\n   9  run     FORGED.txt",
    "bidi\u{202e}txt.exe",
];

/// The start of a line the newline in a name would forge.
const FORGED: &str = "\n   9  run     FORGED";

/// Any byte a terminal treats as a control: C0 but newline and tab, DEL, and C1 (raw or as
/// UTF-8); and the characters that reorder the text around them (bidirectional overrides
/// and isolates).
fn controls(text: &str) -> Vec<String> {
    let reorders = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    text.char_indices()
        .filter(|(_, c)| (c.is_control() && *c != '\n' && *c != '\t') || reorders(*c))
        .map(|(i, c)| {
            let from = text[..i].char_indices().rev().nth(30).map_or(0, |(j, _)| j);
            format!("{:?} in …{:?}", c, &text[from..i])
        })
        .collect()
}

#[test]
fn names_and_commands_from_a_step_reach_the_terminal_escaped() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    // A git project: what a step writes into `.git` that is not imported is named on stderr.
    env.git(&env.project, &["init", "-q"]);
    env.init().ok();
    // The command makes the hostile names, in a hostile directory, with its own hostile text
    // on its command line (after `#`, so the shell ignores it).
    let script = format!(
        "mkdir -p \"$(printf 'dir\\033[8m')\" && cd \"$(printf 'dir\\033[8m')\" && \
         for n in {}; do printf x > \"$(printf \"$n\")\"; done; \
         cd .. && mkdir -p .vscode && printf x > .vscode/\"$(printf 'set\\033]52;c;cHduZWQ=\\007')\" && \
         printf x > \"$(printf '.git/x\\033[8m')\" \
         # \x1b]52;c;cHduZWQ=\x07",
        HOSTILE
            .iter()
            .map(|n| format!(
                "'{}'",
                n.replace('\x1b', "\\033")
                    .replace('\x07', "\\007")
                    .replace('\r', "\\r")
                    .replace('\n', "\\n")
                    .replace('\u{9b}', "\\302\\233")
                    .replace('\u{202e}', "\\342\\200\\256")
            ))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let dir = env.path("dir\x1b[8m");
    let run = env.envgit(&["run", "--", "sh", "-c", &script]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for n in HOSTILE {
        assert!(dir.join(n).exists(), "the command did not make {n:?}");
    }
    // A step whose working directory is the hostile one, and a rewind over all of it.
    env.envgit_in(&dir, &["run", "--", "rm", HOSTILE[0]]).ok();
    let mut failures = Vec::new();
    for args in [
        &["log"][..],
        &["log", "-v"],
        &["show"],
        &["show", "2"],
        &["diff", "1", "2"],
        &["diff", "--stat", "1", "2"],
        &["rewind", "1"],
        &["log", "-v"],
    ] {
        let out = env.envgit(args);
        for (stream, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let found = controls(text);
            if !found.is_empty() {
                failures.push(format!(
                    "envgit {}: {stream}: {}",
                    args.join(" "),
                    found.join(", ")
                ));
            }
            if text.contains(FORGED) {
                failures.push(format!(
                    "envgit {}: {stream}: a forged line",
                    args.join(" ")
                ));
            }
        }
    }
    // And `envgit run`'s own lines (the command itself prints nothing), among them the
    // protected path it put back and the file in `.git` it did not import.
    assert!(
        run.stderr.contains("was put back (protected path)"),
        "{}",
        run.stderr
    );
    for (stream, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
        let found = controls(text);
        if !found.is_empty() {
            failures.push(format!("envgit run: {stream}: {}", found.join(", ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A diff shows the agent's file content: on a terminal its control characters (but tabs)
/// are escaped, and piped to a file or a program it is exact, so a patch stays a patch.
#[test]
fn a_files_own_control_characters_are_escaped_in_a_diff_on_a_terminal_only() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.init().ok();
    env.envgit(&[
        "run",
        "--",
        "sh",
        "-c",
        "printf 'x\\033]52;c;cHduZWQ=\\007y\\tz\\n' > a.txt",
    ])
    .ok();
    let out = env
        .on_terminal("never-asked", "", &["--no-pager", "diff", "1", "2"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("+x\\x1b]52;c;cHduZWQ=\\x07y\tz"),
        "{shown:?}"
    );
    assert!(!shown.contains('\x1b'), "{shown:?}");
    let piped = env.envgit(&["diff", "1", "2"]).ok();
    assert!(
        piped.stdout.contains("+x\x1b]52;c;cHduZWQ=\x07y\tz"),
        "{:?}",
        piped.stdout
    );
}

/// An agent's refused file tool gets envgit's reason back, and its interface shows that to the
/// person: the path in it, the agent's, comes escaped too.
#[test]
fn a_refusal_an_agent_is_told_names_its_path_escaped() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.init().ok();
    let payload = serde_json::json!({
        "cwd": env.project.display().to_string(),
        "toolName": "create",
        "toolArgs": {"path": ".vscode/x\u{1b}]52;c;cHduZWQ=\u{7}.json", "file_text": "{}"},
    });
    let out = support::output_with_stdin(
        env.cmd(&env.project).args(["hook", "copilot", "pre"]),
        payload.to_string().as_bytes(),
    );
    let reply: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let reason = reply["permissionDecisionReason"].as_str().unwrap();
    assert!(reason.contains("filesystem.protected"), "{reason}");
    assert!(controls(reason).is_empty(), "{reason:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(controls(&stderr).is_empty(), "{stderr:?}");
}
