//! The session's thread: one QuickJS runtime and context, a current-thread tokio runtime to drive
//! its promises, and the loop that runs cells one at a time.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rquickjs::context::EvalOptions;
use rquickjs::context::intrinsic;
use rquickjs::function::Async;
use rquickjs::{AsyncContext, AsyncRuntime, Ctx, Function, Object, Persistent, Promise, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::{
    CellOutcome, CellStatus, Host, HostCall, HostReply, JournalCall, JournalCell, Limits, Msg,
    ReplError,
};

const PRELUDE: &str = include_str!("prelude.js");

/// Extra time the outer timer gives a cell beyond its deadline, so that running JavaScript is
/// stopped by the interrupt handler (with a readable stack) rather than by the timer.
const GRACE: Duration = Duration::from_millis(100);

/// How long describing a failed cell's error may run (a thrown value's getters are the
/// cell's code).
const DESCRIBE_BUDGET: Duration = Duration::from_millis(500);

pub(crate) struct Setup {
    pub catalog_json: String,
    pub seed: u32,
    pub limits: Limits,
    pub cancel: Arc<AtomicBool>,
    pub handle: tokio::runtime::Handle,
    pub rx: mpsc::UnboundedReceiver<Msg>,
    pub ready: oneshot::Sender<Result<(), ReplError>>,
}

pub(crate) fn spawn(setup: Setup) -> Result<(), ReplError> {
    std::thread::Builder::new()
        .name("envgit-repl".into())
        // QuickJS's own stack limit is `Limits::stack`; the thread has room to spare.
        .stack_size(16 << 20)
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = setup.ready.send(Err(ReplError::Engine(e.to_string())));
                    return;
                }
            };
            rt.block_on(run(setup));
        })
        .map_err(|e| ReplError::Engine(format!("cannot start the REPL thread: {e}")))?;
    Ok(())
}

/// Characters of console output and value, capped.
struct Output {
    text: String,
    chars: usize,
    cap: usize,
    cut: usize,
}

impl Output {
    fn new(cap: usize) -> Self {
        Output {
            text: String::new(),
            chars: 0,
            cap,
            cut: 0,
        }
    }

    fn push(&mut self, s: &str) {
        let n = s.chars().count();
        let room = self.cap.saturating_sub(self.chars);
        if n <= room {
            self.text.push_str(s);
            self.chars += n;
        } else {
            self.text.extend(s.chars().take(room));
            self.chars += room;
            self.cut += n - room;
        }
    }
}

/// What the host functions share with the cell loop.
struct CellState {
    generation: u64,
    host: Arc<dyn Host>,
    output: Output,
    calls: Vec<JournalCall>,
    clock: Vec<f64>,
    replay_clock: Option<VecDeque<f64>>,
    bytes_in: u64,
    aborts: Vec<AbortHandle>,
}

type Shared = Rc<RefCell<CellState>>;

struct Engine {
    // Field order is drop order: values, then the context, then its runtime.
    render: Persistent<Function<'static>>,
    describe: Persistent<Function<'static>>,
    ctx: AsyncContext,
    rt: AsyncRuntime,
    shared: Shared,
    deadline: Arc<AtomicU64>,
    base: Instant,
    cancel: Arc<AtomicBool>,
    limits: Limits,
}

async fn run(mut setup: Setup) {
    let engine = match Engine::start(&setup).await {
        Ok(e) => {
            let _ = setup.ready.send(Ok(()));
            e
        }
        Err(e) => {
            let _ = setup.ready.send(Err(e));
            return;
        }
    };
    while let Some(msg) = setup.rx.recv().await {
        match msg {
            Msg::Exec {
                code,
                timeout,
                host,
                replay_clock,
                reply,
            } => {
                let result = engine.exec(&code, timeout, host, replay_clock).await;
                let _ = reply.send(result);
            }
        }
    }
}

fn engine_err(e: rquickjs::Error) -> ReplError {
    ReplError::Engine(e.to_string())
}

fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as f64)
        .unwrap_or(0.0)
}

