#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::*;

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(5),
        ..Limits::default()
    }
}

async fn session() -> Session {
    Session::new(&Catalog::default(), limits(), 7)
        .await
        .unwrap()
}

async fn run(s: &Session, code: &str) -> CellOutcome {
    s.execute(code, &CellOptions::default(), Arc::new(NoHost))
        .await
        .unwrap()
}

async fn value(s: &Session, code: &str) -> String {
    let o = run(s, code).await;
    assert_eq!(o.status, CellStatus::Ok, "{code}: {:?}", o.error);
    o.value.unwrap_or_default()
}

/// `fx.echo(args)` returns its arguments; `fx.big()` returns 100 KB; `fx.fail()` fails.
struct Fixture {
    calls: AtomicUsize,
}

impl Host for Fixture {
    fn call(&self, call: HostCall) -> HostFuture {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            match call.tool.as_str() {
                "echo" => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok(call.args)
                }
                "big" => Ok(serde_json::json!({ "rows": vec!["x".repeat(100); 1000] })),
                "hang" => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(serde_json::Value::Null)
                }
                _ => Err("it broke".to_string()),
            }
        })
    }
}

fn fixture_catalog() -> Catalog {
    let tool = |n: &str| ToolEntry {
        name: n.into(),
        wire: n.into(),
        description: format!("the {n} tool"),
        ts: format!("function {n}(args: object): Promise<unknown>;"),
    };
    Catalog {
        namespaces: vec![Namespace {
            name: "fx".into(),
            server: "fx".into(),
            tools: vec![tool("echo"), tool("big"), tool("fail"), tool("hang")],
        }],
    }
}

#[tokio::test]
async fn declarations_persist_between_cells() {
    let s = session().await;
    value(
        &s,
        "let a = 40; const b = 1; var c = 1; function f() { return a + b + c }",
    )
    .await;
    assert_eq!(value(&s, "f()").await, "42");
    assert_eq!(
        value(&s, "a = a + 1; [typeof b, typeof c, typeof f]").await,
        r#"["number","number","function"]"#
    );
    assert_eq!(value(&s, "a").await, "41");
}

