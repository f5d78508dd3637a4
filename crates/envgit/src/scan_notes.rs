//! What a step's snapshot left out (for the store's budget, or because envgit could not read
//! it), said where the user sees it: a warning on stderr naming the paths, the cause and the
//! fix, and a note on the step (`show`, `log -v`, `--json`).

use envgit_store::{BudgetLimit, EntryDiff, EntryKind, MarkerReason, ScanReport, StepDraft};

use crate::output;

/// Files named one by one in the warning and the note; the rest are counted.
const NAMED: usize = 20;

/// `a.bin (4.0 MiB), b.bin (4.0 MiB) and 3 more (12.0 MiB)`
fn named(files: &[(String, u64)]) -> String {
    let mut parts: Vec<String> = files
        .iter()
        .take(NAMED)
        .map(|(p, size)| format!("{} ({})", output::escape_controls(p), output::size(*size)))
        .collect();
    if files.len() > NAMED {
        let rest: u64 = files[NAMED..].iter().map(|(_, s)| s).sum();
        parts.push(format!(
            "and {} more ({})",
            files.len() - NAMED,
            output::size(rest)
        ));
    }
    parts.join(", ")
}

/// Why, and what to do about it.
fn cause_and_fix(limit: Option<BudgetLimit>) -> (String, &'static str) {
    match limit {
        Some(BudgetLimit::FreeSpace { available, reserve }) => (
            format!(
                "the store's disk has {} available and envgit keeps {} of it free",
                output::size(available),
                output::size(reserve)
            ),
            "free disk space (`envgit gc` prunes older steps), or move the store elsewhere with ENVGIT_HOME",
        ),
        Some(BudgetLimit::Budget { budget, used }) => (
            format!(
                "the store would pass snapshot.budget ({}; it holds {})",
                output::size(budget),
                output::size(used)
            ),
            "make room with `envgit gc` (prunes older steps) or raise snapshot.budget in envgit.yaml",
        ),
        None => (
            "the store is at its budget".to_string(),
            "make room with `envgit gc`",
        ),
    }
}

/// Warns about the files `report` left out for the budget and notes them on `draft`.
pub(crate) fn budget(report: &ScanReport, draft: &mut StepDraft) {
    if report.over_budget.is_empty() {
        return;
    }
    let files = &report.over_budget;
    let total: u64 = files.iter().map(|(_, s)| s).sum();
    let (cause, fix) = cause_and_fix(report.budget_limit);
    output::warn(&format!(
        "{} file(s), {}, not stored: {cause}; each is recorded as a marker that rewind and fork \
         leave alone: {}",
        files.len(),
        output::size(total),
        named(files)
    ));
    output::warn(fix);
    draft.notes.push(format!(
        "not stored ({cause}), recorded as markers: {}",
        named(files)
    ));
}

/// Paths the step made unreadable to envgit (a directory or file without read permission, as
/// a person who is not root sees it): the snapshot holds a marker, not their content, so
/// rewind and fork leave them as they are. Said, with the fix, on stderr and on the step.
pub(crate) fn unreadable(changes: &[EntryDiff], draft: &mut StepDraft) {
    let paths: Vec<String> = changes
        .iter()
        .filter(|c| {
            c.new
                .as_ref()
                .is_some_and(|e| e.kind == EntryKind::Marker(MarkerReason::Unreadable))
        })
        .map(|c| String::from_utf8_lossy(&c.path).into_owned())
        .collect();
    if paths.is_empty() {
        return;
    }
    let mut shown: Vec<String> = paths.iter().take(NAMED).cloned().collect();
    if paths.len() > NAMED {
        shown.push(format!("and {} more", paths.len() - NAMED));
    }
    let shown = shown.join(", ");
    let fix: Vec<String> = paths
        .iter()
        .take(NAMED)
        .map(|p| output::shell_quote(p))
        .collect();
    output::warn(&format!(
        "unreadable to envgit, so not in this step's snapshot (rewind and fork leave them as \
         they are): {shown}; `chmod -R u+rwX {}` lets the next step take them",
        fix.join(" ")
    ));
    draft
        .notes
        .push(format!("unreadable, content not in the snapshot: {shown}"));
}
