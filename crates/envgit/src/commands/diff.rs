//! `envgit diff A` (what step A did) and `envgit diff A B` (how B differs from A): a unified
//! diff for text, a summary for binary files.

use std::path::Path;
use std::process::ExitCode;

use envgit_store::{EntryDiff, EntryKind, Store};
use similar::TextDiff;

use crate::cli::DiffArgs;
use crate::failure::{CmdResult, Failure};
use crate::output::{self, Style};
use crate::project::ProjectDirs;

use super::path_filter::PathFilter;

pub fn run(dir: Option<&Path>, args: &DiffArgs) -> CmdResult<ExitCode> {
    let project = ProjectDirs::find_for_reading(dir)?;
    let store = project.open_store()?;
    let filter = PathFilter::new(&project.root, dir, &args.paths)?;
    let a = args.a.resolve(&store)?;
    let (old, new) = match args.b {
        Some(b) => (
            Some(store.step_tree(a)?),
            store.step_tree(b.resolve(&store)?)?,
        ),
        None => {
            let step = store.step(a)?;
            let new = store.step_tree(a)?;
            let old = match step.parent {
                Some(p) => Some(store.step_tree(p).map_err(|e| {
                    Failure::usage(format!("cannot show what step {a} did: its parent: {e}"))
                })?),
                None => None,
            };
            (old, new)
        }
    };
    let mut entries = envgit_store::diff_entries(&store, old.as_ref(), Some(&new))?;
    entries.retain(|e| filter.matches(&String::from_utf8_lossy(&e.path)));
    envgit_store::project_first(&mut entries, |e| e.path.as_slice());
    if args.out.json {
        let changes: Vec<_> = entries.iter().map(EntryDiff::to_change).collect();
        output::json(&changes)?;
        return Ok(ExitCode::SUCCESS);
    }
    let style = Style::stdout();
    let mut out = String::new();
    for e in &entries {
        let c = e.to_change();
        if args.stat {
            let sign = match c.change {
                envgit_store::ChangeKind::Added => "A",
                envgit_store::ChangeKind::Modified => "M",
                envgit_store::ChangeKind::Deleted => "D",
            };
            out.push_str(&format!("{sign} {}\n", output::escape_controls(&c.path)));
            continue;
        }
        out.push_str(&entry_diff(
            &store,
            e,
            &output::escape_controls(&c.path),
            &style,
        )?);
    }
    crate::pager::page(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// Text content of an entry, or `None` for binary (or non-file) content.
fn text_of(store: &Store, e: Option<&envgit_store::TreeEntry>) -> CmdResult<Option<String>> {
    let Some(e) = e else {
        return Ok(Some(String::new()));
    };
    match e.kind {
        EntryKind::File | EntryKind::Symlink => {
            if e.size > 8 << 20 {
                return Ok(None);
            }
            let bytes = store.read_file(&e.id)?;
            if bytes.iter().take(8192).any(|&b| b == 0) {
                return Ok(None);
            }
            Ok(String::from_utf8(bytes).ok())
        }
        _ => Ok(None),
    }
}

fn describe(e: Option<&envgit_store::TreeEntry>) -> String {
    match e {
        None => "absent".into(),
        Some(e) => match e.kind {
            EntryKind::File => format!("file {:o}, {}", e.mode, output::size(e.size)),
            EntryKind::Symlink => "symlink".into(),
            EntryKind::Dir => "empty directory".into(),
            EntryKind::Marker(r) => {
                format!("not captured: {} ({})", r.describe(), output::size(e.size))
            }
        },
    }
}

pub(crate) fn entry_diff(
    store: &Store,
    e: &EntryDiff,
    path: &str,
    style: &Style,
) -> CmdResult<String> {
    let (o, n) = (e.old.as_ref(), e.new.as_ref());
    let mut out = style.bold(&format!("diff {path}\n"));
    let same_kind = o.map(|x| x.kind) == n.map(|x| x.kind) || o.is_none() || n.is_none();
    let is_content = |x: Option<&envgit_store::TreeEntry>| {
        x.is_none_or(|x| matches!(x.kind, EntryKind::File | EntryKind::Symlink))
    };
    if same_kind && is_content(o) && is_content(n) {
        if let (Some(a), Some(b)) = (o, n)
            && a.id == b.id
        {
            out.push_str(&format!("mode {:o} -> {:o}\n", a.mode, b.mode));
            return Ok(out);
        }
        if let (Some(a), Some(b)) = (text_of(store, o)?, text_of(store, n)?) {
            let old_name = if o.is_some() {
                format!("a/{path}")
            } else {
                "/dev/null".into()
            };
            let new_name = if n.is_some() {
                format!("b/{path}")
            } else {
                "/dev/null".into()
            };
            let d = TextDiff::from_lines(&a, &b);
            for line in d
                .unified_diff()
                .context_radius(3)
                .header(&old_name, &new_name)
                .to_string()
                .lines()
            {
                let line = style.file_line(line);
                let painted = if line.starts_with('+') && !line.starts_with("+++") {
                    style.green(&line)
                } else if line.starts_with('-') && !line.starts_with("---") {
                    style.red(&line)
                } else {
                    line.into_owned()
                };
                out.push_str(&painted);
                out.push('\n');
            }
            return Ok(out);
        }
        if o.is_some() && n.is_some() {
            out.push_str(&format!(
                "binary files differ ({} -> {})\n",
                output::size(o.map_or(0, |x| x.size)),
                output::size(n.map_or(0, |x| x.size))
            ));
            return Ok(out);
        }
    }
    out.push_str(&format!("{} -> {}\n", describe(o), describe(n)));
    Ok(out)
}
