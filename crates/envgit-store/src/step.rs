//! Step records: what one step did. The supervisor fills a [`StepDraft`]; the store numbers it
//! and adds the tree and the files changed at commit.

use serde::{Deserialize, Serialize};

use crate::id::ObjectId;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    Import,
    Record,
    Run,
    Tool,
    Repl,
    Rewind,
    Fork,
    /// A step that began and never committed (its process crashed, was killed or signalled,
    /// or the disk was full), recorded by the next command that opened the store.
    Interrupted,
}

impl StepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Import => "import",
            Self::Record => "record",
            Self::Run => "run",
            Self::Tool => "tool",
            Self::Repl => "repl",
            Self::Rewind => "rewind",
            Self::Fork => "fork",
            Self::Interrupted => "interrupted",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepFlag {
    /// Another step of the project was open while this one was.
    Overlapped,
    /// A protected path changed during the step and was put back.
    ProtectedRestored,
    /// The watcher lost events; this step was taken with a full rescan.
    WatcherFallback,
    /// A file kept changing while it was read; the content recorded is one of its states.
    UnstableFiles,
    /// `gc` removed this step's snapshot; it stays in the log but cannot be restored.
    Pruned,
    /// An irreversible request left the machine during this step.
    Irreversible,
    /// `gc --purge` removed a path from this step's snapshot.
    Purged,
    /// A REPL step read at least 64 KiB from downstream tools and returned at most 1 % of it.
    LowReturn,
    /// The changes were made outside the sandbox, between steps (the user's own edits).
    Outside,
    /// Something the step wrote in `.git` was not data (a hook, a config key outside the
    /// allow-list, ...) and was not imported into the host's `.git`.
    GitDropped,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub path: String,
    pub change: ChangeKind,
    /// `file`, `symlink`, `dir` (an empty directory) or `marker`.
    pub entry: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_size: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeCounts {
    pub added: u64,
    pub modified: u64,
    pub deleted: u64,
    /// Bytes of content added or rewritten.
    pub bytes_written: u64,
}

/// One request the gate saw (filled by the gate; empty until it exists).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub method: String,
    pub host: String,
    pub path: String,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub bytes_out: u64,
    #[serde(default)]
    pub bytes_in: u64,
    pub decision: RequestOutcome,
    #[serde(default)]
    pub rule: Option<String>,
    /// The request was irreversible and left the machine.
    #[serde(default)]
    pub irreversible: bool,
}

/// What became of a request. The serde names are the strings older records hold; a name
/// this version does not know (a newer envgit's) reads as `Unrecognized` rather than making
/// the whole journal unreadable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestOutcome {
    Allowed,
    #[default]
    Denied,
    /// Asked about, and a person approved it.
    Approved,
    /// Asked about, and refused (or nobody answered in time).
    Refused,
    /// Let through a tunnel without looking inside (`network.passthrough`).
    Uninspected,
    #[serde(other)]
    Unrecognized,
}

/// How an `ask` was answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    Approved,
    #[default]
    Refused,
    #[serde(other)]
    Unrecognized,
}

/// What the policy said about a downstream tool call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolDecision {
    Allow,
    Deny,
    Ask,
    /// No such tool (and any name this version does not know).
    #[default]
    #[serde(other)]
    Unknown,
}

impl RequestOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Approved => "approved",
            Self::Refused => "refused",
            Self::Uninspected => "uninspected",
            Self::Unrecognized => "unrecognized",
        }
    }
}

impl ApprovalAnswer {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Refused => "refused",
            Self::Unrecognized => "unrecognized",
        }
    }
}

impl ToolDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Ask => "ask",
            Self::Unknown => "unknown",
        }
    }
}

/// Display as the wire name, and compare with it, so the log and tests read as when these
/// were strings.
macro_rules! wire_name {
    ($t:ty) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}
wire_name!(RequestOutcome);
wire_name!(ApprovalAnswer);
wire_name!(ToolDecision);

/// Something envgit refused: `what` is `POST host/path`, `read PATH`, `write PATH` or
/// `command LINE`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub what: String,
    pub rule: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub what: String,
    pub rule: String,
    pub approver: String,
    pub answer: ApprovalAnswer,
    pub at_ms: u64,
}

/// What an `execute` call of `envgit mcp` did (a step of kind `repl`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplRecord {
    pub session: String,
    pub code: String,
    /// `ok`, `error`, `timeout`, `oom`, `cancelled`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Bytes of downstream results the cell received.
    pub bytes_in: u64,
    /// Bytes of text returned to the client.
    pub bytes_out: u64,
    #[serde(default)]
    pub calls: Vec<ReplCall>,
    /// Characters the output cap cut.
    #[serde(default)]
    pub truncated_chars: u64,
}

