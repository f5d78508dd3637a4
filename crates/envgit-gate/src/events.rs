//! What the gate saw: one [`GateEvent`] per CONNECT and per plain-HTTP request.
//!
//! A [`Recorder`] is filled in while a connection or request is handled and pushes its event
//! when dropped, so an event is recorded however handling ends (done, failed, or cut short by
//! [`crate::Gate::stop`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One CONNECT or request and what became of it. Serializable, so the process running a gate
/// can hand its events to another (`envgit mcp` collects its downstream servers').
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GateEvent {
    /// `CONNECT`, or the HTTP method of a plain-HTTP request.
    pub method: String,
    pub host: String,
    pub port: u16,
    /// The origin-form target as sent: the path and, when there is one, `?query` (the
    /// server reads both); `""` for CONNECT.
    pub path: String,
    pub decision: Decision,
    /// The `network.allow` entry that matched, or the rule id that refused.
    pub rule: Option<String>,
    /// Why a refusal happened and how to allow it, when the rule says (`network.*`): e.g.
    /// `to allow it, add "example.com" to network.allow in envgit.yaml`.
    pub reason: Option<String>,
    /// Bytes from the sandbox towards the upstream.
    pub bytes_out: u64,
    /// Bytes from the upstream back to the sandbox.
    pub bytes_in: u64,
    /// The status the client was answered with (for CONNECT: 200, 403, 502 …).
    pub status: Option<u16>,
    /// When handling started, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// An irreversible request let out (an `allow` rule matched): its step is marked.
    pub irreversible: bool,
    /// A tunnel carried without looking inside (`network.passthrough`, raw TCP).
    pub uninspected: bool,
    /// The request was asked about: how it was answered.
    pub approval: Option<EventApproval>,
    /// Not one request but this many, past the first [`LISTED_MAX`] of a step's list
    /// ([`EventList`]), to the same host with the same decision and rule: their bytes summed,
    /// the method the first one's, no path. 0 for a request listed on its own.
    #[serde(skip_serializing_if = "is_zero")]
    pub unlisted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How many requests a step lists one by one ([`EventList`]): the rest are counted per host,
/// decision and rule ([`GateEvent::unlisted`]), so that a step's record and envgit's memory,
/// the host's, stay bounded whatever the step sends.
pub const LISTED_MAX: usize = 10_000;
/// How many such counts are kept; the requests past them are counted under host `*`.
const COUNTED_MAX: usize = 256;
/// The longest path (with its query) an event keeps; a longer one ends with `…`.
const PATH_MAX: usize = 2048;

/// How an `ask` was answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EventApproval {
    pub answer: ApprovalAnswer,
    /// Who answered (`envgit approve` from a terminal, `timeout`, an earlier approval).
    pub by: String,
    /// Exactly what was approved: the rule's summary of the request.
    pub summary: String,
    pub at_ms: u64,
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// What the gate did with a CONNECT or request. The serde names are the strings stored in
/// step records before this was an enum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allowed,
    /// Also what an event says until the gate decides (fail closed).
    #[default]
    Denied,
}

/// How a person (or the timeout) answered an `ask`. The step record has its own
/// (`envgit_store::ApprovalAnswer`, which also reads answers it does not know); the binary
/// converts one to the other in `supervisor::requests_of`, so the gate, the security-critical
/// proxy, never depends on the store for a word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    Approved,
    #[default]
    Refused,
}

impl Decision {
    /// The wire name (`allowed`, `denied`).
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
        }
    }
}

impl ApprovalAnswer {
    /// The wire name (`approved`, `refused`).
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalAnswer::Approved => "approved",
            ApprovalAnswer::Refused => "refused",
        }
    }
}

/// Display as the wire name, and compare with it (`event.decision == "allowed"`), so records
/// and tests read the same as when these were strings.
macro_rules! wire_name {
    ($t:ty) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }
        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}
wire_name!(Decision);
wire_name!(ApprovalAnswer);

/// Told about every refusal as it happens (envgit prints it on its terminal at once, above the
/// client's own error).
pub type Announce = Box<dyn Fn(&GateEvent) + Send + Sync>;

#[derive(Default)]
pub(crate) struct Events {
    list: Mutex<EventList>,
    announce: Option<Announce>,
}

/// Events as a step keeps them: the first [`LISTED_MAX`] requests one by one, then counts per
/// host, decision and rule ([`GateEvent::unlisted`]). The gate keeps its events so until they
/// are taken, and whoever gathers several takes into one step's (a session's tool calls,
/// `envgit mcp`'s servers) gathers them into one of these, so that a step's list is bounded
/// however often it was taken.
#[derive(Default)]
pub struct EventList {
    /// The requests listed, and the counts where `counted` says.
    events: Vec<GateEvent>,
    /// Where each count is in `events`, by host, decision and rule.
    counted: HashMap<(String, Decision, Option<String>), usize>,
}

