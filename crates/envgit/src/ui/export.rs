//! `envgit ui --export DIR`: the same pages as static files that open straight from disk
//! (`file://`, no server), to hand a run to someone else. A page opened from disk may load
//! scripts beside it but may not fetch files, so every answer the server would give is written
//! as `data/KEY.js`, a script that sets `ENVGIT_DATA[KEY]` (the pages load it with a script
//! element); links are relative; each page carries its CSP in a meta element. What the server
//! never shows is never written: masked files' content, request bodies (not in the record),
//! held requests (there is no run).

use std::path::Path;

use envgit_store::Store;
use serde::Serialize;

use crate::failure::{CmdResult, Failure};

use super::assets::ASSETS;
use super::csp;
use super::masked::Masks;
use super::step_page::{FILES_PER_PAGE, detail, diff_page};
use super::timeline::{Row, rewound_over, row};

pub(crate) fn write(store: &Store, masks: &Masks, root: &Path, out: &Path) -> CmdResult<()> {
    if out.exists() && std::fs::read_dir(out).map_or(true, |mut d| d.next().is_some()) {
        return Err(Failure::usage(format!(
            "{} exists and is not an empty directory: name a new one for the export",
            out.display()
        )));
    }
    for (path, _, bytes) in ASSETS {
        match *path {
            "/" => put(out, "index.html", &with_csp(bytes)?)?,
            "/step" => put(out, "step.html", &with_csp(bytes)?)?,
            p => put(out, p.trim_start_matches('/'), bytes)?,
        }
    }
    put(
        out,
        "mode.js",
        b"// Written by `envgit ui --export`.\nwindow.ENVGIT_EXPORT = true;\n",
    )?;
    put_data(
        out,
        "project",
        &serde_json::json!({ "root": root.display().to_string(), "export": true }),
    )?;
    let steps = store.steps()?;
    put_data(out, "steps", &timeline(steps))?;
    for s in steps {
        let n = s.number;
        put_data(out, &format!("steps/{n}"), &detail(store, n)?)?;
        // Pruned steps have no tree: their page says so, with no diff.
        if s.tree.is_none() {
            continue;
        }
        let mut offset = 0;
        loop {
            let diff = diff_page(store, masks, n, offset, None, 0)?;
            put_data(out, &format!("steps/{n}/diff-{offset}"), &diff)?;
            offset += FILES_PER_PAGE;
            if offset >= diff.total_files() {
                break;
            }
        }
    }
    Ok(())
}

fn put(out: &Path, rel: &str, bytes: &[u8]) -> CmdResult<()> {
    let path = out.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Failure::failed(format!("{}: {e}", parent.display())))?;
    }
    std::fs::write(&path, bytes).map_err(|e| Failure::failed(format!("{}: {e}", path.display())))
}

fn put_data<T: Serialize>(out: &Path, key: &str, value: &T) -> CmdResult<()> {
    put(out, &format!("data/{key}.js"), &data_script(key, value)?)
}

/// A timeline row with the paths its step changed: with no server to ask, the page filters
/// by path itself.
#[derive(Serialize)]
struct ExportRow {
    #[serde(flatten)]
    row: Row,
    paths: Vec<String>,
}

#[derive(Serialize)]
struct Timeline {
    head: u64,
    rows: Vec<ExportRow>,
}

/// Every row, newest first (the server's pages, all at once).
fn timeline(steps: &[envgit_store::Step]) -> Timeline {
    let rewound = rewound_over(steps);
    Timeline {
        head: steps.last().map_or(0, |s| s.number),
        rows: steps
            .iter()
            .rev()
            .map(|s| ExportRow {
                row: row(s, rewound.get(&s.number).copied()),
                paths: s.changes.iter().map(|c| c.path.clone()).collect(),
            })
            .collect(),
    }
}

/// `data/KEY.js`: one statement that stores the answer (JSON is a JavaScript expression).
fn data_script<T: Serialize>(key: &str, value: &T) -> CmdResult<Vec<u8>> {
    let key = to_json(&key)?;
    let json = to_json(value)?;
    let mut out = b"(window.ENVGIT_DATA = window.ENVGIT_DATA || {})[".to_vec();
    out.extend_from_slice(&key);
    out.extend_from_slice(b"] = ");
    out.extend_from_slice(&json);
    out.extend_from_slice(b";\n");
    Ok(out)
}

/// A page with its Content-Security-Policy as a meta element, first thing in its head.
fn with_csp(html: &[u8]) -> CmdResult<Vec<u8>> {
    let text = std::str::from_utf8(html).map_err(|e| Failure::failed(format!("export: {e}")))?;
    let anchor = "<meta charset=\"utf-8\">";
    if !text.contains(anchor) {
        return Err(Failure::failed(
            "export: a page lacks its charset meta element (envgit's own assets are broken)",
        ));
    }
    let meta = format!(
        "{anchor}\n<meta http-equiv=\"Content-Security-Policy\" content=\"{}\">",
        csp::EXPORTED
    );
    Ok(text.replacen(anchor, &meta, 1).into_bytes())
}

fn to_json<T: Serialize + ?Sized>(v: &T) -> CmdResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Failure::failed(format!("export: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_page_gets_the_csp_and_data_is_one_assignment() {
        for (path, _, bytes) in ASSETS
            .iter()
            .filter(|(p, _, _)| matches!(*p, "/" | "/step"))
        {
            let page = String::from_utf8(with_csp(bytes).unwrap()).unwrap();
            assert!(page.contains(csp::EXPORTED), "{path}");
            assert!(!page.contains("<script>"), "{path}: inline script");
        }
        let script =
            data_script("steps/3", &serde_json::json!({"a": "</script>\u{2028}"})).unwrap();
        assert_eq!(
            String::from_utf8(script).unwrap(),
            "(window.ENVGIT_DATA = window.ENVGIT_DATA || {})[\"steps/3\"] = {\"a\":\"</script>\u{2028}\"};\n"
        );
    }
}