impl Engine {
    async fn start(setup: &Setup) -> Result<Self, ReplError> {
        let rt = AsyncRuntime::new().map_err(engine_err)?;
        rt.set_memory_limit(setup.limits.memory).await;
        rt.set_max_stack_size(setup.limits.stack).await;
        let deadline = Arc::new(AtomicU64::new(0));
        let base = Instant::now();
        {
            let deadline = deadline.clone();
            let cancel = setup.cancel.clone();
            rt.set_interrupt_handler(Some(Box::new(move || {
                if cancel.load(Ordering::Relaxed) {
                    return true;
                }
                let d = deadline.load(Ordering::Relaxed);
                d != 0 && base.elapsed().as_nanos() as u64 >= d
            })))
            .await;
        }
        // Everything but `performance` (an unjournaled clock) and the regexp compiler/DOM bits.
        let ctx = AsyncContext::custom::<(
            intrinsic::Date,
            intrinsic::Eval,
            intrinsic::RegExpCompiler,
            intrinsic::RegExp,
            intrinsic::Json,
            intrinsic::Proxy,
            intrinsic::MapSet,
            intrinsic::TypedArrays,
            intrinsic::Promise,
            intrinsic::WeakRef,
        )>(&rt)
        .await
        .map_err(engine_err)?;
        let shared: Shared = Rc::new(RefCell::new(CellState {
            generation: 0,
            host: Arc::new(crate::NoHost),
            output: Output::new(setup.limits.output_chars),
            calls: Vec::new(),
            clock: Vec::new(),
            replay_clock: None,
            bytes_in: 0,
            aborts: Vec::new(),
        }));
        let handle = setup.handle.clone();
        let catalog_json = setup.catalog_json.clone();
        let seed = setup.seed;
        let sh = shared.clone();
        let (render, describe) = ctx
            .with(move |ctx| install(&ctx, sh, handle, &catalog_json, seed))
            .await
            .map_err(engine_err)?;
        Ok(Engine {
            ctx,
            rt,
            render,
            describe,
            shared,
            deadline,
            base,
            cancel: setup.cancel.clone(),
            limits: setup.limits.clone(),
        })
    }

    async fn exec(
        &self,
        code: &str,
        timeout: Duration,
        host: Arc<dyn Host>,
        replay_clock: Option<Vec<f64>>,
    ) -> (CellOutcome, JournalCell) {
        let started = Instant::now();
        {
            let mut s = self.shared.borrow_mut();
            s.generation += 1;
            s.host = host;
            s.output = Output::new(self.limits.output_chars);
            s.calls.clear();
            s.clock.clear();
            s.replay_clock = replay_clock.map(VecDeque::from);
            s.bytes_in = 0;
            s.aborts.clear();
        }
        let deadline_ns = (self.base.elapsed() + timeout).as_nanos() as u64;
        self.deadline.store(deadline_ns, Ordering::SeqCst);
        let render = self.render.clone();
        let describe = self.describe.clone();
        let deadline = self.deadline.clone();
        let cancel = self.cancel.clone();
        let base = self.base;
        let cell = self.ctx.async_with(async move |ctx| {
            run_cell(&ctx, code, render, describe, &deadline, &cancel, base).await
        });
        let result = match tokio::time::timeout(timeout + GRACE, cell).await {
            Ok(r) => r,
            Err(_) => Err(Failure {
                status: CellStatus::Timeout,
                message: format!(
                    "the cell did not finish within {} ms (it was waiting on downstream calls, \
                     which were cancelled); ask for a larger timeout_ms or do less per cell",
                    timeout.as_millis()
                ),
            }),
        };
        self.deadline.store(0, Ordering::SeqCst);
        let cancelled = self.cancel.swap(false, Ordering::SeqCst);
        let mut notice = None;
        let mut heap_full = false;
        let (status, value, error, wrapped) = match result {
            Ok((value, wrapped)) => (CellStatus::Ok, value, None, wrapped),
            Err(f) => {
                let status = if cancelled {
                    CellStatus::Cancelled
                } else {
                    f.status
                };
                let message = match status {
                    CellStatus::Timeout if !f.message.starts_with("the cell did not") => format!(
                        "the cell ran past its {} ms budget and was stopped: {}",
                        timeout.as_millis(),
                        f.message
                    ),
                    CellStatus::Oom => format!(
                        "the cell ran out of memory (limit {} MiB) and was stopped: {}",
                        self.limits.memory >> 20,
                        f.message
                    ),
                    CellStatus::Cancelled => format!("the cell was cancelled: {}", f.message),
                    _ => f.message,
                };
                self.rt.run_gc().await;
                let used = self.rt.memory_usage().await.malloc_size.max(0) as usize;
                if used > self.limits.memory / 10 * 8 {
                    heap_full = true;
                    notice = Some(format!(
                        "the session's heap still holds {} MiB of its {} MiB after this cell",
                        used >> 20,
                        self.limits.memory >> 20
                    ));
                }
                (status, None, Some(message), false)
            }
        };
        let mut s = self.shared.borrow_mut();
        for a in s.aborts.drain(..) {
            a.abort();
        }
        s.generation += 1;
        if let Some(v) = &value {
            s.output.push(v);
        }
        let truncated_chars = s.output.cut;
        let mut text = std::mem::take(&mut s.output.text);
        if truncated_chars > 0 {
            text.push_str(&format!(
                "\n… [output cut: {truncated_chars} more characters; print less, or look with sample() and schema()]"
            ));
        }
        let outcome = CellOutcome {
            status,
            text,
            value,
            error,
            truncated_chars,
            bytes_in: s.bytes_in,
            calls: s.calls.len(),
            elapsed: started.elapsed(),
            wrapped,
            notice,
            heap_full,
        };
        let journal = JournalCell {
            code: code.to_string(),
            status,
            calls: std::mem::take(&mut s.calls),
            clock: std::mem::take(&mut s.clock),
        };
        (outcome, journal)
    }
}

