//! How fast `envgit ui` paints: the first 50 rows of a 10,000-step timeline, and the first
//! screen of a 5,000-line diff, in headless chromium (over WebDriver), each against the same
//! rows served as a static HTML page from loopback in the same run, alternating A/B. The
//! page marks `envgit:first-rows` / `envgit:first-diff` in the frame after it inserted them;
//! the static anchor's time is its first contentful paint (its rows are its content). Both are
//! milliseconds since the navigation began. Prints medians and ratios; never fails on timing.
//!
//! `cargo run -p envgit-bench --bin ui-paint -- [--rounds 7] [--steps 10000]` (builds on the
//! `envgit` binary beside this one: `cargo build -p envgit` first). Needs chromium and
//! chromedriver (`apt-get install chromium chromium-driver`).

#[path = "../../../envgit/tests/support/webdriver.rs"]
mod webdriver;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use envgit_store::{Request, RequestOutcome, StepDraft, StepKind, Store};
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// A/B rounds per page.
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Steps in the history.
    #[arg(long, default_value_t = 10_000)]
    steps: u64,
}

const DIFF_LINES: usize = 5000;

fn envgit_exe() -> Result<PathBuf> {
    let exe = std::env::current_exe()?.with_file_name("envgit");
    if !exe.exists() {
        bail!(
            "{} is missing: build it first (cargo build -p envgit)",
            exe.display()
        );
    }
    Ok(exe)
}

