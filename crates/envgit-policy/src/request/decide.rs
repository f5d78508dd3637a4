//! The order of judgement: `l7` of the host, then `irreversible` rules in order (presets
//! expanded in place), first match decides.

use std::borrow::Cow;

use crate::network::rule_host_matches;
use crate::{Action, IrreversibleEntry, L7Rule, Policy, Preset};

use super::matchers::{Tri, parse_query, path_tri, pattern_segments};
use super::method::{MethodSet, body_may_name_method};
use super::normalize::{normalize_path, request_path_views};
use super::payload::Body;
use super::prepared::Prepared;
use super::preset::default_rules;
use super::rule::{Rule, decides, from_net};
use super::summary::{clean, with_query};
use super::{RequestDecision, RequestInfo};

impl Policy {
    /// Does a rule need the body to decide this request, or to describe it (ref updates,
    /// `name@version`)? If so the gate reads a prefix of at most
    /// [`BODY_PREFIX_MAX`](super::BODY_PREFIX_MAX) bytes before calling
    /// [`Policy::decide_request`].
    pub fn needs_body(&self, req: &RequestInfo<'_>) -> bool {
        let probe = RequestInfo {
            body: None,
            body_complete: false,
            ..*req
        };
        let judged = self.judge_as(&probe, true);
        if judged.consulted {
            return true;
        }
        let rules = !self.irreversible.is_empty() || !self.network.l7.is_empty();
        if !rules || !body_may_name_method(req) {
            return false;
        }
        // A body may name another method (`_method`), which every rule depends on: it is read
        // where that could change the decision, judged as though it named any method (not
        // read) against as though it named none.
        let named_none = self.judge_as(&probe, false).decision;
        !settled_without_the_body(&judged.decision, &named_none)
    }

    /// `l7` of the host (a request no entry permits → `Deny` with rule `l7.<host>`), then the
    /// `irreversible` rules in order, presets expanded in place; the first match decides. A
    /// rule that cannot be evaluated (body needed but missing, cut short or unparseable; an
    /// ambiguous path whose readings disagree) counts as matching for `deny` and `ask`; for
    /// `allow` it does not decide (a later `deny` or `ask` still takes the request), but when
    /// no later rule decides, the request goes out [`RequestDecision::Marked`] by that `allow`
    /// rule: what may be an irreversible request is never let out unmarked.
    pub fn decide_request(&self, req: &RequestInfo<'_>) -> RequestDecision {
        self.judge(req).decision
    }

    /// [`Policy::decide_request`] on what the gate read of the body, and whether the rest of
    /// a body cut short (`body_complete: false`) could change the decision: it rests on a rule
    /// or a method (`_method` past the prefix) the prefix could not settle. The gate then reads
    /// the body whole, bounded, and decides again, rather than refuse a large upload or
    /// API call for what the prefix could not show.
    pub fn decide_request_from_prefix(&self, req: &RequestInfo<'_>) -> Decided {
        let judged = self.judge(req);
        Decided {
            rest_of_body_needed: judged.unsettled && req.body.is_some() && !req.body_complete,
            decision: judged.decision,
        }
    }

    fn judge(&self, req: &RequestInfo<'_>) -> Judged {
        let judged = self.judge_as(req, true);
        if req.body.is_some() || !body_may_name_method(req) {
            return judged;
        }
        // A body not read may name any method. Where that changes nothing (which is why
        // `needs_body` left it unread), the request is described by the methods it names.
        let named_none = self.judge_as(req, false);
        if settled_without_the_body(&judged.decision, &named_none.decision) {
            Judged {
                consulted: judged.consulted,
                ..named_none
            }
        } else {
            judged
        }
    }

    /// [`Self::judge`]; `methods_from_body: false` reads no method from the body.
    fn judge_as(&self, req: &RequestInfo<'_>, methods_from_body: bool) -> Judged {
        let normalized = normalize_path(req.path);
        let shown_path: Cow<'_, str> = match &normalized {
            Ok(p) => Cow::Borrowed(p.as_str()),
            Err(_) if req.path.is_empty() => Cow::Borrowed("/"),
            Err(_) => Cow::Borrowed(req.path),
        };
        let query = parse_query(req.query);
        let prepared = Prepared {
            methods: MethodSet::of(req, &query, methods_from_body),
            host: req.host,
            port: req.port,
            views: request_path_views(req.path, req.path_overrides),
            query,
            body: Body {
                bytes: req.body,
                complete: req.body_complete,
            },
            content_type: req.content_type,
            header_names: req.header_names,
        };

        if let Some(key) = self.l7_refusal(&prepared) {
            let summary = format!(
                "{} {}{} is not permitted by network.l7",
                prepared.methods.label(),
                req.host,
                with_query(&shown_path, req.query)
            );
            return Judged {
                decision: RequestDecision::Deny {
                    rule: format!("l7.{key}"),
                    summary: clean(&summary),
                },
                consulted: false,
                // A method a body may name refuses what the methods seen would not.
                unsettled: prepared.methods.any.is_some(),
            };
        }