struct Failure {
    status: CellStatus,
    message: String,
}

/// Evaluate a cell and render its value. Returns the rendered value and whether the cell had to
/// be wrapped in a function (a top-level `return`).
async fn run_cell<'js>(
    ctx: &Ctx<'js>,
    code: &str,
    render: Persistent<Function<'static>>,
    describe: Persistent<Function<'static>>,
    deadline: &AtomicU64,
    cancel: &AtomicBool,
    base: Instant,
) -> Result<(Option<String>, bool), Failure> {
    let mut wrapped = false;
    let mut source = code.to_string();
    let value = loop {
        let opts = {
            let mut o = EvalOptions::default();
            o.global = true;
            o.promise = true;
            o.strict = false;
            o.backtrace_barrier = true;
            o.filename = Some("cell".into());
            o
        };
        let attempt: rquickjs::Result<Value<'js>> =
            match ctx.eval_with_options::<Promise<'js>, _>(source.as_str(), opts) {
                Ok(p) => match p.into_future::<Object<'js>>().await {
                    Ok(obj) => obj.get::<_, Value<'js>>("value"),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
        match attempt {
            Ok(v) => break v,
            Err(e) => {
                let f = failure(ctx, e, &describe, deadline, cancel, base);
                if !wrapped && f.message.contains("return not in a function") {
                    wrapped = true;
                    source = format!("await (async () => {{\n{code}\n}})()");
                    continue;
                }
                return Err(f);
            }
        }
    };
    // Rendering runs the cell's code again (a `toJSON`, a getter, a Proxy's traps): it stays
    // within the cell's deadline.
    let render = render.restore(ctx).map_err(|e| Failure {
        status: CellStatus::Error,
        message: e.to_string(),
    })?;
    match render.call::<_, Option<String>>((value,)) {
        Ok(v) => Ok((v, wrapped)),
        Err(e) => Err(failure(ctx, e, &describe, deadline, cancel, base)),
    }
}

