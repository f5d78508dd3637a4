//! One request: who may ask (auth), then what is asked. Every answer carries the same
//! security headers: a CSP without inline script, `nosniff`, no referrer, no caching, and no
//! CORS header at all (other origins cannot read anything).

use std::convert::Infallible;
use std::sync::Arc;

use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, LOCATION, SET_COOKIE};
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;

use super::Ui;
use super::assets;
use super::auth::COOKIE_NAME;
use super::body::UiBody;
use super::csp::SERVED as CSP;
use super::query;
use super::timeline::{self, Filter};

pub(crate) async fn handle(
    ui: Arc<Ui>,
    req: Request<Incoming>,
) -> Result<Response<UiBody>, Infallible> {
    Ok(secure(route(ui, req).await))
}

fn secure(mut resp: Response<UiBody>) -> Response<UiBody> {
    let h = resp.headers_mut();
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.entry("cache-control")
        .or_insert(HeaderValue::from_static("no-store"));
    resp
}

fn plain(status: u16, text: &str) -> Response<UiBody> {
    let mut resp = Response::new(UiBody::whole(format!("{text}\n")));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

pub(crate) fn json<T: Serialize>(value: &T) -> Response<UiBody> {
    match serde_json::to_vec(value) {
        Ok(bytes) => {
            let mut resp = Response::new(UiBody::whole(bytes));
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/json"));
            resp
        }
        Err(e) => plain(500, &format!("cannot encode the answer: {e}")),
    }
}

#[derive(Serialize)]
struct ErrorAnswer {
    error: String,
}

fn error(status: u16, why: String) -> Response<UiBody> {
    let mut resp = json(&ErrorAnswer { error: why });
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    resp
}

async fn route(ui: Arc<Ui>, req: Request<Incoming>) -> Response<UiBody> {
    let host = match ui.auth.check_host(req.headers()) {
        Ok(h) => h,
        Err(r) => return plain(r.status, r.why),
    };
    let path = req.uri().path().to_owned();
    let q = query::parse(req.uri().query());
    if path == "/"
        && req.method() == Method::GET
        && let Some(code) = q.get("code")
    {
        return match ui.auth.redeem(code) {
            Some(session) => {
                let mut resp = plain(303, "signed in");
                let cookie = format!("{COOKIE_NAME}={session}; HttpOnly; SameSite=Strict; Path=/");
                if let Ok(v) = HeaderValue::from_str(&cookie) {
                    resp.headers_mut().insert(SET_COOKIE, v);
                }
                resp.headers_mut()
                    .insert(LOCATION, HeaderValue::from_static("/"));
                resp
            }
            None => plain(
                401,
                "this link's code was already used or is wrong: run `envgit ui` again for a new link",
            ),
        };
    }
    if let Err(r) = ui.auth.check_session(req.headers()) {
        return plain(r.status, r.why);
    }
    if req.method() == Method::POST {
        if let Err(r) = ui.auth.check_post(req.headers(), &host) {
            return plain(r.status, r.why);
        }
        return post(ui, &path).await;
    }
    if req.method() != Method::GET {
        return plain(405, "only GET and POST");
    }
    if let Some((kind, bytes)) = assets::find(&path) {
        let mut resp = Response::new(UiBody::whole(Bytes::from_static(bytes)));
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static(kind));
        return resp;
    }
    get_api(ui, &path, q).await
}

async fn get_api(
    ui: Arc<Ui>,
    path: &str,
    q: std::collections::HashMap<String, String>,
) -> Response<UiBody> {
    let num = |k: &str| q.get(k).and_then(|v| v.parse::<u64>().ok());
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", "project"] => json(&ui.project_info()),
        ["api", "steps"] => {
            let filter = Filter::from_query(&q);
            let (before, after) = (num("before"), num("after"));
            let limit = num("limit").map_or(200, |l| l as usize);
            blocking(ui, move |ui| {
                let store = ui.store()?;
                Ok(json(&timeline::page(
                    store.steps()?,
                    before,
                    after,
                    limit,
                    &filter,
                )))
            })
            .await
        }
        ["api", "steps", n] => {
            let Ok(n) = n.parse::<u64>() else {
                return error(404, format!("no step {n}"));
            };
            blocking(ui, move |ui| {
                let store = ui.store()?;
                Ok(json(&super::step_page::detail(&store, n)?))
            })
            .await
        }
        ["api", "steps", n, "diff"] => {
            let Ok(n) = n.parse::<u64>() else {
                return error(404, format!("no step {n}"));
            };
            let offset = num("offset").unwrap_or(0) as usize;
            let file = num("file").map(|f| f as usize);
            let from = num("from").unwrap_or(0) as usize;
            blocking(ui, move |ui| {
                let store = ui.store()?;
                Ok(json(&super::step_page::diff_page(
                    &store, &ui.masks, n, offset, file, from,
                )?))
            })
            .await
        }
        ["api", "held"] => {
            let label = ui.project_label.clone();
            match tokio::task::spawn_blocking(move || super::held::list(&label)).await {
                Ok(list) => json(&list),
                Err(e) => error(500, e.to_string()),
            }
        }
        ["api", "events"] => super::sse::events(ui),
        _ => plain(404, "no such page"),
    }
}

/// `POST /api/held/RUN/ID/ASKED_AT/approve|deny`.
async fn post(ui: Arc<Ui>, path: &str) -> Response<UiBody> {
    let parts: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(str::to_owned)
        .collect();
    let [api, held, run, id, asked, verb] = parts.as_slice() else {
        return plain(404, "no such action");
    };
    let approve = match verb.as_str() {
        "approve" => true,
        "deny" => false,
        _ => return plain(404, "no such action"),
    };
    let (Ok(id), Ok(asked)) = (id.parse::<u64>(), asked.parse::<u64>()) else {
        return plain(404, "no such held request");
    };
    if api != "api" || held != "held" {
        return plain(404, "no such action");
    }
    let label = ui.project_label.clone();
    let run = run.clone();
    let done =
        tokio::task::spawn_blocking(move || super::held::answer(&label, &run, id, asked, approve))
            .await;
    match done {
        Ok(Ok(ask)) => json(&ask),
        Ok(Err(why)) => error(409, why.to_string()),
        Err(e) => error(500, e.to_string()),
    }
}

/// Runs store work off the async threads; a failure becomes a JSON error naming it.
async fn blocking(
    ui: Arc<Ui>,
    work: impl FnOnce(&Ui) -> crate::failure::CmdResult<Response<UiBody>> + Send + 'static,
) -> Response<UiBody> {
    match tokio::task::spawn_blocking(move || work(&ui)).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(f)) => error(404, f.message),
        Err(e) => error(500, e.to_string()),
    }
}
