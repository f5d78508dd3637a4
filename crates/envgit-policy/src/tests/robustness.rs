//! No input makes the parser panic; every failure is a `PolicyError` with a position.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::Policy;

fn check(text: &str) {
    if let Err(e) = Policy::parse("envgit.yaml", text) {
        assert!(e.line >= 1 && e.column >= 1, "{e}");
        assert!(!e.message.is_empty());
        assert!(!e.to_string().contains('\n'), "{e:?}");
    }
}

#[test]
fn garbage_never_panics() {
    let deep_flow = "[".repeat(10_000) + &"]".repeat(10_000);
    let deep_block: String = (0..2_000)
        .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
        .collect();
    let deep_version = format!(
        "version: 1\nirreversible:\n  - net: {{ host: a.com, body: {}1{} }}\n    action: deny\n",
        "[".repeat(60),
        "]".repeat(60)
    );
    let many_aliases = format!(
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [{}]\nc: &c [{}]\nd: [{}]\n",
        ["*a"; 9].join(","),
        ["*b"; 9].join(","),
        ["*c"; 9].join(",")
    );
    let inputs = [
        "",
        "\n\n\n",
        "\t",
        "\tversion: 1",
        "version:\t1",
        "version: 1\n\t",
        "~",
        "null",
        "42",
        "\"a string\"",
        "---\n---\n",
        "version: 1\n---\nversion: 1\n",
        "...",
        "{",
        "}",
        "[",
        ":",
        "? [a, b]\n: c\n",
        "version: 1\n? [a]\n: b\n",
        "version: 1\nnetwork:\n  l7:\n    ? [a]\n    : {}\n",
        "version: 1\nmcp: { tools: { [a]: allow } }\n",
        "version: !!binary AAAA",
        "version: !custom 1",
        "version: 1\nenv: &e { pass: [A] }\nnetwork: *e\n",
        "version: 1\n<<: { env: {} }\n",
        "version: 99999999999999999999999999999999999999999999",
        "version: 1\nsnapshot: { budget: 99999999999999999999999999999999999999999 }\n",
        "version: 1\nsnapshot: { budget: -1 }\n",
        "version: 1\nsnapshot: { budget: .nan }\n",
        "version: 1\nirreversible:\n  - net: { host: a.com, body: .inf }\n    action: deny\n",
        "version: 1\nirreversible:\n  - net: { host: \"[\" }\n    action: deny\n",
        "version: 1\nirreversible:\n  - net: { host: \"[::1]x\" }\n    action: deny\n",
        "version: 1\nnetwork: { allow: [\"\", \":\", \"*.\", \"a:\", \"[]:1\"] }\n",
        "\u{feff}version: 1\n",
        "version: 1\u{0}\n",
        "version: 1\nenv: { pass: [\"\u{202e}evil\"] }\n",
        "\"\\",
        "'",
        "&a *a",
        "*unknown",
        &deep_flow,
        &deep_block,
        &deep_version,
        &many_aliases,
    ];
    for text in inputs {
        check(text);
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    // Texts over YAML-significant characters.
    let alphabet: Vec<char> = "version: 1\n\t -[]{}:,&*!|>'\"#%@`?~.0x\u{0}é"
        .chars()
        .collect();
    let text = proptest::collection::vec(proptest::sample::select(alphabet), 0..64)
        .prop_map(|v| v.into_iter().collect::<String>());
    let config = Config {
        cases: 3_000,
        failure_persistence: None,
        ..Config::default()
    };
    let outcome = TestRunner::new(config).run(&text, |text| {
        check(&text);
        check(&format!("version: 1\n{text}"));
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
