//! `network:` and `irreversible:`, the sections the gate decides with.

use std::collections::BTreeMap;

use crate::network::raw_entry;
use crate::node::{Kind, Node};
use crate::read::{Reader, describe_path, join, scalar_text};
use crate::{
    Action, AllowOptions, BodyMatch, GraphqlOperation, IrreversibleEntry, L7Rule, NetRule,
    NetworkSection, PolicyError, Preset,
};

use super::values;

const ACTIONS: &[(&str, Action)] = &[
    ("deny", Action::Deny),
    ("ask", Action::Ask),
    ("allow", Action::Allow),
];
const PRESETS: &[(&str, Preset)] = &[("default", Preset::Default)];

pub(super) fn action(r: &Reader<'_>, node: &Node, path: &str) -> Result<Action, PolicyError> {
    r.choice(node, path, "action", ACTIONS)
}

pub(super) fn preset(r: &Reader<'_>, node: &Node, path: &str) -> Result<Preset, PolicyError> {
    r.choice(node, path, "preset", PRESETS)
}

fn hosts(r: &Reader<'_>, node: &Node, path: &str) -> Result<Vec<String>, PolicyError> {
    let names = r.strings(node, path)?;
    let items: &[Node] = match &node.kind {
        Kind::Seq(items) => items,
        _ => &[],
    };
    names
        .iter()
        .zip(items)
        .map(|(name, item)| values::host(r, item, path, name))
        .collect()
}

pub(super) fn network(r: &Reader<'_>, node: &Node) -> Result<NetworkSection, PolicyError> {
    let f = r.fields(node, "network", &["allow", "l7", "passthrough"])?;
    let mut out = NetworkSection::default();
    if let Some(n) = f.get("allow") {
        allow(r, n, &mut out)?;
    }
    if let Some(n) = f.get("passthrough") {
        out.passthrough = hosts(r, n, "network.passthrough")?;
    }
    if let Some(n) = f.get("l7") {
        let expected = "a mapping from host to { methods, paths }";
        for (name, key, value) in r.entries(n, "network.l7", expected)? {
            let host = values::host(r, key, "network.l7", &name)?;
            let path = join("network.l7", &name);
            let rule = l7_rule(r, value, &path)?;
            if out.l7.insert(host, rule).is_some() {
                return Err(r.err(key, format!("host `{name}` appears twice in `network.l7`")));
            }
        }
    }
    Ok(out)
}

const ALLOW_KEYS: &[&str] = &["host", "raw", "websocket"];

