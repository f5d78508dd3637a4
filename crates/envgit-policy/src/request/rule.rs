//! A rule as the gate evaluates it: the user's `net` rules and the preset entries compile to
//! the same shape.

use crate::{Action, NetRule};

use super::body::{self, Matcher};
use super::matchers::{Methods, Tri, path_tri, pattern_segments, query_tri};
use super::prepared::Prepared;
use super::summary::Summary;
use crate::network::rule_host_matches;

/// One request shape: every part given must match.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    /// Host patterns (any may match); `*` is any host.
    pub hosts: Vec<String>,
    pub methods: Methods,
    /// Path globs as segments, any of which may match; `None` is any path.
    pub paths: Option<Vec<Vec<String>>>,
    pub query: Vec<(String, String)>,
    /// Header names (lowercase) the request must carry, each.
    pub headers: Vec<String>,
    pub body: Vec<Matcher>,
}

/// A rule: matches when some shape matches and no exception does.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub id: String,
    pub shapes: Vec<Shape>,
    pub except: Vec<Shape>,
    pub summary: Summary,
}

impl Shape {
    /// The answer, and whether the body could change it (a body matcher was reached and
    /// could not answer from what it was given).
    pub fn eval(&self, req: &Prepared<'_>) -> (Tri, bool) {
        // The method first: it is the cheapest test and rules out most of the preset for a
        // read (the host patterns parse the target each time).
        let method = req.methods.tri(&self.methods);
        if method == Tri::NoMatch {
            return (method, false);
        }
        if !self
            .hosts
            .iter()
            .any(|h| rule_host_matches(h, req.host, req.port))
            || !self
                .headers
                .iter()
                .all(|h| req.header_names.contains(&h.as_str()))
        {
            return (Tri::NoMatch, false);
        }
        let head = method
            .and(|| query_tri(&self.query, &req.query))
            .and(|| match &self.paths {
                Some(patterns) => path_tri(patterns, &req.views),
                None => Tri::Match,
            });
        if head == Tri::NoMatch || self.body.is_empty() {
            return (head, false);
        }
        let mut answer = head;
        let mut wanted = false;
        for m in &self.body {
            let t = m.eval(req);
            wanted |= matches!(t, Tri::Unknown(_));
            answer = answer.and(|| t);
        }
        (answer, wanted)
    }
}

impl Rule {
    /// Some shape matches and no exception surely does. An exception that is `Unknown` leaves
    /// the rule `Unknown`.
    pub fn eval(&self, req: &Prepared<'_>) -> (Tri, bool) {
        let mut consulted = false;
        let mut answer = Tri::NoMatch;
        for shape in &self.shapes {
            let (t, c) = shape.eval(req);
            consulted |= c;
            answer = answer.or(|| t);
            if answer == Tri::Match {
                break;
            }
        }
        if answer == Tri::NoMatch {
            return (answer, consulted);
        }
        for shape in &self.except {
            let (t, c) = shape.eval(req);
            consulted |= c;
            match t {
                Tri::Match => return (Tri::NoMatch, consulted),
                Tri::Unknown(why) => answer = Tri::Unknown(why),
                Tri::NoMatch => {}
            }
        }
        (answer, consulted)
    }
}

/// Does the rule decide for this action? `Unknown` is a match for `deny` and `ask` (fail
/// closed) and not for `allow`: an allow that decided on what it could not read would preempt
/// a later `deny`. The judgement still marks what such an allow leaves undecided
/// (`decide.rs`).
pub(crate) fn decides(answer: &Tri, action: Action) -> bool {
    match answer {
        Tri::Match => true,
        Tri::NoMatch => false,
        Tri::Unknown(_) => action != Action::Allow,
    }
}

/// A user's `net` rule.
pub(crate) fn from_net(rule: &NetRule, id: String) -> Rule {
    Rule {
        id,
        shapes: vec![Shape {
            hosts: vec![rule.host.clone()],
            methods: if rule.methods.is_empty() {
                Methods::Any
            } else {
                Methods::Only(rule.methods.clone())
            },
            paths: rule.path.as_deref().map(|p| vec![pattern_segments(p)]),
            query: rule
                .query
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            headers: Vec::new(),
            body: rule
                .body
                .as_ref()
                .map(body::from_policy)
                .unwrap_or_default(),
        }],
        except: Vec::new(),
        summary: if rule
            .body
            .as_ref()
            .is_some_and(|b| b.graphql_operation.is_some())
        {
            Summary::Graphql
        } else {
            Summary::Request
        },
    }
}
