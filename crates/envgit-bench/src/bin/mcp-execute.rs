//! `envgit mcp`'s `execute` round trip, measured from a real MCP client (rmcp over stdio)
//! against the real binary on a small temporary project: a trivial cell, a cell making 100
//! downstream calls (to this same binary serving a one-tool MCP server, started by envgit in its
//! sandbox), and a cell in a new session (session creation). Anchors measured in the same run:
//! the same cells in-process on envgit-repl alone (no MCP, no step). Prints p50/p90; never fails
//! on timing.
//!
//! `cargo build --release -p envgit && cargo run --release -p envgit-bench --bin mcp-execute -- [--runs 30]`

#[path = "../percentile.rs"]
mod percentile;
use percentile::percentile;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use envgit_repl::{
    Catalog, CellOptions, Host, HostCall, HostFuture, Limits, Namespace, Session, ToolEntry,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

const HUNDRED_CALLS: &str =
    "(await Promise.all(Array.from({length: 100}, (_, i) => fx.add({a: i, b: 1})))).length";
const HUNDRED_SEQUENTIAL: &str =
    "var t = 0; for (let i = 0; i < 100; i++) t += (await fx.add({a: i, b: 1})).sum; t";

fn line(name: &str, mut d: Vec<Duration>) {
    d.sort();
    println!(
        "{name:<52} p50 {:>9.2} ms   p90 {:>9.2} ms   (n={})",
        percentile(&d, 0.5).as_secs_f64() * 1e3,
        percentile(&d, 0.9).as_secs_f64() * 1e3,
        d.len()
    );
}

/// The downstream fixture: one tool, `add {a, b} -> {sum}`.
struct Fixture;

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]});
        let schema = match schema {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "add",
            "Add two integers.",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let a = args.get("a").and_then(|v| v.as_i64()).unwrap_or(0);
        let b = args.get("b").and_then(|v| v.as_i64()).unwrap_or(0);
        let mut r = CallToolResult::success(vec![ContentBlock::text((a + b).to_string())]);
        r.structured_content = Some(json!({"sum": a + b}));
        Ok(r.into())
    }
}

fn envgit_exe() -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    let exe = me.with_file_name("envgit");
    if !exe.exists() {
        bail!(
            "{} is missing: build it first (cargo build --release -p envgit)",
            exe.display()
        );
    }
    Ok(exe)
}

/// An in-process host answering `fx.add` directly (the anchor for the 100-call cell).
struct LocalAdd;

impl Host for LocalAdd {
    fn call(&self, call: HostCall) -> HostFuture {
        Box::pin(async move {
            let a = call.args.get("a").and_then(|v| v.as_i64()).unwrap_or(0);
            let b = call.args.get("b").and_then(|v| v.as_i64()).unwrap_or(0);
            Ok(json!({"sum": a + b}))
        })
    }
}

fn fx_catalog() -> Catalog {
    Catalog {
        namespaces: vec![Namespace {
            name: "fx".into(),
            server: "fx".into(),
            tools: vec![ToolEntry {
                name: "add".into(),
                wire: "add".into(),
                description: "Add two integers.".into(),
                ts: "function add(args: { a: number; b: number }): Promise<{ sum: number }>;"
                    .into(),
            }],
        }],
    }
}

async fn in_process(runs: usize) -> Result<()> {
    let mut create = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let s = Session::new(&fx_catalog(), Limits::default(), 1).await?;
        create.push(t.elapsed());
        drop(s);
    }
    line("anchor: envgit-repl Session::new (in-process)", create);
    let s = Session::new(&fx_catalog(), Limits::default(), 1).await?;
    let host: Arc<dyn Host> = Arc::new(LocalAdd);
    for (name, code) in [
        ("anchor: trivial cell, in-process", "1 + 1"),
        (
            "anchor: 100 concurrent host calls, in-process",
            HUNDRED_CALLS,
        ),
    ] {
        let mut d = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let o = s
                .execute(code, &CellOptions::default(), host.clone())
                .await?;
            d.push(t.elapsed());
            if o.error.is_some() {
                bail!("{name}: {:?}", o.error);
            }
        }
        line(name, d);
    }
    Ok(())
}

