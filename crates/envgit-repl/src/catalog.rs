//! What a session's tools are: namespaces (one per downstream server) of functions, each with
//! the wire names it calls and the TypeScript declaration `tools.describe()` shows.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    pub namespaces: Vec<Namespace>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Namespace {
    /// The JavaScript global the tools hang on (an identifier).
    pub name: String,
    /// The server name passed back to the host.
    pub server: String,
    pub tools: Vec<ToolEntry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolEntry {
    /// The property name in JavaScript (an identifier).
    pub name: String,
    /// The tool name on the wire.
    pub wire: String,
    /// One line for `tools.search()`.
    pub description: String,
    /// The TypeScript declaration for `tools.describe()`.
    pub ts: String,
}

impl Catalog {
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{\"namespaces\":[]}".to_string())
    }
}

const RESERVED: &[&str] = &[
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "new",
    "null",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "let",
    "static",
    "implements",
    "interface",
    "package",
    "private",
    "protected",
    "public",
    "await",
    "async",
    "arguments",
    "eval",
    "undefined",
    "NaN",
    "Infinity",
];

/// Globals a namespace may not take: the language's and the session's own.
pub const TAKEN_GLOBALS: &[&str] = &[
    "console",
    "print",
    "tools",
    "sample",
    "schema",
    "assert",
    "AssertionError",
    "ToolError",
    "Math",
    "Date",
    "JSON",
    "Object",
    "Array",
    "String",
    "Number",
    "Boolean",
    "Promise",
    "Error",
    "globalThis",
    "Symbol",
    "Map",
    "Set",
    "RegExp",
    "Reflect",
    "Proxy",
    "BigInt",
];

/// Whether `s` can be used as `a.s` and `s` in JavaScript.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') && !RESERVED.contains(&s)
}

/// A wire name made an identifier: invalid characters become `_`, a leading digit gets a `_`
/// in front, a reserved word gets a `_` behind.
pub fn sanitize_identifier(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '$' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if RESERVED.contains(&out.as_str()) {
        out.push('_');
    }
    out
}
