//! TypeScript declarations for downstream tools, rendered from their JSON Schemas: local
//! structure only (a `$ref` is `unknown`, never fetched), depth- and size-capped.

use serde_json::{Map, Value};

const MAX_DEPTH: usize = 6;
const MAX_FIELDS: usize = 60;

/// `/** description */ function name(args: {...}): Promise<...>;`
pub fn declaration(
    name: &str,
    description: Option<&str>,
    input: &Map<String, Value>,
    output: Option<&Map<String, Value>>,
) -> String {
    let mut out = String::new();
    if let Some(d) = description.filter(|d| !d.trim().is_empty()) {
        out.push_str("/**\n");
        for line in d.trim().lines() {
            out.push_str(" * ");
            out.push_str(&line.replace("*/", "*\\/"));
            out.push('\n');
        }
        if let Some(props) = input.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                if let Some(pd) = v.get("description").and_then(Value::as_str) {
                    out.push_str(&format!(" * @param args.{k} {}\n", one_line(pd)));
                }
            }
        }
        out.push_str(" */\n");
    }
    let args = ts_type(&Value::Object(input.clone()), 0);
    let optional = input
        .get("required")
        .and_then(Value::as_array)
        .is_none_or(|r| r.is_empty());
    let ret = match output {
        Some(o) => ts_type(&Value::Object(o.clone()), 0),
        None => "unknown".into(),
    };
    out.push_str(&format!(
        "function {name}(args{}: {args}): Promise<{ret}>;",
        if optional { "?" } else { "" }
    ));
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn key(k: &str) -> String {
    if envgit_repl::is_identifier(k) {
        k.to_string()
    } else {
        serde_json::to_string(k).unwrap_or_else(|_| "\"?\"".into())
    }
}

pub fn ts_type(schema: &Value, depth: usize) -> String {
    let Some(obj) = schema.as_object() else {
        return if schema.as_bool() == Some(false) {
            "never".into()
        } else {
            "unknown".into()
        };
    };
    if depth > MAX_DEPTH || obj.contains_key("$ref") {
        return "unknown".into();
    }
    if let Some(c) = obj.get("const") {
        return serde_json::to_string(c).unwrap_or_else(|_| "unknown".into());
    }
    if let Some(e) = obj.get("enum").and_then(Value::as_array) {
        let parts: Vec<String> = e
            .iter()
            .take(MAX_FIELDS)
            .filter_map(|v| serde_json::to_string(v).ok())
            .collect();
        if !parts.is_empty() {
            return parts.join(" | ");
        }
    }
    for k in ["anyOf", "oneOf"] {
        if let Some(alts) = obj.get(k).and_then(Value::as_array) {
            let mut parts: Vec<String> = Vec::new();
            for a in alts.iter().take(10) {
                let t = ts_type(a, depth + 1);
                if !parts.contains(&t) {
                    parts.push(t);
                }
            }
            if !parts.is_empty() {
                return parts.join(" | ");
            }
        }
    }
    let ty = match obj.get("type") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ if obj.contains_key("properties") => vec!["object"],
        _ => Vec::new(),
    };
    if ty.is_empty() {
        return "unknown".into();
    }
    let parts: Vec<String> = ty
        .iter()
        .map(|t| match *t {
            "string" => "string".to_string(),
            "number" | "integer" => "number".to_string(),
            "boolean" => "boolean".to_string(),
            "null" => "null".to_string(),
            "array" => {
                let item = obj
                    .get("items")
                    .map(|i| ts_type(i, depth + 1))
                    .unwrap_or_else(|| "unknown".into());
                if item.contains(' ') {
                    format!("({item})[]")
                } else {
                    format!("{item}[]")
                }
            }
            "object" => object_type(obj, depth),
            _ => "unknown".to_string(),
        })
        .collect();
    parts.join(" | ")
}

fn object_type(obj: &Map<String, Value>, depth: usize) -> String {
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = obj.get("properties").and_then(Value::as_object) else {
        return "Record<string, unknown>".into();
    };
    if props.is_empty() {
        return "{}".into();
    }
    let mut fields: Vec<String> = props
        .iter()
        .take(MAX_FIELDS)
        .map(|(k, v)| {
            format!(
                "{}{}: {}",
                key(k),
                if required.contains(&k.as_str()) {
                    ""
                } else {
                    "?"
                },
                ts_type(v, depth + 1)
            )
        })
        .collect();
    if props.len() > MAX_FIELDS {
        fields.push(format!("/* {} more */", props.len() - MAX_FIELDS));
    }
    format!("{{ {} }}", fields.join("; "))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn renders_common_schemas() {
        let input = serde_json::json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "where"},
                "limit": {"type": "integer"},
                "mode": {"enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "x-y": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "node": {"$ref": "#/$defs/Node"}
            },
            "required": ["path"]
        });
        let d = declaration(
            "read",
            Some("Read a file."),
            input.as_object().unwrap(),
            None,
        );
        assert!(d.contains("@param args.path where"), "{d}");
        assert!(
            d.ends_with(
                "function read(args: { limit?: number; mode?: \"a\" | \"b\"; node?: unknown; path: string; tags?: string[]; \"x-y\"?: string | null }): Promise<unknown>;"
            ),
            "{d}"
        );
    }
}