        let mut consulted = false;
        // The first `allow` rule that could not be evaluated. It does not decide, so a later
        // `deny` or `ask` still takes the request (else an allow would preempt it on a body it
        // cannot read), but when nothing else decides the request may be the one it lets out
        // and marks: it goes out marked, never unmarked.
        let mut unsettled: Option<(RequestDecision, bool)> = None;
        for (index, entry) in self.irreversible.iter().enumerate() {
            let (rules, action): (Vec<Cow<'_, Rule>>, Action) = match entry {
                IrreversibleEntry::Preset {
                    preset: Preset::Default,
                    action,
                } => (default_rules().iter().map(Cow::Borrowed).collect(), *action),
                IrreversibleEntry::Net { rule, action, id } => {
                    let id = id.clone().unwrap_or_else(|| format!("net.{index}"));
                    (vec![Cow::Owned(from_net(rule, id))], *action)
                }
            };
            for rule in rules {
                let (answer, used_body) = rule.eval(&prepared);
                consulted |= used_body;
                let settles = decides(&answer, action);
                if !settles && (!matches!(answer, Tri::Unknown(_)) || unsettled.is_some()) {
                    continue;
                }
                let method = prepared.methods.label();
                let mut summary = rule.summary.describe(&rule.id, req, &method, &shown_path);
                if let Tri::Unknown(why) = &answer {
                    summary = clean(&format!("{summary} [not evaluated: {why}]"));
                }
                let rule_id = rule.id.clone();
                let decision = match action {
                    Action::Deny => RequestDecision::Deny {
                        rule: rule_id,
                        summary,
                    },
                    Action::Ask => RequestDecision::Ask {
                        rule: rule_id,
                        summary,
                    },
                    Action::Allow => RequestDecision::Marked {
                        rule: rule_id,
                        summary,
                    },
                };
                if !settles {
                    unsettled = Some((decision, rule.summary.wants_body()));
                    continue;
                }
                consulted |= rule.summary.wants_body();
                return Judged {
                    decision,
                    consulted,
                    unsettled: matches!(answer, Tri::Unknown(_)),
                };
            }
        }
        match unsettled {
            Some((marked, wants_body)) => Judged {
                decision: marked,
                consulted: consulted || wants_body,
                unsettled: true,
            },
            None => Judged {
                decision: RequestDecision::Allow,
                consulted,
                unsettled: false,
            },
        }
    }

    /// The `l7` key that refuses this request: the entries whose host pattern names the
    /// target apply, and one of them must permit the request.
    fn l7_refusal(&self, req: &Prepared<'_>) -> Option<String> {
        let mut first = None;
        for (key, rule) in &self.network.l7 {
            if !rule_host_matches(key, req.host, req.port) {
                continue;
            }
            if l7_permits(rule, req) {
                return None;
            }
            first.get_or_insert_with(|| key.clone());
        }
        first
    }
}

/// Whether a method the body names cannot matter: judged as naming any method (`any`) and as
/// naming none (`none`), the request goes out unmarked both ways, or is refused by the same
/// rule. An ask or a mark describes the request to a person (what they approve, what the step
/// says it sent), so the body is read for every method it names.
fn settled_without_the_body(any: &RequestDecision, none: &RequestDecision) -> bool {
    match (any, none) {
        (RequestDecision::Allow, RequestDecision::Allow) => true,
        (RequestDecision::Deny { rule: a, .. }, RequestDecision::Deny { rule: b, .. }) => a == b,
        _ => false,
    }
}

/// A decision on a body's prefix ([`Policy::decide_request_from_prefix`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub decision: RequestDecision,
    /// The rest of the body could change the decision.
    pub rest_of_body_needed: bool,
}

/// A decision, and what it rested on.
struct Judged {
    decision: RequestDecision,
    /// The body was (or would have been) consulted on the way.
    consulted: bool,
    /// The decision rests on something not evaluated (a rule's `Unknown`, or any method).
    unsettled: bool,
}

/// Method listed (or none listed) and path matching a listed glob (or none listed). An
/// ambiguous path whose readings disagree is not permitted.
fn l7_permits(rule: &L7Rule, req: &Prepared<'_>) -> bool {
    // Every method the request names must be listed.
    let listed = |method: &String| rule.methods.iter().any(|m| m.eq_ignore_ascii_case(method));
    let method_ok = rule.methods.is_empty()
        || (req.methods.any.is_none() && req.methods.known.iter().all(listed));
    if !method_ok {
        return false;
    }
    if rule.paths.is_empty() {
        return true;
    }
    let patterns: Vec<Vec<String>> = rule.paths.iter().map(|p| pattern_segments(p)).collect();
    path_tri(&patterns, &req.views) == Tri::Match
}