/// One downstream call made by a REPL step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplCall {
    pub server: String,
    pub tool: String,
    pub decision: ToolDecision,
    #[serde(default)]
    pub is_error: bool,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub ms: u64,
}

/// Where a forked project came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub project: String,
    pub step: u64,
}

/// What the caller knows about a step before it is committed.
#[derive(Clone, Debug, Default)]
pub struct StepDraft {
    pub kind: Option<StepKind>,
    pub started_at_ms: u64,
    pub summary: String,
    pub command: Option<Vec<String>>,
    /// Where the command ran.
    pub cwd: Option<String>,
    pub exit_code: Option<i32>,
    pub policy_hash: Option<String>,
    pub flags: Vec<StepFlag>,
    pub requests: Vec<Request>,
    pub refusals: Vec<Refusal>,
    pub approvals: Vec<Approval>,
    pub target: Option<u64>,
    pub origin: Option<Origin>,
    pub repl: Option<ReplRecord>,
    /// Free-form facts worth keeping with the step (e.g. what an agent asked for that
    /// envgit's policy overrode), one line each.
    pub notes: Vec<String>,
}

impl StepDraft {
    /// Flags the step with `flag`, once.
    pub fn flag(&mut self, flag: StepFlag) {
        if !self.flags.contains(&flag) {
            self.flags.push(flag);
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub number: u64,
    pub kind: StepKind,
    pub parent: Option<u64>,
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    /// The snapshot; `None` once `gc` pruned the step.
    pub tree: Option<ObjectId>,
    pub summary: String,
    #[serde(default)]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub policy_hash: Option<String>,
    /// At most `MAX_RECORDED_CHANGES` (200) changes, the project's files before `.git/…` (each
    /// part in path order, see [`project_first`]); `changes_total` counts them all.
    #[serde(default)]
    pub changes: Vec<Change>,
    #[serde(default)]
    pub changes_total: ChangeCounts,
    #[serde(default)]
    pub changes_truncated: bool,
    /// How many changes the record left out when truncated (0 in older records).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub changes_omitted: u64,
    #[serde(default)]
    pub flags: Vec<StepFlag>,
    #[serde(default)]
    pub requests: Vec<Request>,
    #[serde(default)]
    pub refusals: Vec<Refusal>,
    #[serde(default)]
    pub approvals: Vec<Approval>,
    /// For `rewind`: the step restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<u64>,
    /// For `fork`: where the project came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// For `repl`: the cell, its downstream calls and bytes in and out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repl: Option<ReplRecord>,
    /// Free-form facts worth keeping with the step, one line each (absent from older records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A step record keeps this many changed paths; `show` and `diff` read the rest from trees.
pub const MAX_RECORDED_CHANGES: usize = 200;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `.git` itself or a path inside it.
pub fn is_git_path(p: &str) -> bool {
    p == ".git" || p.starts_with(".git/")
}

/// The order every change list is shown and kept in: the project's own files first, then
/// `.git/…`, each part in the order given (path order from a tree diff). A stable sort, so a
/// truncated list keeps the project files a reader looks for.
pub fn project_first<T>(items: &mut [T], path: impl Fn(&T) -> &[u8]) {
    items.sort_by_key(|c| {
        let p = path(c);
        p == b".git" || p.starts_with(b".git/")
    });
}

impl Step {
    pub fn has_flag(&self, flag: StepFlag) -> bool {
        self.flags.contains(&flag)
    }

    /// Irreversible requests that left the machine during this step.
    pub fn marks(&self) -> impl Iterator<Item = &Request> {
        self.requests.iter().filter(|r| r.irreversible)
    }
}

impl ChangeCounts {
    /// Counts of `changes` by kind, and the bytes they wrote.
    pub fn of(changes: &[Change]) -> Self {
        let mut counts = Self::default();
        for c in changes {
            match c.change {
                ChangeKind::Added => counts.added += 1,
                ChangeKind::Modified => counts.modified += 1,
                ChangeKind::Deleted => counts.deleted += 1,
            }
            counts.bytes_written += c.new_size.unwrap_or(0);
        }
        counts
    }
}

/// Where a step sits when it is committed: its number, its parent, its snapshot, and whether
/// other steps ran while it did.
pub(crate) struct Placement {
    pub number: u64,
    pub parent: Option<u64>,
    pub tree: ObjectId,
    pub overlapped: bool,
}

impl StepDraft {
    /// The record committed for this draft: `changes` (the diff from the parent's snapshot)
    /// kept project-first and cut to [`MAX_RECORDED_CHANGES`] with their totals; the draft's
    /// flags, plus `overlapped` and `irreversible` where they apply, once each, in order.
    pub(crate) fn into_step(self, at: Placement, mut changes: Vec<Change>) -> Step {
        // Kept project-first so a truncated record still names the project's files.
        project_first(&mut changes, |c| c.path.as_bytes());
        let counts = ChangeCounts::of(&changes);
        let mut flags = self.flags;
        if at.overlapped {
            flags.push(StepFlag::Overlapped);
        }
        if self.requests.iter().any(|r| r.irreversible) {
            flags.push(StepFlag::Irreversible);
        }
        flags.sort_by_key(|f| *f as u8);
        flags.dedup();
        let truncated = changes.len() > MAX_RECORDED_CHANGES;
        let omitted = changes.len().saturating_sub(MAX_RECORDED_CHANGES) as u64;
        changes.truncate(MAX_RECORDED_CHANGES);
        Step {
            number: at.number,
            kind: self.kind.unwrap_or(StepKind::Record),
            parent: at.parent,
            started_at_ms: self.started_at_ms,
            ended_at_ms: now_ms(),
            tree: Some(at.tree),
            summary: self.summary,
            command: self.command,
            cwd: self.cwd,
            exit_code: self.exit_code,
            policy_hash: self.policy_hash,
            changes,
            changes_total: counts,
            changes_truncated: truncated,
            changes_omitted: omitted,
            flags,
            requests: self.requests,
            refusals: self.refusals,
            approvals: self.approvals,
            target: self.target,
            origin: self.origin,
            repl: self.repl,
            notes: self.notes,
        }
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A record as journals held it before `notes` existed.
    const OLD_RECORD: &str = r#"{"number":3,"kind":"run","parent":2,"started_at_ms":1,"ended_at_ms":2,"tree":null,"summary":"echo hi","command":["echo","hi"],"exit_code":0,"policy_hash":null,"changes":[],"changes_total":{"added":0,"modified":0,"deleted":0,"bytes_written":0},"changes_truncated":false,"flags":[],"requests":[],"refusals":[],"approvals":[]}"#;

    fn change(path: &str, change: ChangeKind, new_size: Option<u64>) -> Change {
        Change {
            path: path.into(),
            change,
            entry: "file".into(),
            old_size: None,
            new_size,
        }
    }

    #[test]
    fn a_record_counts_every_change_keeps_the_projects_first_and_flags_once() {
        // 150 changes in .git listed first (path order), then 100 of the project's.
        let mut changes: Vec<Change> = (0..150)
            .map(|i| change(&format!(".git/objects/{i:03}"), ChangeKind::Added, Some(10)))
            .collect();
        changes.extend(
            (0..100).map(|i| change(&format!("src/{i:03}"), ChangeKind::Modified, Some(1))),
        );
        changes.push(change("gone", ChangeKind::Deleted, None));
        let draft = StepDraft {
            flags: vec![StepFlag::Overlapped, StepFlag::UnstableFiles],
            requests: vec![Request {
                irreversible: true,
                ..Default::default()
            }],
            ..Default::default()
        };
        let at = Placement {
            number: 4,
            parent: Some(3),
            tree: ObjectId([7; 32]),
            overlapped: true,
        };
        let step = draft.into_step(at, changes);
        assert_eq!((step.number, step.parent), (4, Some(3)));
        assert_eq!(step.kind, StepKind::Record);
        assert_eq!(
            step.changes_total,
            ChangeCounts {
                added: 150,
                modified: 100,
                deleted: 1,
                bytes_written: 1600,
            }
        );
        assert_eq!(step.changes.len(), MAX_RECORDED_CHANGES);
        assert!(step.changes_truncated);
        assert_eq!(step.changes_omitted, 51);
        // Every project change is kept, in the order given; .git's fill the rest.
        assert_eq!(step.changes[0].path, "src/000");
        assert_eq!(step.changes[100].path, "gone");
        assert!(step.changes[101].path.starts_with(".git/"));
        assert_eq!(
            step.flags,
            [
                StepFlag::Overlapped,
                StepFlag::UnstableFiles,
                StepFlag::Irreversible
            ]
        );
    }

    #[test]
    fn a_step_without_notes_still_decodes_and_encodes_as_before() {
        let step: Step = serde_json::from_str(OLD_RECORD).unwrap();
        assert!(step.notes.is_empty());
        assert_eq!(step.summary, "echo hi");
        let again = serde_json::to_string(&step).unwrap();
        assert!(!again.contains("notes"), "{again}");
        assert_eq!(serde_json::from_str::<Step>(&again).unwrap(), step);
    }

    #[test]
    fn notes_round_trip() {
        let mut step: Step = serde_json::from_str(OLD_RECORD).unwrap();
        step.notes = vec!["codex asked for sandbox {}; envgit's policy applied instead".into()];
        let text = serde_json::to_string(&step).unwrap();
        assert!(
            text.contains(r#""notes":["codex asked for sandbox"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Step>(&text).unwrap(), step);
    }
}
