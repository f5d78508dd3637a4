//! A step's page as data: its whole record (as `envgit show N --json`), its row on the
//! timeline, the commands that would rewind or fork to it, and its diff against its parent
//! in pages (unified text as `envgit diff N` prints it; masked paths never show content).

use envgit_store::{EntryDiff, Store};
use serde::Serialize;

use crate::commands::{diff::entry_diff, show::whole_step};
use crate::failure::{CmdResult, Failure};
use crate::output::Style;

use super::masked::Masks;
use super::timeline::{Row, rewound_over, row};

/// Files in one page of a diff.
pub(crate) const FILES_PER_PAGE: usize = 50;
/// Lines of one file in one answer; the rest is asked for with `from=`.
pub(crate) const LINES_PER_PAGE: usize = 400;

#[derive(Serialize)]
pub(crate) struct Detail {
    row: Row,
    record: envgit_store::Step,
    rewind_command: String,
    fork_command: String,
}

pub(crate) fn detail(store: &Store, number: u64) -> CmdResult<Detail> {
    let record = whole_step(store, number)?;
    let by = rewound_over(store.steps()?).get(&number).copied();
    Ok(Detail {
        row: row(&record, by),
        rewind_command: format!("envgit rewind {number}"),
        fork_command: format!("envgit fork {number} DIR"),
        record,
    })
}

#[derive(Serialize)]
pub(crate) struct FileDiff {
    index: usize,
    path: String,
    masked: bool,
    /// Lines of `envgit diff` for this file, from `from`.
    lines: Vec<String>,
    from: usize,
    /// Lines after these (ask with `file=index&from=`).
    more_lines: usize,
}

#[derive(Serialize)]
pub(crate) struct DiffPage {
    total_files: usize,
    files: Vec<FileDiff>,
    next_offset: Option<usize>,
}

impl DiffPage {
    pub(crate) fn total_files(&self) -> usize {
        self.total_files
    }
}

/// What the step changed against its parent, as entries (the project's files first).
fn entries(store: &Store, number: u64) -> CmdResult<Vec<EntryDiff>> {
    let step = store.step(number)?;
    let new = store.step_tree(number)?;
    let old = match step.parent {
        Some(p) => Some(store.step_tree(p).map_err(|e| {
            Failure::usage(format!(
                "cannot show what step {number} did: its parent: {e}"
            ))
        })?),
        None => None,
    };
    let mut entries = envgit_store::diff_entries(store, old.as_ref(), Some(&new))?;
    envgit_store::project_first(&mut entries, |e| e.path.as_slice());
    Ok(entries)
}

fn file_diff(
    store: &Store,
    masks: &Masks,
    index: usize,
    e: &EntryDiff,
    from: usize,
) -> CmdResult<FileDiff> {
    let path = e.to_change().path;
    if masks.is_masked(&path) {
        return Ok(FileDiff {
            index,
            masked: true,
            lines: vec![format!(
                "diff {path}\n(masked: the sandbox hides this file, so its content is never shown)"
            )],
            path,
            from: 0,
            more_lines: 0,
        });
    }
    let text = entry_diff(store, e, &path, &Style::plain())?;
    let all: Vec<&str> = text.lines().collect();
    let from = from.min(all.len());
    let end = (from + LINES_PER_PAGE).min(all.len());
    Ok(FileDiff {
        index,
        masked: false,
        lines: all[from..end].iter().map(|l| (*l).to_owned()).collect(),
        path,
        from,
        more_lines: all.len() - end,
    })
}

/// Files `offset..offset+FILES_PER_PAGE` of the diff, or, with `file`, that one file's lines
/// from `from`.
pub(crate) fn diff_page(
    store: &Store,
    masks: &Masks,
    number: u64,
    offset: usize,
    file: Option<usize>,
    from: usize,
) -> CmdResult<DiffPage> {
    let entries = entries(store, number)?;
    let total_files = entries.len();
    let mut files = Vec::new();
    let mut next_offset = None;
    match file {
        Some(i) => {
            if let Some(e) = entries.get(i) {
                files.push(file_diff(store, masks, i, e, from)?);
            }
        }
        None => {
            for (i, e) in entries.iter().enumerate().skip(offset).take(FILES_PER_PAGE) {
                files.push(file_diff(store, masks, i, e, 0)?);
            }
            let end = offset.saturating_add(FILES_PER_PAGE);
            next_offset = (end < total_files).then_some(end);
        }
    }
    Ok(DiffPage {
        total_files,
        files,
        next_offset,
    })
}
