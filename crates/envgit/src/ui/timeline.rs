//! The timeline's rows: one summary per step (what `envgit log` prints, as data), the marks
//! that matter drawn from the record, filters, and pages of rows newest first.

use std::collections::HashMap;

use envgit_store::{RequestOutcome, Step, StepFlag, StepKind};
use serde::Serialize;

use crate::output;

/// Most rows one request returns.
pub(crate) const MAX_PAGE: usize = 1000;

#[derive(Serialize, Default)]
pub(crate) struct RequestCounts {
    allowed: usize,
    denied: usize,
    approved: usize,
    uninspected: usize,
}

#[derive(Serialize)]
pub(crate) struct Row {
    number: u64,
    kind: &'static str,
    summary: String,
    command: Option<String>,
    started_at_ms: u64,
    duration_ms: u64,
    exit_code: Option<i32>,
    /// Every path the step changed, `.git` included.
    files_changed: u64,
    /// Of the recorded changes, those outside `.git`.
    project_files_changed: usize,
    requests: RequestCounts,
    /// `irreversible`, `refused`, `put-back`, `overlapped`, `interrupted`, `low-return`,
    /// `rewound-over`, and the log's other flags.
    marks: Vec<&'static str>,
    /// The rewind that made this step's work no longer the project's (the history stays).
    rewound_by: Option<u64>,
    target: Option<u64>,
    hosts: Vec<String>,
}

/// Which rewind, if any, went back past each step: a step is rewound over when a later
/// rewind restored a step before it.
pub(crate) fn rewound_over(steps: &[Step]) -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    // Newest first, the earliest target among the rewinds seen so far (and which rewind).
    let mut lowest: Option<(u64, u64)> = None;
    for s in steps.iter().rev() {
        if let Some((target, by)) = lowest
            && s.number > target
            && s.number < by
        {
            out.insert(s.number, by);
        }
        if s.kind == StepKind::Rewind
            && let Some(t) = s.target
            && lowest.is_none_or(|(lt, _)| t < lt)
        {
            lowest = Some((t, s.number));
        }
    }
    out
}

pub(crate) fn row(step: &Step, rewound_by: Option<u64>) -> Row {
    let mut counts = RequestCounts::default();
    for r in &step.requests {
        match r.decision {
            RequestOutcome::Allowed => counts.allowed += 1,
            RequestOutcome::Approved => counts.approved += 1,
            RequestOutcome::Uninspected => counts.uninspected += 1,
            _ => counts.denied += 1,
        }
    }
    let mut marks = Vec::new();
    if step.marks().next().is_some() || step.has_flag(StepFlag::Irreversible) {
        marks.push("irreversible");
    }
    if !step.refusals.is_empty() || counts.denied > 0 {
        marks.push("refused");
    }
    if step.has_flag(StepFlag::ProtectedRestored) {
        marks.push("put-back");
    }
    if step.kind == StepKind::Interrupted {
        marks.push("interrupted");
    }
    if rewound_by.is_some() {
        marks.push("rewound-over");
    }
    for f in output::flag_names(step) {
        if !matches!(f, "irreversible" | "protected-restored") {
            marks.push(f);
        }
    }
    let mut hosts: Vec<String> = step.requests.iter().map(|r| r.host.clone()).collect();
    hosts.sort();
    hosts.dedup();
    let t = &step.changes_total;
    Row {
        number: step.number,
        kind: step.kind.as_str(),
        summary: step.summary.clone(),
        command: step.command.as_ref().map(|c| c.join(" ")),
        started_at_ms: step.started_at_ms,
        duration_ms: step.ended_at_ms.saturating_sub(step.started_at_ms),
        exit_code: step.exit_code,
        files_changed: t.added + t.modified + t.deleted,
        project_files_changed: step
            .changes
            .iter()
            .filter(|c| !envgit_store::is_git_path(&c.path))
            .count(),
        requests: counts,
        marks,
        rewound_by,
        target: step.target,
        hosts,
    }
}