#[tokio::test]
async fn last_expression_is_the_value_and_console_is_captured() {
    let s = session().await;
    let o = run(
        &s,
        "console.log('hi', {a: 1}, [2]); console.error('bad'); 'done'",
    )
    .await;
    assert_eq!(o.status, CellStatus::Ok);
    assert_eq!(o.text, "hi {\"a\":1} [2]\nerror: bad\n\"done\"");
    assert_eq!(o.value.as_deref(), Some("\"done\""));
    let o = run(&s, "let z = 1").await;
    assert_eq!(o.value, None);
    assert_eq!(value(&s, "await Promise.resolve(5)").await, "5");
    let cyc = value(&s, "const o = {n: 1}; o.self = o; o").await;
    assert_eq!(cyc, r#"{"n":1,"self":"[Circular]"}"#);
}

#[tokio::test]
async fn infinite_loop_is_interrupted_and_the_session_survives() {
    let s = session().await;
    value(&s, "let kept = 'yes'").await;
    let t = Instant::now();
    let o = s
        .execute(
            "while (true) {}",
            &CellOptions {
                timeout: Some(Duration::from_millis(200)),
            },
            Arc::new(NoHost),
        )
        .await
        .unwrap();
    assert_eq!(o.status, CellStatus::Timeout, "{:?}", o.error);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(o.error.unwrap().contains("200 ms"));
    // try/catch cannot keep it alive either.
    let o = s
        .execute(
            "try { while (true) {} } catch (e) { 'caught' }",
            &CellOptions {
                timeout: Some(Duration::from_millis(100)),
            },
            Arc::new(NoHost),
        )
        .await
        .unwrap();
    assert_eq!(o.status, CellStatus::Timeout);
    assert_eq!(value(&s, "kept").await, "\"yes\"");
}

#[tokio::test]
async fn a_promise_that_never_settles_times_out() {
    let s = session().await;
    let t = Instant::now();
    let o = s
        .execute(
            "await new Promise(() => {})",
            &CellOptions {
                timeout: Some(Duration::from_millis(200)),
            },
            Arc::new(NoHost),
        )
        .await
        .unwrap();
    assert_eq!(o.status, CellStatus::Timeout);
    assert!(t.elapsed() < Duration::from_secs(3));
    assert_eq!(value(&s, "1 + 1").await, "2");
}

#[tokio::test]
async fn memory_bomb_is_stopped_and_the_session_survives() {
    let s = Session::new(
        &Catalog::default(),
        Limits {
            memory: 32 << 20,
            ..limits()
        },
        1,
    )
    .await
    .unwrap();
    value(&s, "let kept = 3").await;
    let o = run(
        &s,
        "const hog = []; while (true) hog.push('x'.repeat(1000) + hog.length)",
    )
    .await;
    assert_eq!(o.status, CellStatus::Oom, "{:?}", o.error);
    assert!(o.error.unwrap().contains("out of memory"));
    // `hog` kept the heap full: the session was rebuilt from its journal, `kept` came back.
    assert!(o.notice.unwrap().contains("rebuilt"));
    assert_eq!(value(&s, "kept * 2").await, "6");
    assert_eq!(value(&s, "typeof hog").await, "\"undefined\"");
    let o = run(&s, "let big = new ArrayBuffer(1 << 30)").await;
    assert_eq!(o.status, CellStatus::Oom, "{:?}", o.error);
    assert_eq!(value(&s, "kept").await, "3");
}

#[tokio::test]
async fn deep_recursion_is_an_error_not_a_crash() {
    let s = session().await;
    let o = run(&s, "function f(n) { return f(n + 1) + 1 } f(0)").await;
    assert_eq!(o.status, CellStatus::Error);
    assert!(
        o.error
            .unwrap()
            .contains("RangeError: Maximum call stack size exceeded")
    );
    assert_eq!(value(&s, "2 + 2").await, "4");
}

#[tokio::test]
async fn no_ambient_capability() {
    let s = session().await;
    let names = [
        "require",
        "fetch",
        "process",
        "setTimeout",
        "setInterval",
        "setImmediate",
        "clearTimeout",
        "XMLHttpRequest",
        "WebSocket",
        "performance",
        "std",
        "os",
        "Deno",
        "Bun",
        "module",
        "exports",
        "__host",
        "navigator",
        "importScripts",
        "Worker",
    ];
    let code = format!(
        "[{}].map(n => n + ':' + typeof globalThis[n]).filter(x => !x.endsWith(':undefined'))",
        names
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(value(&s, &code).await, "[]");
    let o = run(&s, "await import('fs')").await;
    assert_eq!(o.status, CellStatus::Error, "{:?}", o.value);
    // The only host functions live inside the prelude's closure.
    let globals = value(
        &s,
        "Object.getOwnPropertyNames(globalThis).filter(n => /host|envgit/i.test(n))",
    )
    .await;
    assert_eq!(globals, "[]");
}

#[tokio::test]
async fn output_is_capped_with_a_marker() {
    let s = Session::new(
        &Catalog::default(),
        Limits {
            output_chars: 100,
            ..limits()
        },
        1,
    )
    .await
    .unwrap();
    let o = run(
        &s,
        "for (let i = 0; i < 100; i++) console.log('0123456789'); 'end'",
    )
    .await;
    assert_eq!(o.status, CellStatus::Ok);
    assert!(o.truncated_chars > 1000, "{}", o.truncated_chars);
    assert!(o.text.starts_with("0123456789\n"));
    assert!(o.text.contains("[output cut: "), "{}", o.text);
    assert!(o.text.chars().count() < 300);
}

#[tokio::test]
async fn errors_are_readable_with_a_position() {
    let s = session().await;
    let o = run(&s, "let q = 1;\n\nthrow new Error('boom')").await;
    assert_eq!(o.status, CellStatus::Error);
    let e = o.error.unwrap();
    assert!(e.contains("Error: boom"), "{e}");
    assert!(e.contains("cell:3"), "{e}");
    let o = run(&s, "let = ;").await;
    assert!(o.error.unwrap().contains("SyntaxError"));
    let o = run(&s, "assert(1 === 2, 'one is not two')").await;
    assert!(o.error.unwrap().contains("AssertionError: one is not two"));
}

#[tokio::test]
async fn top_level_return_runs_as_a_function() {
    let s = session().await;
    let o = run(&s, "const r = 6 * 7;\nreturn r;").await;
    assert_eq!(o.status, CellStatus::Ok, "{:?}", o.error);
    assert_eq!(o.value.as_deref(), Some("42"));
    assert!(o.wrapped);
}

#[tokio::test]
async fn helpers_sample_schema_assert() {
    let s = session().await;
    value(
        &s,
        "const rows = Array.from({length: 50}, (_, i) => ({id: i, name: 'n' + i}))",
    )
    .await;
    assert_eq!(
        value(
            &s,
            "const sm = sample(rows, 2); [sm.total, sm.items.length, sm.type]"
        )
        .await,
        r#"[50,2,"array"]"#
    );
    assert_eq!(
        value(&s, "schema(rows)").await,
        r#""{ id: number; name: string }[]""#
    );
    assert_eq!(value(&s, "assert(true); 1").await, "1");
}

#[tokio::test]
async fn math_random_is_seeded() {
    let a = Session::new(&Catalog::default(), limits(), 99)
        .await
        .unwrap();
    let b = Session::new(&Catalog::default(), limits(), 99)
        .await
        .unwrap();
    let c = Session::new(&Catalog::default(), limits(), 100)
        .await
        .unwrap();
    let code = "[Math.random(), Math.random()]";
    let va = value(&a, code).await;
    assert_eq!(va, value(&b, code).await);
    assert_ne!(va, value(&c, code).await);
}

#[tokio::test]
async fn host_calls_are_promises_and_run_concurrently() {
    let s = Session::new(&fixture_catalog(), limits(), 1).await.unwrap();
    let host = Arc::new(Fixture {
        calls: AtomicUsize::new(0),
    });
    let t = Instant::now();
    let o = s
        .execute(
            "const rs = await Promise.all([1,2,3,4,5].map(i => fx.echo({i}))); rs.map(r => r.i)",
            &CellOptions::default(),
            host.clone(),
        )
        .await
        .unwrap();
    assert_eq!(o.value.as_deref(), Some("[1,2,3,4,5]"), "{:?}", o.error);
    assert!(t.elapsed() < Duration::from_millis(90), "{:?}", t.elapsed());
    assert_eq!(o.calls, 5);
    let o = s
        .execute(
            "try { await fx.fail({}) } catch (e) { [e.name, e.server, e.tool, e.message] }",
            &CellOptions::default(),
            host.clone(),
        )
        .await
        .unwrap();
    assert_eq!(
        o.value.as_deref(),
        Some(r#"["ToolError","fx","fail","fx.fail: it broke"]"#)
    );
    let o = s
        .execute(
            "const big = await fx.big(); big.rows.length",
            &CellOptions::default(),
            host.clone(),
        )
        .await
        .unwrap();
    assert_eq!(o.value.as_deref(), Some("1000"));
    assert!(o.bytes_in > 100_000, "{}", o.bytes_in);
    assert_eq!(value(&s, "tools.search('big')[0].name").await, "\"fx.big\"");
    assert!(
        value(&s, "tools.describe('fx.echo')")
            .await
            .contains("function echo")
    );
    assert!(value(&s, "schema(fx.echo)").await.contains("function echo"));
    // A hanging downstream call is cut by the cell's budget; the session survives.
    let o = s
        .execute(
            "await fx.hang()",
            &CellOptions {
                timeout: Some(Duration::from_millis(200)),
            },
            host.clone(),
        )
        .await
        .unwrap();
    assert_eq!(o.status, CellStatus::Timeout);
    assert_eq!(value(&s, "big.rows.length").await, "1000");
}

#[tokio::test]
async fn replay_rebuilds_the_state_without_calling_downstream() {
    let s = Session::new(&fixture_catalog(), limits(), 5).await.unwrap();
    let host = Arc::new(Fixture {
        calls: AtomicUsize::new(0),
    });
    let opts = CellOptions::default();
    s.execute(
        "let r = Math.random(); let t = Date.now();",
        &opts,
        host.clone(),
    )
    .await
    .unwrap();
    s.execute(
        "const e = await fx.echo({v: 'from downstream'})",
        &opts,
        host.clone(),
    )
    .await
    .unwrap();
    s.execute("throw new Error('skipped in replay')", &opts, host.clone())
        .await
        .unwrap();
    s.execute("let later = new Date().getTime()", &opts, host.clone())
        .await
        .unwrap();
    let before = value(&s, "JSON.stringify([r, t, e, later])").await;
    assert_eq!(host.calls.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(5)).await;

    let journal = s.journal();
    assert_eq!(journal.cells.len(), 5);
    let json = serde_json::to_string(&journal).unwrap();
    let journal: Journal = serde_json::from_str(&json).unwrap();
    let r = Session::replay(&journal, limits()).await.unwrap();
    assert_eq!(value(&r, "JSON.stringify([r, t, e, later])").await, before);
    assert_eq!(host.calls.load(Ordering::SeqCst), 1);

    // A journal whose recorded call no longer matches the code diverges, readably.
    let mut bad = journal.clone();
    bad.cells[1].code = "const e = await fx.echo({v: 'other'})".into();
    let err = Session::replay(&bad, limits()).await.err().unwrap();
    assert!(matches!(err, ReplError::Diverged { cell: 2, .. }), "{err}");
}

#[tokio::test]
async fn oversized_cell_is_refused() {
    let s = Session::new(
        &Catalog::default(),
        Limits {
            code_bytes: 10,
            ..limits()
        },
        1,
    )
    .await
    .unwrap();
    let err = s
        .execute(
            "1 + 1 + 1 + 1 + 1",
            &CellOptions::default(),
            Arc::new(NoHost),
        )
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("split it"));
}

#[test]
fn identifiers() {
    assert!(is_identifier("list_issues"));
    assert!(!is_identifier("list-issues"));
    assert!(!is_identifier("delete"));
    assert_eq!(sanitize_identifier("list-issues"), "list_issues");
    assert_eq!(sanitize_identifier("3d.model"), "_3d_model");
    assert_eq!(sanitize_identifier("delete"), "delete_");
}

/// The agent's code that runs after the cell's own (rendering its value, describing what it
/// threw, a cell run again wrapped in a function, a job it left queued) is bounded too.
#[tokio::test]
async fn code_run_after_the_cell_is_bounded() {
    let s = session().await;
    let opts = CellOptions {
        timeout: Some(Duration::from_millis(300)),
    };
    for code in [
        "({ toJSON() { for (;;) {} } })",
        "({ get x() { for (;;) {} } })",
        "new Proxy({}, { ownKeys() { for (;;) {} } })",
        "const e = new Error('x'); Object.defineProperty(e, 'message', { get() { for (;;) {} } }); throw e",
        "const f = new Error('x'); Object.defineProperty(f, 'name', { get() { for (;;) {} } }); throw f",
        "throw { toJSON() { for (;;) {} } }",
        "for (;;) {}\nreturn 1",
        "Promise.resolve().then(() => { for (;;) {} }); 1",
    ] {
        let started = Instant::now();
        let o = tokio::time::timeout(
            Duration::from_secs(10),
            s.execute(code, &opts, Arc::new(NoHost)),
        )
        .await
        .unwrap_or_else(|_| panic!("{code}: still running after 10 s"))
        .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{code}: {:?}",
            started.elapsed()
        );
        let _ = o;
        assert_eq!(
            value(&s, "40 + 2").await,
            "42",
            "{code}: the session is gone"
        );
    }
}
