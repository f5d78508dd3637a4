//! A YAML tree in which every node knows its line and column.
//!
//! serde-saphyr only attaches positions to values wrapped in `Spanned`, and derived structs
//! report unknown keys without saying which section they are in. So the file is read into this
//! tree first and checked by hand (`parse.rs`), which gives every error a precise position and
//! a message in our own words.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{Location, MessageFormatter, Spanned, UserMessageFormatter};

use crate::PolicyError;

/// Deepest nesting accepted: top level → irreversible → rule → net → body leaves 11 levels
/// for body matchers.
const MAX_DEPTH: usize = 16;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub kind: Kind,
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in file order; duplicate keys are already refused by the parser.
    Map(Vec<(Node, Node)>),
}

impl Kind {
    /// How the value is named in "expected X, found Y" messages.
    pub fn describe(&self) -> &'static str {
        match self {
            Kind::Null => "nothing",
            Kind::Bool(_) => "a boolean",
            Kind::Int(_) => "a number",
            Kind::Float(_) => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }
}

/// Parses `text` as one YAML document. Syntax errors, duplicate keys and budget breaches
/// (nesting depth, node count) come back as `PolicyError`s with the parser's position.
pub(crate) fn parse_yaml(file: &str, text: &str) -> Result<Node, PolicyError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    // YAML 1.1 booleans (`y`, `no`, `on`) would turn a key `y` or a value `no` into a bool.
    options.strict_booleans = true;
    // Reading the tree recurses once per level, with large frames in debug builds (about
    // 45 KiB each); a policy is a handful of levels deep, so a low limit keeps any input
    // well inside a 2 MiB thread stack. Aliases count towards it too.
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    options.budget = Some(budget);
    match serde_saphyr::from_str_with_options::<Spanned<Kind>>(text, options) {
        Ok(spanned) => Ok(to_node(spanned)),
        Err(e) => {
            let (line, column) = e.location().map(position).unwrap_or((1, 1));
            let e = e.without_snippet();
            if let serde_saphyr::Error::Budget {
                breach: BudgetBreach::Depth { .. },
                ..
            } = e
            {
                return Err(PolicyError::new(
                    file,
                    line,
                    column,
                    format!("nested too deeply: a policy allows at most {MAX_DEPTH} levels"),
                ));
            }
            let message = UserMessageFormatter.format_message(e);
            // The formatter's text is not sanitized; keep the error on one printable line.
            let message: String = message
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            Err(PolicyError::new(
                file,
                line,
                column,
                format!("invalid YAML: {message}"),
            ))
        }
    }
}

fn position(loc: Location) -> (usize, usize) {
    let conv = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    (conv(loc.line()), conv(loc.column()))
}

fn to_node(spanned: Spanned<Kind>) -> Node {
    let (line, column) = position(spanned.referenced);
    Node {
        kind: spanned.value,
        line,
        column,
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Kind, D::Error> {
        Kind::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Kind, E> {
        Ok(Kind::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Kind, E> {
        Ok(Kind::Int(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Kind, E> {
        Ok(Kind::Int(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Kind, E> {
        Ok(Kind::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Kind, E> {
        i128::try_from(v)
            .map(Kind::Int)
            .map_err(|_| E::custom("number too large"))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Kind, E> {
        Ok(Kind::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Kind, E> {
        Ok(Kind::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Kind, E> {
        Ok(Kind::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Kind>>()? {
            items.push(to_node(item));
        }
        Ok(Kind::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Kind>>()? {
            let value = map.next_value::<Spanned<Kind>>()?;
            entries.push((to_node(key), to_node(value)));
        }
        Ok(Kind::Map(entries))
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        d.deserialize_any(KindVisitor)
    }
}
