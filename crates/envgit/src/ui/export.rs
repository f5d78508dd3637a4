//! `envgit ui --export DIR`: the same pages as static files, with the data they fetch written
//! beside them as JSON (`api/…`, the server's paths), to hand a run to someone else. Serve DIR
//! with any static file server. What the server never shows is never written: masked files'
//! content, request bodies (not in the record), held requests (there is no run).

use std::path::Path;

use envgit_store::Store;

use crate::failure::{CmdResult, Failure};

use super::assets::ASSETS;
use super::masked::Masks;
use super::step_page::{FILES_PER_PAGE, detail, diff_page};
use super::timeline::{Filter, page};

pub(crate) fn write(store: &Store, masks: &Masks, root: &Path, out: &Path) -> CmdResult<()> {
    if out.exists() && std::fs::read_dir(out).map_or(true, |mut d| d.next().is_some()) {
        return Err(Failure::usage(format!(
            "{} exists and is not an empty directory: name a new one for the export",
            out.display()
        )));
    }
    let put = |rel: &str, bytes: &[u8]| -> CmdResult<()> {
        let path = out.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Failure::failed(format!("{}: {e}", parent.display())))?;
        }
        std::fs::write(&path, bytes)
            .map_err(|e| Failure::failed(format!("{}: {e}", path.display())))
    };
    for (path, _, bytes) in ASSETS {
        let name = match *path {
            "/" => "index.html",
            "/step" => "step.html",
            p => p.trim_start_matches('/'),
        };
        put(name, bytes)?;
    }
    put(
        "mode.js",
        b"// Written by `envgit ui --export`.\nwindow.ENVGIT_EXPORT = true;\n",
    )?;
    put(
        "api/project.json",
        &to_json(&serde_json::json!({ "root": root.display().to_string(), "export": true }))?,
    )?;
    let steps = store.steps();
    put(
        "api/steps.json",
        &to_json(&page(steps, None, None, usize::MAX, &Filter::default()))?,
    )?;
    for s in steps {
        let n = s.number;
        put(
            &format!("api/steps/{n}.json"),
            &to_json(&detail(store, n)?)?,
        )?;
        // Pruned steps have no tree: their page says so, with no diff.
        if s.tree.is_none() {
            continue;
        }
        let mut offset = 0;
        loop {
            let diff = diff_page(store, masks, n, offset, None, 0)?;
            put(
                &format!("api/steps/{n}/diff-{offset}.json"),
                &to_json(&diff)?,
            )?;
            offset += FILES_PER_PAGE;
            if offset >= diff.total_files() {
                break;
            }
        }
    }
    Ok(())
}

/// JSON bytes of one answer, as the server sends it.
fn to_json<T: serde::Serialize>(v: &T) -> CmdResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Failure::failed(format!("export: {e}")))
}
