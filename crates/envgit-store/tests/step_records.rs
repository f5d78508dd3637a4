//! Step records written before decisions were enums still read, and are written back with
//! the same strings; a decision name this version does not know does not make the record
//! (and with it the journal) unreadable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use envgit_store::{ApprovalAnswer, RequestOutcome, Step, ToolDecision};
use serde_json::Value;

/// A `repl` step as an older envgit wrote it: every decision and answer as a string.
const OLD_RECORD: &str = r#"{"number":7,"kind":"repl","parent":6,"started_at_ms":10,"ended_at_ms":20,"tree":null,"summary":"execute","command":null,"exit_code":null,"policy_hash":"p","changes":[],"changes_total":{"added":0,"modified":0,"deleted":0,"bytes_written":0},"changes_truncated":false,"flags":[],
"requests":[
 {"method":"GET","host":"a.example","path":"/","status":200,"bytes_out":1,"bytes_in":2,"decision":"allowed","rule":"a.example","irreversible":false},
 {"method":"POST","host":"b.example","path":"/x","status":403,"bytes_out":0,"bytes_in":0,"decision":"denied","rule":"network.default","irreversible":false},
 {"method":"POST","host":"c.example","path":"/p","status":200,"bytes_out":5,"bytes_in":6,"decision":"approved","rule":"push","irreversible":true},
 {"method":"POST","host":"c.example","path":"/p","status":403,"bytes_out":0,"bytes_in":0,"decision":"refused","rule":"push","irreversible":false},
 {"method":"CONNECT","host":"d.example","path":"","status":200,"bytes_out":9,"bytes_in":9,"decision":"uninspected","rule":"d.example","irreversible":false}],
"refusals":[{"what":"POST b.example/x","rule":"network.default"}],
"approvals":[
 {"what":"POST c.example/p: push","rule":"push","approver":"envgit approve (uid 0)","answer":"approved","at_ms":15},
 {"what":"tool gh.merge","rule":"mcp.tools.gh.*","approver":"no answer within 5 s","answer":"refused","at_ms":16}],
"repl":{"session":"s","code":"1","status":"ok","bytes_in":0,"bytes_out":1,"calls":[
 {"server":"gh","tool":"a","decision":"allow","is_error":false,"bytes_in":1,"bytes_out":1,"ms":1},
 {"server":"gh","tool":"b","decision":"deny","is_error":false,"bytes_in":0,"bytes_out":1,"ms":0},
 {"server":"gh","tool":"c","decision":"ask","is_error":false,"bytes_in":0,"bytes_out":1,"ms":0},
 {"server":"gh","tool":"d","decision":"unknown","is_error":true,"bytes_in":0,"bytes_out":1,"ms":0}],
 "truncated_chars":0}}"#;

#[test]
fn an_old_record_reads_into_the_enums() {
    let step: Step = serde_json::from_str(OLD_RECORD).expect("an old record reads");
    let decisions: Vec<RequestOutcome> = step.requests.iter().map(|r| r.decision).collect();
    assert_eq!(
        decisions,
        [
            RequestOutcome::Allowed,
            RequestOutcome::Denied,
            RequestOutcome::Approved,
            RequestOutcome::Refused,
            RequestOutcome::Uninspected,
        ]
    );
    let answers: Vec<ApprovalAnswer> = step.approvals.iter().map(|a| a.answer).collect();
    assert_eq!(answers, [ApprovalAnswer::Approved, ApprovalAnswer::Refused]);
    let calls: Vec<ToolDecision> = step
        .repl
        .as_ref()
        .unwrap()
        .calls
        .iter()
        .map(|c| c.decision)
        .collect();
    assert_eq!(
        calls,
        [
            ToolDecision::Allow,
            ToolDecision::Deny,
            ToolDecision::Ask,
            ToolDecision::Unknown,
        ]
    );
}

#[test]
fn an_old_record_is_written_back_with_the_same_strings() {
    let step: Step = serde_json::from_str(OLD_RECORD).unwrap();
    let again: Value = serde_json::to_value(&step).unwrap();
    let before: Value = serde_json::from_str(OLD_RECORD).unwrap();
    for field in ["requests", "approvals", "repl"] {
        assert_eq!(again[field], before[field], "{field}");
    }
    // The log prints the same words as before.
    let shown: Vec<String> = step
        .requests
        .iter()
        .map(|r| r.decision.to_string())
        .collect();
    assert_eq!(
        shown,
        ["allowed", "denied", "approved", "refused", "uninspected"]
    );
}

#[test]
fn a_decision_from_a_newer_version_does_not_break_the_record() {
    let newer = OLD_RECORD
        .replacen(r#""decision":"allowed""#, r#""decision":"rerouted""#, 1)
        .replacen(r#""answer":"approved""#, r#""answer":"delegated""#, 1)
        .replacen(r#""decision":"allow""#, r#""decision":"sample""#, 1);
    let step: Step = serde_json::from_str(&newer).expect("a newer record still reads");
    assert_eq!(step.requests[0].decision, RequestOutcome::Unrecognized);
    assert_eq!(step.approvals[0].answer, ApprovalAnswer::Unrecognized);
    assert_eq!(
        step.repl.as_ref().unwrap().calls[0].decision,
        ToolDecision::Unknown
    );
    // Everything else in the record is intact.
    assert_eq!(step.requests[1].decision, RequestOutcome::Denied);
    assert_eq!(step.requests.len(), 5);
}
