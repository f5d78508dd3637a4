//! `envgit ui` over real HTTP against a real history: a refused push, a masked `.env`, a file
//! named like markup, a held `ask` approved from the page (the gate lets exactly that push
//! out and records the web page as the channel), a live step announced by server-sent events,
//! the export, and the UI's port refused to the sandbox whatever `network.allow` says (and no
//! longer once the UI is gone, even killed). In a real browser: every step kind and mark on
//! the timeline and found by the filters, and the export opened from disk with no server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

#[allow(dead_code)]
#[path = "../src/demo/git_server.rs"]
mod git_server;

use std::io::BufRead;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::Env;
use support::ui_client::{Ui, events, request};

const SECRET: &str = "sk-live-ui-test-4f1d9c";
const MARKUP_NAME: &str = "<img src=x onerror=alert(1)>.txt";
const COMMIT: &str = "echo change >> a.txt && git commit -qam change";

/// `envgit run` of a commit and a push to the test's remote, started in the background (an
/// `ask` rule may hold the push until the page answers).
fn start_push(env: &Env) -> std::process::Child {
    env.cmd(&env.project)
        .args([
            "run",
            "sh",
            "-c",
            &format!("{COMMIT} && git push -q origin HEAD:main"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Signs in with the link's code; returns the cookie header's value.
fn sign_in(ui: &Ui) -> String {
    let host = format!("Host: {}", ui.host());
    let a = request(ui.port, "GET", &format!("/?code={}", ui.code()), &[host]);
    assert_eq!(a.status, 303, "{}", a.head);
    assert_eq!(a.header("location").as_deref(), Some("/"));
    let cookie = a.header("set-cookie").unwrap();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(cookie.contains("Path=/"), "{cookie}");
    cookie.split(';').next().unwrap().to_owned()
}

#[test]
fn the_page_is_guarded_shows_the_history_as_data_and_answers_a_held_request() {
    let env = Env::new();
    let (remotes, bare) = env.bare_remote();
    let server = git_server::GitServer::start(&remotes).unwrap();
    let gport = server.port;
    env.clone_project_from(&format!("http://127.0.0.1:{gport}/app.git"));
    env.write(".env", &format!("API_KEY={SECRET}\n"));
    env.write(MARKUP_NAME, "hello\n");
    env.envgit(&["init", "--allow", &format!("127.0.0.1:{gport}")])
        .ok();
    // A refused push (the default preset's git.push).
    let refused = env.envgit(&[
        "run",
        "sh",
        "-c",
        &format!("{COMMIT} && git push -q origin HEAD:main"),
    ]);
    assert_ne!(refused.code, 0, "{}", refused.stderr);
    // The secret changes in a recorded step, so a diff of it exists.
    env.write(".env", &format!("API_KEY={SECRET}-2\n"));
    let env_step = env.record();

    let ui = Ui::start(&env);
    let host = format!("Host: {}", ui.host());
    let port = ui.port;

    // DNS rebinding: another name for this address is refused, even with a valid code.
    let a = request(
        port,
        "GET",
        &format!("/?code={}", ui.code()),
        &[format!("Host: evil.example:{port}")],
    );
    assert_eq!(a.status, 421, "{}", a.head);
    // No cookie: nothing.
    for path in ["/", "/api/steps", "/api/steps/1", "/timeline.js"] {
        let a = request(port, "GET", path, std::slice::from_ref(&host));
        assert_eq!(a.status, 401, "{path}: {}", a.head);
    }
    let cookie = sign_in(&ui);
    // The code works once.
    let again = request(
        port,
        "GET",
        &format!("/?code={}", ui.code()),
        std::slice::from_ref(&host),
    );
    assert_eq!(again.status, 401, "{}", again.head);
    let with = |extra: &[String]| {
        let mut h = vec![host.clone(), format!("Cookie: {cookie}")];
        h.extend_from_slice(extra);
        h
    };
    // `localhost:PORT` is this server too; another port is not.
    let a = request(
        port,
        "GET",
        "/api/project",
        &[
            format!("Host: localhost:{port}"),
            format!("Cookie: {cookie}"),
        ],
    );
    assert_eq!(a.status, 200, "{}", a.head);
    let a = request(
        port,
        "GET",
        "/api/project",
        &[
            format!("Host: 127.0.0.1:{}", port.wrapping_add(1)),
            format!("Cookie: {cookie}"),
        ],
    );
    assert_eq!(a.status, 421, "{}", a.head);

    // The page, with its security headers and no CORS.
    let page = request(port, "GET", "/", &with(&[]));
    assert_eq!(page.status, 200, "{}", page.head);
    let csp = page.header("content-security-policy").unwrap();
    for part in [
        "default-src 'self'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(
        page.header("x-content-type-options").as_deref(),
        Some("nosniff")
    );
    assert_eq!(
        page.header("referrer-policy").as_deref(),
        Some("no-referrer")
    );
    assert!(
        page.header("access-control-allow-origin").is_none(),
        "{}",
        page.head
    );
    assert!(!page.body.contains("<script>"), "inline script in the page");

    // The timeline: the refused push is marked, the markup-named file is plain data.
    let steps = request(port, "GET", "/api/steps?limit=50", &with(&[])).json();
    let rows = steps["rows"].as_array().unwrap();
    assert_eq!(rows[0]["number"].as_u64(), Some(env_step), "{steps}");
    let push_row = rows.iter().find(|r| r["kind"] == "run").unwrap();
    assert!(
        push_row["marks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "refused"),
        "{push_row}"
    );
    assert!(
        push_row["requests"]["denied"].as_u64().unwrap() >= 1,
        "{push_row}"
    );
    let import = request(port, "GET", "/api/steps/1", &with(&[])).json();
    let names: Vec<&str> = import["record"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(names.contains(&MARKUP_NAME), "{names:?}");
    // Filters: by mark.
    let only_refused = request(port, "GET", "/api/steps?mark=refused", &with(&[])).json();
    assert!(only_refused["rows"].as_array().unwrap().iter().all(|r| {
        r["marks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "refused")
    }));

    // The masked file: named, never shown.
    for n in [1, env_step] {
        let diff = request(port, "GET", &format!("/api/steps/{n}/diff"), &with(&[]));
        assert_eq!(diff.status, 200, "{}", diff.body);
        assert!(
            !diff.body.contains(SECRET),
            "step {n}'s diff shows the secret"
        );
        let d = diff.json();
        let f = d["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == ".env")
            .unwrap();
        assert_eq!(f["masked"], true, "{f}");
        let more = request(
            port,
            "GET",
            &format!("/api/steps/{n}/diff?file={}&from=0", f["index"]),
            &with(&[]),
        );
        assert!(!more.body.contains(SECRET));
    }
    let diff = request(port, "GET", "/api/steps/1/diff", &with(&[])).json();
    let markup = diff["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == MARKUP_NAME)
        .unwrap();
    assert!(
        markup["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "+hello"),
        "{markup}"
    );

    // POSTs need the CSRF header and this server's own Origin.
    let target = "/api/held/none/1/1/approve";
    let origin = format!("Origin: http://{}", ui.host());
    let a = request(port, "POST", target, &with(std::slice::from_ref(&origin)));
    assert_eq!(a.status, 403, "{}", a.body);
    let a = request(port, "POST", target, &with(&["X-Envgit-CSRF: 1".into()]));
    assert_eq!(a.status, 403, "{}", a.body);
    let a = request(
        port,
        "POST",
        target,
        &with(&[
            "X-Envgit-CSRF: 1".into(),
            "Origin: http://evil.example".into(),
        ]),
    );
    assert_eq!(a.status, 403, "{}", a.body);
    let a = request(
        port,
        "POST",
        target,
        &with(&["X-Envgit-CSRF: 1".into(), origin.clone()]),
    );
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(a.body.contains("no longer waiting"), "{}", a.body);

    // A held push, approved from the page; the new step arrives on the event stream.
    let yaml = env.read("envgit.yaml").replace(
        "irreversible:\n",
        "irreversible:\n  - net: { host: \"127.0.0.1\", method: POST, path: \"/**/git-receive-pack\" }\n    action: ask\n    id: local.push\n",
    );
    env.write("envgit.yaml", &yaml);
    let mut stream = events(port, &cookie);
    let before = support::head_of(&bare);
    let child = start_push(&env);
    let mut held = serde_json::Value::Null;
    wait_for("the push to be held", || {
        held = request(port, "GET", "/api/held", &with(&[])).json();
        !held.as_array().unwrap().is_empty()
    });
    let h = &held[0];
    assert_eq!(h["method"], "POST", "{h}");
    assert_eq!(h["rule"], "local.push", "{h}");
    assert!(
        h["path"].as_str().unwrap().ends_with("/git-receive-pack"),
        "{h}"
    );
    assert!(!h["body_preview"].as_str().unwrap().is_empty(), "{h}");
    // A stale identity (right id, other time) answers nothing.
    let stale = format!(
        "/api/held/{}/{}/{}/approve",
        h["run"].as_str().unwrap(),
        h["id"],
        h["asked_at_ms"].as_u64().unwrap() + 1
    );
    let a = request(
        port,
        "POST",
        &stale,
        &with(&["X-Envgit-CSRF: 1".into(), origin.clone()]),
    );
    assert_eq!(a.status, 409, "{}", a.body);
    let approve = format!(
        "/api/held/{}/{}/{}/approve",
        h["run"].as_str().unwrap(),
        h["id"],
        h["asked_at_ms"]
    );
    let a = request(
        port,
        "POST",
        &approve,
        &with(&["X-Envgit-CSRF: 1".into(), origin.clone()]),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(
        support::head_of(&bare),
        before,
        "the approved push did not land"
    );
    let step = env.log_json().into_iter().next().unwrap();
    let n = step["number"].as_u64().unwrap();
    let by = step["approvals"][0]["approver"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(by.contains("from the web page (envgit ui)"), "{step}");
    // The event stream announced the step without anyone asking.
    let mut line = String::new();
    let want = format!("data: {{\"head\":{n}}}");
    while !line.trim_end().ends_with(&want) {
        line.clear();
        assert!(
            stream.read_line(&mut line).unwrap() > 0,
            "the event stream ended"
        );
    }
    let detail = request(port, "GET", &format!("/api/steps/{n}"), &with(&[])).json();
    assert_eq!(
        detail["record"]["approvals"][0]["answer"], "approved",
        "{detail}"
    );
    assert!(
        detail["row"]["marks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "irreversible"),
        "{detail}"
    );
    assert_eq!(detail["rewind_command"], format!("envgit rewind {n}"));

    // The sandbox cannot reach the UI, even with its port allowed by the policy.
    let yaml = env.read("envgit.yaml").replace(
        "  allow:\n",
        &format!("  allow:\n    - \"127.0.0.1:{port}\"\n    - \"localhost:{port}\"\n"),
    );
    env.write("envgit.yaml", &yaml);
    for url in [
        format!("http://127.0.0.1:{port}/api/steps"),
        format!("http://localhost:{port}/"),
    ] {
        let out = env.envgit(&[
            "run",
            "sh",
            "-c",
            &format!("curl -s -i {url} > ui.out; true"),
        ]);
        let got = env.read("ui.out");
        assert!(
            out.stderr.contains(&format!(":{port} (rule ui.port)")),
            "{url}: {got}\n{}",
            out.stderr
        );
        assert!(!got.contains("no session"), "{url}: reached the UI: {got}");
    }
    let registry = env
        .home
        .join(format!("rt-{}", rustix_uid()))
        .join("ui-ports")
        .join(port.to_string());
    assert!(registry.exists(), "{}", registry.display());
    ui.stop();
    assert!(
        !registry.exists(),
        "the port's registration outlived the UI"
    );

    // The export: the pages and their data, never the secret.
    let out = env.tmp.path().join("export");
    env.envgit(&["ui", "--export", out.to_str().unwrap()]).ok();
    assert!(out.join("index.html").exists());
    assert!(out.join("data/steps.js").exists());
    assert!(out.join(format!("data/steps/{n}.js")).exists());
    let mut files = 0;
    for entry in walk(&out) {
        let text = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        assert!(
            !text.contains(SECRET),
            "{} holds the secret",
            entry.display()
        );
        files += 1;
    }
    assert!(files > 10, "{files}");
}

fn rustix_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Where the screenshots go: `target/ui-artefacts/`.
fn artefacts() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-artefacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A Copilot tool call as its installed hook reports it: the call wrote `path` (on the host,
/// as Copilot's tools do), then `envgit hook copilot post` gets the payload Copilot sends.
fn copilot_tool_call(env: &Env, path: &str) {
    env.write(path, "written by a tool call\n");
    let payload = serde_json::json!({
        "cwd": env.project,
        "toolName": "create",
        "toolArgs": {"path": path, "file_text": "written by a tool call\n"},
    });
    let out = support::output_with_stdin(
        env.cmd(&env.project).args(["hook", "copilot", "post"]),
        payload.to_string().as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The newest step of the log that `pick` chooses.
fn newest(env: &Env, what: &str, pick: impl Fn(&serde_json::Value) -> bool) -> u64 {
    let log = env.log_json();
    let step = log
        .iter()
        .find(|s| pick(s))
        .unwrap_or_else(|| panic!("no {what} step in {log:#?}"));
    step["number"].as_u64().unwrap()
}

fn has_flag(step: &serde_json::Value, flag: &str) -> bool {
    step["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == flag))
}

/// Every row the timeline in `browser` shows, as (number, kind, marks).
fn shown_rows(browser: &support::webdriver::Session<'_>) -> Vec<(u64, String, String)> {
    let rows = browser.run(
        "return [...document.querySelectorAll('#rows tr')].map((tr) => \
         [Number(tr.id.slice(5)), tr.querySelector('td.kind').textContent, tr.dataset.marks])",
        serde_json::json!([]),
    );
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[0].as_u64().unwrap(),
                r[1].as_str().unwrap().to_owned(),
                r[2].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Opens the timeline at `url` (a filter in its query) and checks that it shows step `n` and
/// only rows that pass: `kind` or `mark`.
/// The page of the step whose push was approved from the web page: its request, who approved
/// it, and its diff.
fn assert_pushed_step_page(browser: &support::webdriver::Session<'_>) {
    browser.wait_for("#requests tbody tr");
    let text = browser.text(&browser.wait_for("#requests"));
    assert!(
        text.contains("git-receive-pack") && text.contains("approved"),
        "{text}"
    );
    let approvals = browser.text(&browser.wait_for("#approvals li"));
    assert!(
        approvals.contains("from the web page (envgit ui)"),
        "{approvals}"
    );
    let file = browser.text(&browser.wait_for(".file"));
    assert!(file.contains("a.txt") && file.contains("+change"), "{file}");
}

fn filter_finds(
    browser: &support::webdriver::Session<'_>,
    url: &str,
    n: u64,
    kind: Option<&str>,
    mark: Option<&str>,
) {
    browser.goto(url);
    browser.wait_for(&format!("#step-{n}"));
    let rows = shown_rows(browser);
    assert!(!rows.is_empty());
    for (number, k, marks) in &rows {
        if let Some(kind) = kind {
            assert_eq!(k, kind, "{url}: step {number} passed the filter");
        }
        if let Some(mark) = mark {
            assert!(
                marks.split(' ').any(|m| m == mark),
                "{url}: step {number} ({marks}) passed the filter"
            );
        }
    }
}

#[test]
fn in_a_real_browser_the_timeline_shows_each_kind_and_mark_a_held_push_is_approved_and_a_live_step_appears()
 {
    if let Err(why) = support::webdriver::available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must run the browser test: {why}"
        );
        eprintln!("SKIPPED the browser test: {why}");
        return;
    }
    let env = Env::new();
    let (remotes, bare) = env.bare_remote();
    let server = git_server::GitServer::start(&remotes).unwrap();
    let gport = server.port;
    env.clone_project_from(&format!("http://127.0.0.1:{gport}/app.git"));
    env.write(MARKUP_NAME, "hello\n");
    env.write(".env", &format!("API_KEY={SECRET}\n"));
    env.envgit(&["init", "--allow", &format!("127.0.0.1:{gport}")])
        .ok();
    let refused = env.envgit(&[
        "run",
        "sh",
        "-c",
        &format!("{COMMIT} && git push -q origin HEAD:main"),
    ]);
    assert_ne!(refused.code, 0, "{}", refused.stderr);
    let refused_step = env.log_json()[0]["number"].as_u64().unwrap();
    // A protected path written inside, put back after the step.
    env.envgit(&[
        "run",
        "sh",
        "-c",
        "printf 'export X=1\\n' > .envrc; echo b > b.txt",
    ]);
    let put_back_step = env.log_json()[0]["number"].as_u64().unwrap();
    // A tool call of an agent, reported by its hook.
    copilot_tool_call(&env, "made-by-tool.txt");
    let tool_step = newest(&env, "tool", |s| s["kind"] == "tool");
    // The secret changes in a recorded step, so a diff of it exists.
    env.write(".env", &format!("API_KEY={SECRET}-2\n"));
    let secret_step = env.record();
    // Edits on the host, then a REPL cell that reads 300 KB from a tool and returns a number:
    // the session first records the edits on their own (outside), then the cell (low-return).
    support::mcp_client::add_fx_server(&env, "");
    env.write("edited-outside.txt", "by hand\n");
    let out = support::mcp_client::drive(
        &env,
        serde_json::json!([{"code": "const big = await fx.big(); big.length"}]),
        "auto",
        None,
    );
    assert!(!out["results"][0]["is_error"].as_bool().unwrap(), "{out}");
    let outside_step = newest(&env, "outside", |s| has_flag(s, "outside"));
    let repl_step = newest(&env, "low-return repl", |s| {
        s["kind"] == "repl" && has_flag(s, "low_return")
    });
    // A record, then a rewind past it (it stays in the history, rewound over).
    env.write("recorded.txt", "kept by record\n");
    let record_step = env.record();
    env.envgit(&["rewind", &repl_step.to_string()]).ok();
    let rewind_step = newest(&env, "rewind", |s| s["kind"] == "rewind");
    // A fork: the first step of a new project's history.
    let fork_dir = env.tmp.path().join("fork");
    env.envgit(&["fork", &tool_step.to_string(), fork_dir.to_str().unwrap()])
        .ok();
    let yaml = env.read("envgit.yaml").replace(
        "irreversible:\n",
        "irreversible:\n  - net: { host: \"127.0.0.1\", method: POST, path: \"/**/git-receive-pack\" }\n    action: ask\n    id: local.push\n",
    );
    env.write("envgit.yaml", &yaml);

    let ui = Ui::start(&env);
    let driver = support::webdriver::Driver::start();
    let browser = driver.session();
    browser.goto(&ui.url);
    // The code was traded for the cookie and is gone from the address bar.
    let url = browser.run("return location.href", serde_json::json!([]));
    assert_eq!(url, format!("http://127.0.0.1:{}/", ui.port));
    // Every kind, with its mark where it has one.
    let expected: [(u64, &str, Option<&str>); 9] = [
        (1, "import", None),
        (refused_step, "run", Some("refused")),
        (put_back_step, "run", Some("put-back")),
        (tool_step, "tool", None),
        (secret_step, "record", None),
        (outside_step, "record", Some("outside")),
        (repl_step, "repl", Some("low-return")),
        (record_step, "record", Some("rewound-over")),
        (rewind_step, "rewind", None),
    ];
    for (n, kind, mark) in expected {
        let row = browser.wait_for(&format!("#step-{n} td.kind"));
        assert_eq!(browser.text(&row), kind, "step {n}");
        if let Some(mark) = mark {
            let e = browser.wait_for(&format!("#step-{n} .mark.{mark}"));
            assert_eq!(browser.text(&e), mark, "step {n}");
        }
    }
    // The markup-named file's row is text: no element was made from it.
    let imgs = browser.run(
        "return document.querySelectorAll('img').length",
        serde_json::json!([]),
    );
    assert_eq!(imgs, 0);
    std::fs::write(artefacts().join("timeline.png"), browser.screenshot()).unwrap();
    if std::env::var_os("ENVGIT_UI_DOCS_SCREENSHOT").is_some() {
        let docs =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ui-timeline.png");
        std::fs::write(docs, browser.screenshot()).unwrap();
    }
    // The filters find each by kind and by mark (a link holds the filter).
    let base = format!("http://127.0.0.1:{}/", ui.port);
    for (n, kind, mark) in expected {
        filter_finds(
            &browser,
            &format!("{base}?kind={kind}"),
            n,
            Some(kind),
            None,
        );
        if let Some(mark) = mark {
            filter_finds(
                &browser,
                &format!("{base}?mark={mark}"),
                n,
                None,
                Some(mark),
            );
        }
    }
    browser.goto(&base);
    browser.wait_for(&format!("#step-{rewind_step}"));

    // A held push: shown with its body's first bytes, approved with the page's button.
    let before = support::head_of(&bare);
    let child = start_push(&env);
    let item = browser.wait_for("#held-list .held-item");
    let shown = browser.text(&item);
    assert!(shown.contains("POST 127.0.0.1"), "{shown}");
    assert!(shown.contains("git-receive-pack"), "{shown}");
    std::fs::write(artefacts().join("held.png"), browser.screenshot()).unwrap();
    let approve = browser.wait_for("#held-list .held-item button.approve");
    browser.click(&approve);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(
        support::head_of(&bare),
        before,
        "the approved push did not land"
    );
    let pushed = env.log_json()[0]["number"].as_u64().unwrap();
    // The new step appears without a reload, marked irreversible.
    browser.wait_for(&format!("#step-{pushed} .mark.irreversible"));
    let reloaded = browser.run(
        "return performance.getEntriesByType('navigation').length",
        serde_json::json!([]),
    );
    assert_eq!(reloaded, 1, "the page was reloaded");

    // The step page: its requests and its diff.
    browser.goto(&format!("http://127.0.0.1:{}/step?n={pushed}", ui.port));
    assert_pushed_step_page(&browser);
    std::fs::write(artefacts().join("step.png"), browser.screenshot()).unwrap();
    browser.goto(&format!("http://127.0.0.1:{}/step?n=1", ui.port));
    let files = browser.wait_for(".file h3");
    assert!(!browser.text(&files).is_empty());

    // Another name for the server, or no cookie: refused.
    browser.goto(&format!("http://localhost:{}/api/steps", ui.port));
    let body = browser.text(&browser.wait_for("body"));
    assert!(body.contains("no session"), "{body}");
    ui.stop();

    // The fork's own history starts with its fork step.
    let fork_ui = Ui::start_in(&env, &fork_dir);
    browser.goto(&fork_ui.url);
    let row = browser.wait_for("#step-1 td.kind");
    assert_eq!(browser.text(&row), "fork");
    let fork_base = format!("http://127.0.0.1:{}/", fork_ui.port);
    filter_finds(
        &browser,
        &format!("{fork_base}?kind=fork"),
        1,
        Some("fork"),
        None,
    );
    fork_ui.stop();

    // The export, opened from disk with no server: the timeline, its filters and a step page.
    let export = env.tmp.path().join("export");
    env.envgit(&["ui", "--export", export.to_str().unwrap()])
        .ok();
    for file in walk(&export) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "{} holds the secret",
            file.display()
        );
    }
    let index = format!("file://{}/index.html", export.display());
    browser.goto(&index);
    for (n, kind, mark) in expected {
        let row = browser.wait_for(&format!("#step-{n} td.kind"));
        assert_eq!(browser.text(&row), kind, "exported step {n}");
        if let Some(mark) = mark {
            browser.wait_for(&format!("#step-{n} .mark.{mark}"));
        }
    }
    browser.wait_for(&format!("#step-{pushed} .mark.irreversible"));
    let csp = browser.run(
        "const m = document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]'); \
         return m ? m.content : ''",
        serde_json::json!([]),
    );
    let csp = csp.as_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let imgs = browser.run(
        "return document.querySelectorAll('img').length",
        serde_json::json!([]),
    );
    assert_eq!(imgs, 0);
    std::fs::write(
        artefacts().join("export-timeline.png"),
        browser.screenshot(),
    )
    .unwrap();
    for (n, kind, mark) in expected {
        filter_finds(
            &browser,
            &format!("{index}?kind={kind}"),
            n,
            Some(kind),
            None,
        );
        if let Some(mark) = mark {
            filter_finds(
                &browser,
                &format!("{index}?mark={mark}"),
                n,
                None,
                Some(mark),
            );
        }
    }
    // By path: the tool's file, and no step that did not change it.
    browser.goto(&format!("{index}?path=made-by-tool"));
    browser.wait_for(&format!("#step-{tool_step}"));
    let numbers: Vec<u64> = shown_rows(&browser).iter().map(|r| r.0).collect();
    assert!(!numbers.contains(&put_back_step), "{numbers:?}");
    // The link from a row leads to the step's page, with its diff, requests and approvals.
    browser.goto(&index);
    let link = browser.wait_for(&format!("#step-{pushed} a"));
    browser.click(&link);
    assert_pushed_step_page(&browser);
    std::fs::write(artefacts().join("export-step.png"), browser.screenshot()).unwrap();
    // The secret's step: the file is named, its content masked.
    browser.goto(&format!(
        "file://{}/step.html?n={secret_step}",
        export.display()
    ));
    let masked = browser.text(&browser.wait_for(".file"));
    assert!(masked.contains(".env (masked)"), "{masked}");
}

/// A UI killed with SIGKILL cannot remove its port's entry: the entry must stop refusing
/// that port (something else may serve it next) and the next `envgit ui` removes it.
#[test]
fn a_ui_killed_with_sigkill_leaves_an_entry_that_refuses_nothing_and_the_next_ui_removes_it() {
    let env = Env::new();
    env.envgit(&["init", "--allow", "127.0.0.1:1"]).ok();
    let ui = Ui::start(&env);
    let port = ui.port;
    let registry = env
        .home
        .join(format!("rt-{}", rustix_uid()))
        .join("ui-ports");
    let entry = registry.join(port.to_string());
    assert!(entry.exists(), "{}", entry.display());
    ui.kill();
    assert!(entry.exists(), "the killed UI removed its entry after all");
    // Another server on that port, which the policy allows: the sandbox reaches it.
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            use std::io::{Read, Write};
            let mut stream = stream.unwrap();
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nnot the UI ok",
            );
        }
    });
    let yaml = env.read("envgit.yaml").replace(
        "  allow:\n",
        &format!("  allow:\n    - \"127.0.0.1:{port}\"\n"),
    );
    env.write("envgit.yaml", &yaml);
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        &format!("curl -s http://127.0.0.1:{port}/ > got.txt; true"),
    ]);
    assert!(!out.stderr.contains("rule ui.port"), "{}", out.stderr);
    assert_eq!(env.read("got.txt"), "not the UI ok", "{}", out.stderr);
    // The next UI cleans the stale entry up and registers its own.
    let next = Ui::start(&env);
    assert!(!entry.exists(), "the stale entry is still there");
    assert!(registry.join(next.port.to_string()).exists());
    next.stop();
}