/// What the timeline's filter asks for (every part optional; all must hold).
#[derive(Default)]
pub(crate) struct Filter {
    pub(crate) kind: Option<String>,
    pub(crate) mark: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) from: Option<u64>,
    pub(crate) to: Option<u64>,
}

impl Filter {
    pub(crate) fn from_query(q: &HashMap<String, String>) -> Filter {
        let text = |k: &str| q.get(k).filter(|v| !v.is_empty()).cloned();
        Filter {
            kind: text("kind"),
            mark: text("mark"),
            path: text("path"),
            host: text("host"),
            from: q.get("from").and_then(|v| v.parse().ok()),
            to: q.get("to").and_then(|v| v.parse().ok()),
        }
    }

    pub(crate) fn keeps(&self, step: &Step, row: &Row) -> bool {
        self.kind.as_deref().is_none_or(|k| step.kind.as_str() == k)
            && self.mark.as_deref().is_none_or(|m| row.marks.contains(&m))
            && self
                .path
                .as_deref()
                .is_none_or(|p| step.changes.iter().any(|c| c.path.contains(p)))
            && self
                .host
                .as_deref()
                .is_none_or(|h| step.requests.iter().any(|r| r.host.contains(h)))
            && self.from.is_none_or(|f| step.number >= f)
            && self.to.is_none_or(|t| step.number <= t)
    }
}

#[derive(Serialize)]
pub(crate) struct Page {
    /// The newest step's number (0 for an empty history).
    head: u64,
    rows: Vec<Row>,
    /// Ask again with `before=` this for the next (older) page; `None` at the start.
    next_before: Option<u64>,
}

/// Rows newest first: below `before` (or above `after`, for live updates), at most `limit`.
pub(crate) fn page(
    steps: &[Step],
    before: Option<u64>,
    after: Option<u64>,
    limit: usize,
    filter: &Filter,
) -> Page {
    let limit = limit.clamp(1, MAX_PAGE);
    let rewound = rewound_over(steps);
    let mut rows = Vec::new();
    let mut next_before = None;
    for s in steps.iter().rev() {
        if before.is_some_and(|b| s.number >= b) {
            continue;
        }
        if after.is_some_and(|a| s.number <= a) {
            break;
        }
        let r = row(s, rewound.get(&s.number).copied());
        if !filter.keeps(s, &r) {
            continue;
        }
        if rows.len() == limit {
            next_before = rows.last().map(|r: &Row| r.number);
            break;
        }
        rows.push(r);
    }
    Page {
        head: steps.last().map_or(0, |s| s.number),
        rows,
        next_before,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn step(number: u64, kind: &str, target: Option<u64>) -> Step {
        serde_json::from_value(serde_json::json!({
            "number": number, "kind": kind, "parent": number.checked_sub(1).filter(|p| *p > 0),
            "started_at_ms": 0, "ended_at_ms": 0, "tree": null, "summary": "", "target": target,
        }))
        .unwrap()
    }

    /// 1 2 3 4 | 5 rewinds to 2 (3, 4 rewound over) | 6 | 7 rewinds to 6 (nothing between).
    #[test]
    fn steps_between_a_rewind_and_its_target_are_rewound_over() {
        let steps = vec![
            step(1, "import", None),
            step(2, "run", None),
            step(3, "run", None),
            step(4, "run", None),
            step(5, "rewind", Some(2)),
            step(6, "run", None),
            step(7, "rewind", Some(6)),
        ];
        let over = rewound_over(&steps);
        let mut got: Vec<(u64, u64)> = over.into_iter().collect();
        got.sort();
        assert_eq!(got, [(3, 5), (4, 5)]);
        let page = page(&steps, None, None, 50, &Filter::default());
        let json = serde_json::to_value(&page).unwrap();
        let row3 = &json["rows"][4];
        assert_eq!(row3["number"], 3);
        assert!(
            row3["marks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m == "rewound-over")
        );
    }
}