async fn over_mcp(runs: usize) -> Result<()> {
    let envgit = envgit_exe()?;
    let me = std::env::current_exe()?;
    let tmp = tempfile::tempdir()?;
    let home = tmp.path().join("home");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(project.join("README"), "a small project\n")?;
    let init = Command::new(&envgit)
        .arg("init")
        .current_dir(&project)
        .env("ENVGIT_HOME", &home)
        .output()?;
    if !init.status.success() {
        bail!("envgit init: {}", String::from_utf8_lossy(&init.stderr));
    }
    // The downstream server is this binary, run in envgit's sandbox: it must be where the
    // sandbox shows it, which a build directory may not be (`/work` here), and the home is.
    let person = tmp.path().join("person");
    std::fs::create_dir_all(&person)?;
    let fixture = person.join("mcp-execute-fixture");
    std::fs::copy(&me, &fixture)?;
    let mut policy = std::fs::read_to_string(project.join("envgit.yaml"))?;
    policy.push_str(&format!(
        "mcp:\n  servers:\n    fx: {{ command: {:?}, args: [\"--serve-fixture\"] }}\n",
        fixture.display().to_string()
    ));
    std::fs::write(project.join("envgit.yaml"), policy)?;

    let mut cmd = tokio::process::Command::new(&envgit);
    cmd.arg("mcp")
        .arg("--project")
        .arg(&project)
        .env_clear()
        .env("ENVGIT_HOME", &home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &person)
        .stderr(std::process::Stdio::null());
    let t = Instant::now();
    let client = ().serve(TokioChildProcess::new(cmd)?).await?;
    let tools = client.list_all_tools().await?;
    println!(
        "envgit mcp start to tools/list (downstream server in the sandbox): {:.1} ms ({} tool)",
        t.elapsed().as_secs_f64() * 1e3,
        tools.len()
    );
    let call = |code: String, session: Option<String>| {
        let mut args = serde_json::Map::new();
        args.insert("code".into(), json!(code));
        if let Some(s) = session {
            args.insert("session".into(), json!(s));
        }
        CallToolRequestParams::new("execute").with_arguments(args)
    };
    let check = |r: &CallToolResult, what: &str| -> Result<()> {
        if r.is_error == Some(true) {
            bail!("{what}: {:?}", r.content);
        }
        Ok(())
    };
    for (name, code, n) in [
        ("execute round trip: trivial cell (1 + 1)", "1 + 1", runs),
        (
            "execute round trip: 100 concurrent downstream calls",
            HUNDRED_CALLS,
            runs.min(20),
        ),
        (
            "execute round trip: 100 sequential downstream calls",
            HUNDRED_SEQUENTIAL,
            runs.min(10),
        ),
    ] {
        let r = client.call_tool(call(code.into(), None)).await?; // warm-up
        check(&r, name)?;
        let mut d = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let r = client.call_tool(call(code.into(), None)).await?;
            d.push(t.elapsed());
            check(&r, name)?;
        }
        line(name, d);
    }
    // Session creation: each call in a new session (the server keeps at most 16).
    let mut d = Vec::new();
    for i in 0..runs.min(15) {
        let t = Instant::now();
        let r = client
            .call_tool(call("1 + 1".into(), Some(format!("s{i}"))))
            .await?;
        d.push(t.elapsed());
        check(&r, "new session")?;
    }
    line("execute round trip: trivial cell in a new session", d);
    client.cancel().await.context("closing the client")?;
    Ok(())
}

fn serve_fixture() -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let running = Fixture.serve(rmcp::transport::stdio()).await?;
        let _ = running.waiting().await;
        Ok(())
    })
}

/// `envgit mcp`'s `execute` round trip from a real MCP client, beside the same cells on
/// envgit-repl in-process; never fails on timing.
#[derive(clap::Parser)]
struct Args {
    /// Runs of each figure.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    /// Serve the one-tool downstream MCP server on stdio (what envgit starts in its sandbox).
    #[arg(long, hide = true)]
    serve_fixture: bool,
}

fn main() -> Result<()> {
    let Args {
        runs,
        serve_fixture: serve,
    } = clap::Parser::parse();
    if serve {
        return serve_fixture();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "mcp-execute: {} build, {runs} runs",
        if cfg!(debug_assertions) {
            "DEBUG (numbers are not representative; use --release)"
        } else {
            "release"
        }
    );
    rt.block_on(async {
        in_process(runs).await?;
        over_mcp(runs).await
    })?;
    Ok(())
}
