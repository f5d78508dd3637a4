//! Typed reads from the YAML tree. Each one either returns the value or a `PolicyError` at
//! the node's position that names the setting (`path`) and what would be valid.

use crate::PolicyError;
use crate::node::{Kind, Node};

pub(crate) struct Reader<'f> {
    pub file: &'f str,
}

/// The keys of one mapping, already checked against the keys valid at that level.
pub(crate) struct Fields<'n> {
    node: &'n Node,
    entries: Vec<(&'n str, &'n Node)>,
}

impl<'n> Fields<'n> {
    pub fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

/// `network.allow`, or "top level" for the root.
pub(crate) fn describe_path(path: &str) -> String {
    if path.is_empty() {
        "the top level".to_owned()
    } else {
        format!("`{path}`")
    }
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

impl Reader<'_> {
    pub fn err(&self, node: &Node, message: impl Into<String>) -> PolicyError {
        PolicyError::new(self.file, node.line, node.column, message)
    }

    fn type_err(&self, node: &Node, path: &str, expected: &str) -> PolicyError {
        self.err(
            node,
            format!(
                "{} must be {expected}, found {}",
                describe_path(path),
                node.kind.describe()
            ),
        )
    }

    /// A mapping whose keys must all be in `valid`. An empty value (`env:`) reads as `{}`.
    pub fn fields<'n>(
        &self,
        node: &'n Node,
        path: &str,
        valid: &[&str],
    ) -> Result<Fields<'n>, PolicyError> {
        let entries = match &node.kind {
            Kind::Null => Vec::new(),
            Kind::Map(entries) => entries
                .iter()
                .map(|(key, value)| {
                    let name = match &key.kind {
                        Kind::Str(s) if valid.contains(&s.as_str()) => s.as_str(),
                        _ => {
                            let shown =
                                scalar_text(key).unwrap_or_else(|| key.kind.describe().to_owned());
                            let place = if path.is_empty() {
                                "at the top level".to_owned()
                            } else {
                                format!("in `{path}`")
                            };
                            return Err(self.err(
                                key,
                                format!(
                                    "unknown key `{shown}` {place}; valid keys: {}",
                                    valid.join(", ")
                                ),
                            ));
                        }
                    };
                    Ok((name, value))
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(self.type_err(
                    node,
                    path,
                    &format!("a mapping with keys {}", valid.join(", ")),
                ));
            }
        };
        Ok(Fields { node, entries })
    }

    /// A key that must be present; the error points at the mapping that lacks it.
    pub fn require<'n>(
        &self,
        fields: &Fields<'n>,
        path: &str,
        key: &str,
        hint: &str,
    ) -> Result<&'n Node, PolicyError> {
        fields.get(key).ok_or_else(|| {
            let hint = if hint.is_empty() {
                String::new()
            } else {
                format!(" ({hint})")
            };
            self.err(
                fields.node,
                format!("{} is missing `{key}`{hint}", describe_path(path)),
            )
        })
    }

    /// A mapping with free-form keys (hosts, server names, tool globs), in file order.
    pub fn entries<'n>(
        &self,
        node: &'n Node,
        path: &str,
        expected: &str,
    ) -> Result<Vec<(String, &'n Node, &'n Node)>, PolicyError> {
        match &node.kind {
            Kind::Null => Ok(Vec::new()),
            Kind::Map(entries) => entries
                .iter()
                .map(|(key, value)| {
                    let name = scalar_text(key).ok_or_else(|| {
                        self.err(
                            key,
                            format!(
                                "keys of {} must be strings, found {}",
                                describe_path(path),
                                key.kind.describe()
                            ),
                        )
                    })?;
                    Ok((name, key, value))
                })
                .collect(),
            _ => Err(self.type_err(node, path, expected)),
        }
    }

    pub fn string(&self, node: &Node, path: &str) -> Result<String, PolicyError> {
        match &node.kind {
            Kind::Str(s) if !s.is_empty() => Ok(s.clone()),
            Kind::Str(_) => {
                Err(self.err(node, format!("{} must not be empty", describe_path(path))))
            }
            _ => Err(self.type_err(node, path, "a string")),
        }
    }

    /// A list of non-empty strings; an empty value reads as `[]`.
    pub fn strings(&self, node: &Node, path: &str) -> Result<Vec<String>, PolicyError> {
        match &node.kind {
            Kind::Null => Ok(Vec::new()),
            Kind::Seq(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| self.string(item, &format!("{path}[{i}]")))
                .collect(),
            _ => Err(self.type_err(node, path, "a list of strings")),
        }
    }

    /// A list, or a single string standing for a one-item list (`method: POST`).
    pub fn one_or_many(&self, node: &Node, path: &str) -> Result<Vec<String>, PolicyError> {
        match &node.kind {
            Kind::Str(_) => Ok(vec![self.string(node, path)?]),
            Kind::Seq(_) | Kind::Null => self.strings(node, path),
            _ => Err(self.type_err(node, path, "a string or a list of strings")),
        }
    }

    pub fn bool(&self, node: &Node, path: &str) -> Result<bool, PolicyError> {
        match node.kind {
            Kind::Bool(b) => Ok(b),
            _ => Err(self.type_err(node, path, "true or false")),
        }
    }

    pub fn u64(&self, node: &Node, path: &str) -> Result<u64, PolicyError> {
        match node.kind {
            Kind::Int(n) => u64::try_from(n).map_err(|_| {
                self.err(
                    node,
                    format!(
                        "{} must be a whole number ≥ 0, found {n}",
                        describe_path(path)
                    ),
                )
            }),
            _ => Err(self.type_err(node, path, "a whole number")),
        }
    }

    /// One of a fixed set of words, e.g. an action or a preset name.
    pub fn choice<T: Copy>(
        &self,
        node: &Node,
        path: &str,
        what: &str,
        options: &[(&str, T)],
    ) -> Result<T, PolicyError> {
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        let word = match &node.kind {
            Kind::Str(s) => s,
            _ => {
                return Err(self.type_err(node, path, &format!("one of {}", names.join(", "))));
            }
        };
        options
            .iter()
            .find(|(n, _)| n == word)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                self.err(
                    node,
                    format!(
                        "invalid {what} `{word}` in {}; valid {what}s: {}",
                        describe_path(path),
                        names.join(", ")
                    ),
                )
            })
    }
}

/// The text of a scalar used as a key or a query value: YAML may have read `8080` as a
/// number, but it was written as text.
pub(crate) fn scalar_text(node: &Node) -> Option<String> {
    match &node.kind {
        Kind::Str(s) => Some(s.clone()),
        Kind::Int(n) => Some(n.to_string()),
        Kind::Bool(b) => Some(b.to_string()),
        Kind::Float(f) => Some(f.to_string()),
        Kind::Null | Kind::Seq(_) | Kind::Map(_) => None,
    }
}