/// `network.allow`: host strings, or maps `{ host, raw, websocket }`.
fn allow(r: &Reader<'_>, node: &Node, out: &mut NetworkSection) -> Result<(), PolicyError> {
    let items = match &node.kind {
        Kind::Null => return Ok(()),
        Kind::Seq(items) => items,
        _ => {
            return Err(r.err(
                node,
                format!(
                    "`network.allow` must be a list of hosts, found {}",
                    node.kind.describe()
                ),
            ));
        }
    };
    for (i, item) in items.iter().enumerate() {
        let path = format!("network.allow[{i}]");
        match &item.kind {
            Kind::Str(_) => {
                let text = r.string(item, &path)?;
                out.allow.push(values::host(r, item, &path, &text)?);
            }
            Kind::Map(_) => {
                let f = r.fields(item, &path, ALLOW_KEYS)?;
                let host_node = r.require(&f, &path, "host", "e.g. `host: \"127.0.0.1:5432\"`")?;
                let host_path = join(&path, "host");
                let text = r.string(host_node, &host_path)?;
                let host = values::host(r, host_node, &host_path, &text)?;
                let flag = |key: &str| {
                    f.get(key)
                        .map(|n| r.bool(n, &join(&path, key)))
                        .transpose()
                        .map(Option::unwrap_or_default)
                };
                let options = AllowOptions {
                    raw: flag("raw")?,
                    websocket: flag("websocket")?,
                };
                if options.raw
                    && let Err(why) = raw_entry(&host)
                {
                    return Err(r.err(
                        item,
                        format!(
                            "`raw: true` on `{host}` in {}: {why}; raw TCP is valid only on a \
                             loopback or private-address `host:port` entry with an explicit \
                             port, such as `127.0.0.1:5432`, `localhost:6379` or \
                             `10.0.0.5:5432`",
                            describe_path(&path)
                        ),
                    ));
                }
                if options != AllowOptions::default() {
                    let merged = out.allow_options.entry(host.clone()).or_default();
                    merged.raw |= options.raw;
                    merged.websocket |= options.websocket;
                }
                out.allow.push(host);
            }
            _ => {
                return Err(r.err(
                    item,
                    format!(
                        "{} must be a host string or a mapping {{ host, raw, websocket }}, found {}",
                        describe_path(&path),
                        item.kind.describe()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn l7_rule(r: &Reader<'_>, node: &Node, path: &str) -> Result<L7Rule, PolicyError> {
    let f = r.fields(node, path, &["methods", "paths"])?;
    let mut rule = L7Rule::default();
    if let Some(n) = f.get("methods") {
        rule.methods = each(r, n, &join(path, "methods"), values::method)?;
    }
    if let Some(n) = f.get("paths") {
        rule.paths = each(r, n, &join(path, "paths"), values::url_path)?;
    }
    Ok(rule)
}

type Check = fn(&Reader<'_>, &Node, &str, &str) -> Result<String, PolicyError>;

/// A string or list of strings, each passed through `check` (errors point at the item).
fn each(r: &Reader<'_>, node: &Node, path: &str, check: Check) -> Result<Vec<String>, PolicyError> {
    let texts = r.one_or_many(node, path)?;
    let items: Vec<&Node> = match &node.kind {
        Kind::Seq(items) => items.iter().collect(),
        _ => vec![node],
    };
    texts
        .iter()
        .zip(items)
        .map(|(text, item)| check(r, item, path, text))
        .collect()
}

pub(super) fn irreversible(
    r: &Reader<'_>,
    node: &Node,
) -> Result<Vec<IrreversibleEntry>, PolicyError> {
    let items = match &node.kind {
        Kind::Null => return Ok(Vec::new()),
        Kind::Seq(items) => items,
        _ => {
            return Err(r.err(
                node,
                format!(
                    "`irreversible` must be a list of rules (`- preset: default` or `- net: {{...}}`), found {}",
                    node.kind.describe()
                ),
            ));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| entry(r, item, &format!("irreversible[{i}]")))
        .collect()
}

fn entry(r: &Reader<'_>, node: &Node, path: &str) -> Result<IrreversibleEntry, PolicyError> {
    // The keys that are valid depend on which kind of rule this is.
    let probe = r.fields(node, path, &["preset", "net", "action", "id"])?;
    match (probe.has("preset"), probe.has("net")) {
        (true, true) => Err(r.err(
            node,
            format!(
                "{} has both `preset` and `net`; a rule is one or the other",
                describe_path(path)
            ),
        )),
        (true, false) => {
            let f = r.fields(node, path, &["preset", "action"])?;
            let preset_node = r.require(&f, path, "preset", "")?;
            Ok(IrreversibleEntry::Preset {
                preset: preset(r, preset_node, &join(path, "preset"))?,
                action: match f.get("action") {
                    Some(n) => action(r, n, &join(path, "action"))?,
                    None => Action::Deny,
                },
            })
        }
        (false, true) => {
            let f = r.fields(node, path, &["net", "action", "id"])?;
            let net_node = r.require(&f, path, "net", "")?;
            let rule = net_rule(r, net_node, &join(path, "net"))?;
            let action_node = r.require(&f, path, "action", "one of deny, ask, allow")?;
            Ok(IrreversibleEntry::Net {
                rule,
                action: action(r, action_node, &join(path, "action"))?,
                id: f
                    .get("id")
                    .map(|n| r.string(n, &join(path, "id")))
                    .transpose()?,
            })
        }
        (false, false) => Err(r.err(
            node,
            format!(
                "{} needs `preset: default` or `net: {{ host, method, path }}`",
                describe_path(path)
            ),
        )),
    }
}

/// `*` or `*:port` (any host; a `net` rule only, never `network.allow`): `Some(true)`.
fn any_host_port(text: &str) -> Option<bool> {
    match text.strip_prefix('*')? {
        "" => Some(true),
        rest => {
            let port = rest.strip_prefix(':')?;
            Some(matches!(port.parse::<u16>(), Ok(n) if n > 0))
        }
    }
}

fn net_rule(r: &Reader<'_>, node: &Node, path: &str) -> Result<NetRule, PolicyError> {
    let f = r.fields(node, path, &["host", "method", "path", "query", "body"])?;
    let host_node = r.require(&f, path, "host", "e.g. `host: api.github.com`")?;
    let host_path = join(path, "host");
    let host_text = r.string(host_node, &host_path)?;
    let host = match any_host_port(&host_text) {
        Some(true) => host_text,
        _ => values::host(r, host_node, &host_path, &host_text)?,
    };
    let mut rule = NetRule {
        host,
        methods: Vec::new(),
        path: None,
        query: BTreeMap::new(),
        body: None,
    };
    if let Some(n) = f.get("method") {
        rule.methods = each(r, n, &join(path, "method"), values::method)?;
    }
    if let Some(n) = f.get("path") {
        let p = join(path, "path");
        rule.path = Some(values::url_path(r, n, &p, &r.string(n, &p)?)?);
    }
    if let Some(n) = f.get("query") {
        let qpath = join(path, "query");
        for (name, _, value) in r.entries(n, &qpath, "a mapping from parameter to value")? {
            let text = scalar_text(value).ok_or_else(|| {
                r.err(
                    value,
                    format!(
                        "{} must be a string, found {}",
                        describe_path(&join(&qpath, &name)),
                        value.kind.describe()
                    ),
                )
            })?;
            rule.query.insert(name, text);
        }
    }
    if let Some(n) = f.get("body") {
        rule.body = Some(body_match(r, n, &join(path, "body"))?);
    }
    Ok(rule)
}

const GRAPHQL_OPERATIONS: &[(&str, GraphqlOperation)] = &[
    ("query", GraphqlOperation::Query),
    ("mutation", GraphqlOperation::Mutation),
    ("subscription", GraphqlOperation::Subscription),
];

const BODY_KEYS: &[&str] = &[
    "graphql_operation",
    "json_field",
    "form_field",
    "pktline_commands",
    "body_exact",
];

/// `body: { graphql_operation | json_field | form_field | pktline_commands | body_exact }`;
/// every matcher given must hold.
fn body_match(r: &Reader<'_>, node: &Node, path: &str) -> Result<BodyMatch, PolicyError> {
    let f = r.fields(node, path, BODY_KEYS)?;
    let mut out = BodyMatch::default();
    if let Some(n) = f.get("graphql_operation") {
        let p = join(path, "graphql_operation");
        out.graphql_operation = Some(r.choice(n, &p, "GraphQL operation", GRAPHQL_OPERATIONS)?);
    }
    if let Some(n) = f.get("json_field") {
        out.json_field = text_map(r, n, &join(path, "json_field"))?;
    }
    if let Some(n) = f.get("form_field") {
        out.form_field = text_map(r, n, &join(path, "form_field"))?;
    }
    if let Some(n) = f.get("pktline_commands") {
        out.pktline_commands = Some(r.bool(n, &join(path, "pktline_commands"))?);
    }
    if let Some(n) = f.get("body_exact") {
        let p = join(path, "body_exact");
        out.body_exact = Some(match &n.kind {
            Kind::Str(s) => s.clone(),
            _ => r.string(n, &p)?,
        });
    }
    if out == BodyMatch::default() {
        return Err(r.err(
            node,
            format!(
                "{} needs at least one matcher: {}",
                describe_path(path),
                BODY_KEYS.join(", ")
            ),
        ));
    }
    Ok(out)
}

/// A non-empty mapping from name to a scalar written as text.
fn text_map(
    r: &Reader<'_>,
    node: &Node,
    path: &str,
) -> Result<BTreeMap<String, String>, PolicyError> {
    let mut out = BTreeMap::new();
    for (name, _, value) in r.entries(node, path, "a mapping from name to value")? {
        let text = scalar_text(value).ok_or_else(|| {
            r.err(
                value,
                format!(
                    "{} must be a string, found {}",
                    describe_path(&join(path, &name)),
                    value.kind.describe()
                ),
            )
        })?;
        out.insert(name, text);
    }
    if out.is_empty() {
        return Err(r.err(
            node,
            format!("{} must name at least one field", describe_path(path)),
        ));
    }
    Ok(out)
}