fn envgit(home: &Path, project: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(envgit_exe()?)
        .args(args)
        .current_dir(project)
        .env("ENVGIT_HOME", home)
        .env("NO_COLOR", "1")
        .output()?;
    if !out.status.success() {
        bail!("envgit {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The project's store directory under `home`.
fn store_dir(home: &Path, project: &Path) -> Result<PathBuf> {
    let canon = project.canonicalize()?.display().to_string();
    for e in std::fs::read_dir(home.join("projects"))? {
        let d = e?.path();
        if std::fs::read_to_string(d.join("store.json")).is_ok_and(|m| m.contains(&canon)) {
            return Ok(d);
        }
    }
    bail!("no store for {canon}")
}

/// A static page of `body` with the UI's own stylesheet, served from loopback.
fn serve_static(pages: Vec<(String, String)>) -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut reader = BufReader::new(match stream.try_clone() {
                Ok(s) => s,
                Err(_) => continue,
            });
            let mut first = String::new();
            if reader.read_line(&mut first).is_err() {
                continue;
            }
            let path = first.split_whitespace().nth(1).unwrap_or("/").to_owned();
            loop {
                let mut l = String::new();
                if reader.read_line(&mut l).map_or(true, |n| n == 0) || l == "\r\n" {
                    break;
                }
            }
            let body = pages
                .iter()
                .find(|(p, _)| *p == path)
                .map_or(String::new(), |(_, b)| b.clone());
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(port)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn page(css: &str, body: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=utf-8><style>{css}</style></head><body>{body}</body></html>"
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Milliseconds since navigation until the entry named `mark` (a performance mark, or the
/// first contentful paint) exists.
fn time_to(browser: &webdriver::Session<'_>, url: &str, mark: &str) -> f64 {
    browser.goto(url);
    let v: Value = browser.run_async(
        "const [name, done] = arguments;
         const until = performance.now() + 10000;
         function look() {
           const e = performance.getEntriesByName(name)[0];
           if (e) done(e.startTime);
           else if (performance.now() > until)
             done(name + ' never came; entries: ' + performance.getEntries().map((x) => x.name).join(' ') + ' body: ' + document.body.innerText.slice(0, 300));
           else setTimeout(look, 5);
         }
         look();",
        json!([mark]),
    );
    v.as_f64().unwrap_or_else(|| panic!("{url}: {v}"))
}

fn main() -> Result<()> {
    let args = Args::parse();
    webdriver::available().map_err(anyhow::Error::msg)?;
    let tmp = tempfile::tempdir()?;
    let home = tmp.path().join("home");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(project.join("README.md"), "bench\n")?;
    envgit(&home, &project, &["init"])?;
    let big: String = (0..DIFF_LINES)
        .map(|i| format!("line {i} of the big diff\n"))
        .collect();
    std::fs::write(project.join("big.txt"), big)?;
    let rec: Value = serde_json::from_str(&envgit(&home, &project, &["record", "--json"])?)?;
    let diff_step = rec["number"].as_u64().context("record --json")?;

    let t = Instant::now();
    let mut store = Store::open(&store_dir(&home, &project)?)?;
    let tree = store.step_tree(diff_step)?;
    let from = store.step_count() as u64;
    for i in from..args.steps {
        let mut guard = store.begin_step("bench")?;
        let mut draft = StepDraft {
            kind: Some(StepKind::Run),
            started_at_ms: envgit_store::now_ms(),
            summary: format!("cargo test --package app{} -- --nocapture", i % 17),
            command: Some(vec!["cargo".into(), "test".into()]),
            exit_code: Some(i32::from(i % 13 == 0)),
            ..StepDraft::default()
        };
        if i % 5 == 0 {
            draft.requests.push(Request {
                method: "GET".into(),
                host: "crates.io".into(),
                path: format!("/api/v1/crates/c{i}"),
                status: Some(200),
                decision: RequestOutcome::Allowed,
                ..Request::default()
            });
        }
        store.commit(&mut guard, draft, tree)?;
    }
    // The diff step stays the one to look at; the history ends with the bulk steps.
    println!(
        "history: {} steps made in {:.1} s",
        args.steps,
        t.elapsed().as_secs_f64()
    );

    let mut ui = Command::new(envgit_exe()?)
        .args(["ui", "--json"])
        .current_dir(&project)
        .env("ENVGIT_HOME", &home)
        .stdout(Stdio::piped())
        .spawn()?;
    let mut text = String::new();
    let mut out = BufReader::new(ui.stdout.take().context("ui stdout")?);
    while !text.trim_end().ends_with('}') {
        if out.read_line(&mut text)? == 0 {
            bail!("envgit ui printed {text}");
        }
    }
    let started: Value = serde_json::from_str(&text)?;
    let link = started["url"].as_str().context("url")?.to_owned();
    let port = started["port"].as_u64().context("port")?;
    let base = format!("http://127.0.0.1:{port}");

    // The anchors: the same first 50 rows, the same first screen of the diff, as static HTML.
    let css = include_str!("../../../envgit/src/ui/assets/ui.css");
    let steps = store.steps()?;
    let rows: String = steps
        .iter()
        .rev()
        .take(50)
        .map(|s| {
            format!(
                "<tr><td class=num><a href=#>{}</a></td><td>{}</td><td class=what>{}</td><td class=num>{} ms</td><td class=num>{}</td><td class=num></td><td>{}</td><td></td></tr>",
                s.number,
                s.kind.as_str(),
                escape(&s.summary),
                s.ended_at_ms - s.started_at_ms,
                s.exit_code.unwrap_or(0),
                if s.requests.is_empty() { "" } else { "1 allowed" }
            )
        })
        .collect();
    let diff_text = envgit(
        &home,
        &project,
        &["--no-pager", "diff", &diff_step.to_string()],
    )?;
    let diff_lines: String = diff_text
        .lines()
        .take(400)
        .map(|l| format!("<span class=add>{}</span>", escape(l)))
        .collect();
    let anchor = serve_static(vec![
        (
            "/rows".into(),
            page(css, &format!("<table><tbody>{rows}</tbody></table>")),
        ),
        (
            "/diff".into(),
            page(
                css,
                &format!("<div class=file><pre>{diff_lines}</pre></div>"),
            ),
        ),
    ])?;
    let anchor = format!("http://127.0.0.1:{anchor}");

    let driver = webdriver::Driver::start();
    let browser = driver.session();
    browser.goto(&link);
    let shown = browser.run("return location.href", json!([]));
    println!("signed in: {shown}");
    let (mut ui_rows, mut st_rows, mut ui_diff, mut st_diff) = (vec![], vec![], vec![], vec![]);
    // One warm-up of each, then alternate.
    for round in 0..=args.rounds {
        let a = time_to(&browser, &format!("{base}/"), "envgit:first-rows");
        let rows_now = browser.run(
            "return document.querySelectorAll('#rows tr').length",
            json!([]),
        );
        let b = time_to(
            &browser,
            &format!("{anchor}/rows"),
            "first-contentful-paint",
        );
        let c = time_to(
            &browser,
            &format!("{base}/step?n={diff_step}"),
            "envgit:first-diff",
        );
        let d = time_to(
            &browser,
            &format!("{anchor}/diff"),
            "first-contentful-paint",
        );
        if round == 0 {
            println!("warm-up: {rows_now} rows painted at the mark");
            continue;
        }
        ui_rows.push(a);
        st_rows.push(b);
        ui_diff.push(c);
        st_diff.push(d);
    }
    let report = |what: &str, ui: Vec<f64>, st: Vec<f64>| {
        let (u, s) = (median(ui), median(st));
        println!(
            "{what}: envgit ui {u:.0} ms, static {s:.0} ms, ratio {:.2}x (goal <= 2x and <= 300 ms: {})",
            u / s,
            if u <= 2.0 * s && u <= 300.0 {
                "met"
            } else {
                "not met"
            }
        );
    };
    report(
        &format!("first 50 rows of {} steps", args.steps),
        ui_rows,
        st_rows,
    );
    report(
        &format!("first screen of a {DIFF_LINES}-line diff"),
        ui_diff,
        st_diff,
    );
    drop(browser);
    drop(driver);
    let _ = Command::new("kill")
        .args(["-TERM", &ui.id().to_string()])
        .status();
    let _ = ui.wait();
    let mut load = String::new();
    if let Ok(mut f) = std::fs::File::open("/proc/loadavg") {
        let _ = f.read_to_string(&mut load);
    }
    println!("load average: {}", load.trim());
    Ok(())
}