/// Turn an engine error into a readable failure, classified.
fn failure<'js>(
    ctx: &Ctx<'js>,
    e: rquickjs::Error,
    describe: &Persistent<Function<'static>>,
    deadline: &AtomicU64,
    cancel: &AtomicBool,
    base: Instant,
) -> Failure {
    let d = deadline.load(Ordering::SeqCst);
    let past_deadline = d != 0 && base.elapsed().as_nanos() as u64 >= d;
    // Describing the error runs the cell's code (a thrown value's getters, `toJSON`): it gets
    // a deadline of its own, past the cell's (which may be over), and the cell's is put back
    // after (a cell run again wrapped in a function is still bounded by it).
    deadline.store(
        (base.elapsed() + DESCRIBE_BUDGET).as_nanos() as u64,
        Ordering::SeqCst,
    );
    let was_cancelled = cancel.swap(false, Ordering::SeqCst);
    let message = if e.is_exception() {
        let exc = ctx.catch();
        let plain = exc.as_exception().map(|x| {
            format!(
                "{}: {}",
                x.get::<_, String>("name")
                    .unwrap_or_else(|_| "Error".into()),
                x.message().unwrap_or_default()
            )
        });
        // A getter above that was stopped left its own exception behind.
        let _ = ctx.catch();
        match describe
            .clone()
            .restore(ctx)
            .and_then(|f| f.call::<_, String>((exc.clone(),)))
        {
            Ok(m) => m,
            Err(_) => {
                // Describing can fail when the heap or stack is exhausted: say what we can.
                let _ = ctx.catch();
                plain.unwrap_or_else(|| e.to_string())
            }
        }
    } else {
        e.to_string()
    };
    deadline.store(d, Ordering::SeqCst);
    if was_cancelled {
        // Let the caller see it after this cell too.
        cancel.store(true, Ordering::SeqCst);
    }
    let status = if message.contains("out of memory") || matches!(e, rquickjs::Error::Allocation) {
        CellStatus::Oom
    } else if message.contains("interrupted") && (past_deadline || was_cancelled) {
        if was_cancelled {
            CellStatus::Cancelled
        } else {
            CellStatus::Timeout
        }
    } else {
        CellStatus::Error
    };
    Failure { status, message }
}

/// Evaluate the prelude with the host functions; keep its `render` and `describeError`.
fn install<'js>(
    ctx: &Ctx<'js>,
    shared: Shared,
    handle: tokio::runtime::Handle,
    catalog_json: &str,
    seed: u32,
) -> rquickjs::Result<(Persistent<Function<'static>>, Persistent<Function<'static>>)> {
    let opts = {
        let mut o = EvalOptions::default();
        o.global = true;
        o.strict = false;
        o.filename = Some("envgit-prelude".into());
        o
    };
    let prelude: Function<'js> = ctx.eval_with_options(PRELUDE, opts)?;

    let sh = shared.clone();
    let print = Function::new(ctx.clone(), move |level: i32, text: String| {
        let mut s = sh.borrow_mut();
        match level {
            1 => s.output.push("warn: "),
            2 => s.output.push("error: "),
            _ => {}
        }
        s.output.push(&text);
        s.output.push("\n");
    })?;

    let sh = shared.clone();
    let now = Function::new(ctx.clone(), move || -> f64 {
        let mut s = sh.borrow_mut();
        let v = s
            .replay_clock
            .as_mut()
            .and_then(|q| q.pop_front())
            .unwrap_or_else(wall_ms);
        s.clock.push(v);
        v
    })?;

    let sh = shared;
    let call = Function::new(
        ctx.clone(),
        Async(move |server: String, tool: String, args: String| {
            let sh = sh.clone();
            let handle = handle.clone();
            async move {
                let args = serde_json::from_str(&args).unwrap_or(serde_json::Value::Null);
                let call = HostCall { server, tool, args };
                let (host, generation, index) = {
                    let mut s = sh.borrow_mut();
                    s.calls.push(JournalCall {
                        call: call.clone(),
                        reply: None,
                    });
                    (s.host.clone(), s.generation, s.calls.len() - 1)
                };
                let task = handle.spawn(host.call(call));
                sh.borrow_mut().aborts.push(task.abort_handle());
                let reply: HostReply = match task.await {
                    Ok(r) => r,
                    Err(e) if e.is_cancelled() => Err("cancelled: the cell ended".to_string()),
                    Err(_) => Err("the host failed while answering this call".to_string()),
                };
                let envelope = match &reply {
                    Ok(v) => serde_json::json!({ "ok": true, "value": v }),
                    Err(m) => serde_json::json!({ "ok": false, "error": m }),
                }
                .to_string();
                {
                    let mut s = sh.borrow_mut();
                    if s.generation == generation {
                        s.bytes_in += envelope.len() as u64;
                        if let Some(c) = s.calls.get_mut(index) {
                            c.reply = Some(reply);
                        }
                    }
                }
                Ok::<String, rquickjs::Error>(envelope)
            }
        }),
    )?;

    let helpers: Object<'js> = prelude.call((print, call, now, catalog_json, seed))?;
    let render: Function<'js> = helpers.get("render")?;
    let describe: Function<'js> = helpers.get("describeError")?;
    Ok((
        Persistent::save(ctx, render),
        Persistent::save(ctx, describe),
    ))
}