impl EventList {
    /// Adds one request (listed while fewer than [`LISTED_MAX`] are), or a count of them.
    pub fn push(&mut self, mut event: GateEvent) {
        let listed = self.events.len() - self.counted.len();
        if event.unlisted == 0 && listed < LISTED_MAX {
            shorten_path(&mut event.path);
            self.events.push(event);
            return;
        }
        let mut key = (event.host.clone(), event.decision, event.rule.clone());
        if !self.counted.contains_key(&key) && self.counted.len() >= COUNTED_MAX {
            key.0 = "*".to_owned();
        }
        let requests = event.unlisted.max(1);
        if let Some(&at) = self.counted.get(&key) {
            let count = &mut self.events[at];
            count.unlisted += requests;
            count.bytes_out += event.bytes_out;
            count.bytes_in += event.bytes_in;
            count.irreversible |= event.irreversible;
            count.uninspected |= event.uninspected;
            return;
        }
        event.host.clone_from(&key.0);
        event.path.clear();
        event.reason = None;
        event.approval = None;
        event.unlisted = requests;
        self.counted.insert(key, self.events.len());
        self.events.push(event);
    }

    /// The events in the order they came, each count where its first request came.
    pub fn into_events(self) -> Vec<GateEvent> {
        self.events
    }

    /// [`EventList::into_events`], leaving this empty.
    pub fn take(&mut self) -> Vec<GateEvent> {
        std::mem::take(self).into_events()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

impl Extend<GateEvent> for EventList {
    fn extend<I: IntoIterator<Item = GateEvent>>(&mut self, events: I) {
        for e in events {
            self.push(e);
        }
    }
}

/// Cuts `path` to [`PATH_MAX`] bytes at a character boundary, ending it with `…`.
fn shorten_path(path: &mut String) {
    if path.len() > PATH_MAX {
        let mut end = PATH_MAX;
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        path.truncate(end);
        path.push('…');
    }
}

impl Events {
    pub(crate) fn new(announce: Option<Announce>) -> Events {
        Events {
            list: Mutex::default(),
            announce,
        }
    }

    pub(crate) fn push(&self, event: GateEvent) {
        self.list
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(event);
    }

    pub(crate) fn take(&self) -> Vec<GateEvent> {
        self.list.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

pub(crate) struct Recorder {
    events: Arc<Events>,
    event: GateEvent,
    /// Shared so a streamed body can count what passes after the head was answered.
    pub(crate) bytes_out: Arc<AtomicU64>,
    pub(crate) bytes_in: Arc<AtomicU64>,
}

impl Recorder {
    /// Starts an event; it is `denied` with no rule until [`Recorder::decide`] says otherwise.
    pub(crate) fn new(events: &Arc<Events>, method: &str) -> Recorder {
        let at_ms = now_ms();
        Recorder {
            events: Arc::clone(events),
            event: GateEvent {
                method: method.to_owned(),
                host: String::new(),
                port: 0,
                path: String::new(),
                decision: Decision::Denied,
                rule: None,
                reason: None,
                bytes_out: 0,
                bytes_in: 0,
                status: None,
                at_ms,
                irreversible: false,
                uninspected: false,
                approval: None,
                unlisted: 0,
            },
            bytes_out: Arc::default(),
            bytes_in: Arc::default(),
        }
    }

    pub(crate) fn target(&mut self, host: &str, port: u16, path: &str) {
        self.event.host = host.to_owned();
        self.event.port = port;
        self.event.path = path.to_owned();
    }

    pub(crate) fn decide(&mut self, allowed: bool, rule: &str) {
        self.event.decision = if allowed {
            Decision::Allowed
        } else {
            Decision::Denied
        };
        self.event.rule = Some(rule.to_owned());
        if !allowed && let Some(announce) = &self.events.announce {
            announce(&self.event);
        }
    }

    /// Why the coming refusal happens and how to allow it; call before [`Recorder::decide`],
    /// so the announcement carries it.
    pub(crate) fn reason(&mut self, reason: &str) {
        if !reason.is_empty() {
            self.event.reason = Some(reason.to_owned());
        }
    }

    /// An irreversible request goes out under `rule`.
    pub(crate) fn mark(&mut self, rule: &str) {
        self.event.rule = Some(rule.to_owned());
        self.event.irreversible = true;
    }

    pub(crate) fn approval(&mut self, answer: ApprovalAnswer, by: &str, summary: &str) {
        self.event.approval = Some(EventApproval {
            answer,
            by: by.to_owned(),
            summary: summary.to_owned(),
            at_ms: now_ms(),
        });
    }

    pub(crate) fn uninspected(&mut self) {
        self.event.uninspected = true;
    }

    pub(crate) fn status(&mut self, status: u16) {
        self.event.status = Some(status);
    }

    pub(crate) fn add_out(&self, n: usize) {
        self.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_in(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let mut event = std::mem::take(&mut self.event);
        event.bytes_out = self.bytes_out.load(Ordering::Relaxed);
        event.bytes_in = self.bytes_in.load(Ordering::Relaxed);
        self.events.push(event);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Events cross processes as JSON (`envgit mcp` collects its servers'), so the names on
    /// the wire are the strings they were before these were enums.
    #[test]
    fn decisions_travel_as_the_old_strings() {
        for d in [Decision::Allowed, Decision::Denied] {
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
        }
        for a in [ApprovalAnswer::Approved, ApprovalAnswer::Refused] {
            assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
        }
        let old = r#"{"method":"GET","host":"h","port":443,"decision":"allowed",
            "approval":{"answer":"refused","by":"timeout","summary":"s","at_ms":1}}"#;
        let e: GateEvent = serde_json::from_str(old).unwrap();
        assert_eq!(e.decision, Decision::Allowed);
        assert_eq!(e.approval.unwrap().answer, ApprovalAnswer::Refused);
        // An event that never reached a decision is denied.
        assert_eq!(GateEvent::default().decision, Decision::Denied);
    }

    fn request(host: &str, path: &str, decision: Decision, rule: Option<&str>) -> GateEvent {
        GateEvent {
            method: "GET".into(),
            host: host.into(),
            port: 443,
            path: path.into(),
            decision,
            rule: rule.map(str::to_owned),
            bytes_out: 10,
            bytes_in: 100,
            ..GateEvent::default()
        }
    }

    /// Past the listed ones, requests are counted per host, decision and rule, with their bytes
    /// summed; past the counts kept, under host `*`; a long path is cut at a character.
    #[test]
    fn the_list_is_bounded_and_the_rest_counted() {
        let mut list = EventList::default();
        let long = format!("/{}", "é".repeat(PATH_MAX));
        list.push(request("a.example", &long, Decision::Allowed, None));
        for _ in 1..LISTED_MAX {
            list.push(request("a.example", "/x", Decision::Allowed, None));
        }
        assert!(list.events[0].path.len() <= PATH_MAX + '…'.len_utf8());
        assert!(list.events[0].path.ends_with('…'));
        for _ in 0..3 {
            list.push(request("a.example", "/y", Decision::Allowed, None));
            list.push(request(
                "a.example",
                "/z",
                Decision::Denied,
                Some("npm.publish"),
            ));
        }
        for i in 0..COUNTED_MAX + 5 {
            list.push(request(
                &format!("h{i}.example"),
                "/",
                Decision::Allowed,
                None,
            ));
        }
        let counts: Vec<&GateEvent> = list.events.iter().filter(|e| e.unlisted > 0).collect();
        assert_eq!(list.events.len() - counts.len(), LISTED_MAX);
        assert_eq!(counts.len(), COUNTED_MAX + 1);
        let allowed = counts[0];
        assert_eq!(
            (
                allowed.host.as_str(),
                allowed.unlisted,
                allowed.bytes_in,
                allowed.path.as_str()
            ),
            ("a.example", 3, 300, "")
        );
        let denied = counts[1];
        assert_eq!(denied.rule.as_deref(), Some("npm.publish"));
        assert_eq!((denied.decision, denied.unlisted), (Decision::Denied, 3));
        let rest = counts.last().unwrap();
        assert_eq!((rest.host.as_str(), rest.unlisted), ("*", 7));
        assert_eq!(
            counts.iter().map(|e| e.unlisted).sum::<u64>(),
            6 + COUNTED_MAX as u64 + 5
        );
    }

    /// A step gathered from several takes (a session's tool calls, `envgit mcp`'s servers) is
    /// bounded as one: the counts a take brings join the list's own.
    #[test]
    fn takes_gathered_into_one_list_stay_bounded() {
        let mut gate = EventList::default();
        for _ in 0..LISTED_MAX + 3 {
            gate.push(request("a.example", "/x", Decision::Allowed, None));
        }
        let first_take = gate.take();
        assert!(gate.is_empty());
        let mut step = EventList::default();
        step.extend(first_take);
        for _ in 0..5 {
            gate.push(request("a.example", "/x", Decision::Allowed, None));
        }
        step.extend(gate.take());
        let events = step.into_events();
        let counts: Vec<&GateEvent> = events.iter().filter(|e| e.unlisted > 0).collect();
        assert_eq!(events.len() - counts.len(), LISTED_MAX);
        assert_eq!(counts.len(), 1);
        assert_eq!((counts[0].unlisted, counts[0].bytes_out), (8, 80));
    }
}
