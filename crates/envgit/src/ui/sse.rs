//! `GET /api/events`: server-sent events while the page is open. Every `POLL` the server
//! reads what the journal gained (`Store::catch_up`, which reads only the new end) and asks
//! the running gates what they hold; it sends `steps` with the newest step's number when that
//! changed and `held` with the list when that changed. The page then fetches the new rows.

use std::sync::Arc;
use std::time::Duration;

use hyper::Response;
use hyper::body::Bytes;
use hyper::header::HeaderValue;
use tokio::sync::mpsc;

use super::Ui;
use super::body::UiBody;

/// How often the journal and the gates are looked at (bounded; cheap when nothing changed).
const POLL: Duration = Duration::from_millis(250);
/// A comment now and then, so a closed page is noticed (the send fails) and proxies keep it.
const KEEPALIVE_POLLS: u32 = 60;

pub(crate) fn events(ui: Arc<Ui>) -> Response<UiBody> {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut last_head = None;
        let mut last_held = None;
        let mut quiet = 0u32;
        loop {
            let ui2 = Arc::clone(&ui);
            let Ok((head, held)) = tokio::task::spawn_blocking(move || {
                let head = ui2.store().ok().map(|s| s.head().map_or(0, |s| s.number));
                let held = serde_json::to_string(&super::held::list(&ui2.project_label)).ok();
                (head, held)
            })
            .await
            else {
                return;
            };
            let mut out = String::new();
            if head.is_some() && head != last_head {
                out.push_str(&format!(
                    "event: steps\ndata: {{\"head\":{}}}\n\n",
                    head.unwrap_or(0)
                ));
                last_head = head;
            }
            if held.is_some() && held != last_held {
                out.push_str(&format!(
                    "event: held\ndata: {}\n\n",
                    held.as_deref().unwrap_or("[]")
                ));
                last_held = held;
            }
            quiet += 1;
            if out.is_empty() && quiet >= KEEPALIVE_POLLS {
                out.push_str(": keepalive\n\n");
            }
            if !out.is_empty() {
                quiet = 0;
                if tx.send(Bytes::from(out)).await.is_err() {
                    return;
                }
            }
            tokio::time::sleep(POLL).await;
        }
    });
    let mut resp = Response::new(UiBody::Stream(rx));
    let h = resp.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    resp
}
