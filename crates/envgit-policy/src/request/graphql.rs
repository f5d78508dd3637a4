//! Which GraphQL operation a request would run: the JSON body's `query` document is tokenized
//! (comments, strings and block strings skipped), its operations and fragments are found, and
//! `operationName` picks one. Anything the reader does not understand is an error, which the
//! caller turns into "cannot evaluate" (fail closed).

use crate::GraphqlOperation;

use super::json::{Doc, entries, parse_doc};

/// One operation of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Operation {
    pub kind: GraphqlOperation,
    pub name: Option<String>,
    /// The top-level fields of its selection set (aliases resolved), for summaries.
    pub root_fields: Vec<String>,
}

/// The operations that may run for this request body: the one `operationName` selects, or
/// every operation when the document has several and no name is given; for a batch (a JSON
/// array), those of every element. `Err` when it cannot tell (not JSON, no `query` string — a
/// persisted query —, a document it cannot read, an `operationName` the document lacks).
pub(crate) fn operations(body: &[u8]) -> Result<Vec<Operation>, String> {
    match parse_doc(body)? {
        Doc::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                out.extend(request_operations(&item)?);
            }
            Ok(out)
        }
        doc => request_operations(&doc),
    }
}

fn request_operations(doc: &Doc) -> Result<Vec<Operation>, String> {
    let Doc::Object(fields) = doc else {
        return Err("a GraphQL request is a JSON object".to_owned());
    };
    let queries: Vec<&serde_json::Value> = entries(fields, "query").collect();
    if queries.is_empty() {
        return Err("no `query` (a persisted query cannot be classified)".to_owned());
    }
    // Duplicate keys: every value counts (servers differ on which one wins).
    let mut names: Vec<Option<&str>> = Vec::new();
    for v in entries(fields, "operationName") {
        match v {
            serde_json::Value::Null => names.push(None),
            serde_json::Value::String(s) => names.push(Some(s)),
            _ => return Err("`operationName` is not a string".to_owned()),
        }
    }
    if names.is_empty() {
        names.push(None);
    }
    let mut out = Vec::new();
    for query in queries {
        let serde_json::Value::String(text) = query else {
            return Err("`query` is not a string".to_owned());
        };
        let ops = document(text)?;
        for name in &names {
            out.extend(select(&ops, *name)?);
        }
    }
    Ok(out)
}

fn select(ops: &[Operation], name: Option<&str>) -> Result<Vec<Operation>, String> {
    if ops.is_empty() {
        return Err("the document has no operation".to_owned());
    }
    match name {
        Some(name) => {
            let picked: Vec<Operation> = ops
                .iter()
                .filter(|op| op.name.as_deref() == Some(name))
                .cloned()
                .collect();
            if picked.is_empty() {
                Err(format!("no operation named `{name}` in the document"))
            } else {
                Ok(picked)
            }
        }
        None => Ok(ops.to_vec()),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    Name(&'a str),
    Punct(u8),
    Spread,
    /// A string, number or block string: a value, never a name.
    Value,
}

/// The operations of a GraphQL document, in order.
pub(crate) fn document(text: &str) -> Result<Vec<Operation>, String> {
    let tokens = tokenize(text)?;
    let mut ops = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match tokens[i] {
            Token::Punct(b'{') => {
                let (fields, next) = selection_set(&tokens, i)?;
                ops.push(Operation {
                    kind: GraphqlOperation::Query,
                    name: None,
                    root_fields: fields,
                });
                i = next;
            }
            Token::Name(word @ ("query" | "mutation" | "subscription")) => {
                let kind = match word {
                    "query" => GraphqlOperation::Query,
                    "mutation" => GraphqlOperation::Mutation,
                    _ => GraphqlOperation::Subscription,
                };
                i += 1;
                let mut name = None;
                if let Some(Token::Name(n)) = tokens.get(i) {
                    name = Some((*n).to_owned());
                    i += 1;
                }
                if tokens.get(i) == Some(&Token::Punct(b'(')) {
                    i = skip_group(&tokens, i)?;
                }
                i = skip_directives(&tokens, i)?;
                let (fields, next) = selection_set(&tokens, i)?;
                ops.push(Operation {
                    kind,
                    name,
                    root_fields: fields,
                });
                i = next;
            }
            Token::Name("fragment") => {
                // fragment Name on Type @directives { ... }
                match (tokens.get(i + 1), tokens.get(i + 2), tokens.get(i + 3)) {
                    (Some(Token::Name(n)), Some(Token::Name("on")), Some(Token::Name(_)))
                        if *n != "on" => {}
                    _ => return Err("malformed fragment definition".to_owned()),
                }
                i = skip_directives(&tokens, i + 4)?;
                i = selection_set(&tokens, i)?.1;
            }
            _ => return Err("not an executable GraphQL definition".to_owned()),
        }
    }
    Ok(ops)
}

/// `@name(args)` repeated.
fn skip_directives(tokens: &[Token<'_>], mut i: usize) -> Result<usize, String> {
    while tokens.get(i) == Some(&Token::Punct(b'@')) {
        if !matches!(tokens.get(i + 1), Some(Token::Name(_))) {
            return Err("malformed directive".to_owned());
        }
        i += 2;
        if tokens.get(i) == Some(&Token::Punct(b'(')) {
            i = skip_group(tokens, i)?;
        }
    }
    Ok(i)
}

/// Skips a balanced `(…)`, `[…]` or `{…}` starting at `i`; returns the index after it.
fn skip_group(tokens: &[Token<'_>], i: usize) -> Result<usize, String> {
    let mut stack: Vec<u8> = Vec::new();
    let mut j = i;
    while let Some(token) = tokens.get(j) {
        match token {
            Token::Punct(b'(') => stack.push(b')'),
            Token::Punct(b'[') => stack.push(b']'),
            Token::Punct(b'{') => stack.push(b'}'),
            Token::Punct(c @ (b')' | b']' | b'}')) if stack.pop() != Some(*c) => {
                return Err("unbalanced brackets".to_owned());
            }
            _ => {}
        }
        j += 1;
        if stack.is_empty() {
            return Ok(j);
        }
    }
    Err("unbalanced brackets".to_owned())
}

/// A selection set starting at `i` (which must be `{`): its top-level field names and the
/// index after its closing `}`.
fn selection_set(tokens: &[Token<'_>], i: usize) -> Result<(Vec<String>, usize), String> {
    if tokens.get(i) != Some(&Token::Punct(b'{')) {
        return Err("expected a selection set `{`".to_owned());
    }
    let end = skip_group(tokens, i)?;
    let mut fields = Vec::new();
    let mut j = i + 1;
    while j + 1 < end {
        match &tokens[j] {
            Token::Spread => {
                // `...Fragment` or `... on Type @dir { … }`: record it, skip to the next field.
                j += 1;
                match tokens.get(j) {
                    Some(Token::Name("on")) => {
                        fields.push("...".to_owned());
                        j += 2;
                    }
                    Some(Token::Name(n)) => {
                        fields.push(format!("...{n}"));
                        j += 1;
                    }
                    _ => fields.push("...".to_owned()),
                }
            }
            Token::Name(n) => {
                let mut field = *n;
                j += 1;
                if tokens.get(j) == Some(&Token::Punct(b':')) {
                    match tokens.get(j + 1) {
                        Some(Token::Name(real)) => field = real,
                        _ => return Err("malformed alias".to_owned()),
                    }
                    j += 2;
                }
                fields.push(field.to_owned());
            }
            Token::Punct(b'(' | b'{') => j = skip_group(tokens, j)?,
            Token::Punct(b'@') => j = skip_directives(tokens, j)?,
            _ => return Err("unexpected token in a selection set".to_owned()),
        }
    }
    Ok((fields, end))
}

fn tokenize(text: &str) -> Result<Vec<Token<'_>>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                    i += 1;
                }
            }
            b'"' if b[i..].starts_with(b"\"\"\"") => {
                i += 3;
                loop {
                    if i >= b.len() {
                        return Err("unterminated block string".to_owned());
                    }
                    if b[i..].starts_with(b"\\\"\"\"") {
                        i += 4;
                    } else if b[i..].starts_with(b"\"\"\"") {
                        i += 3;
                        break;
                    } else {
                        i += 1;
                    }
                }
                out.push(Token::Value);
            }
            b'"' => {
                i += 1;
                loop {
                    match b.get(i) {
                        None | Some(b'\n' | b'\r') => {
                            return Err("unterminated string".to_owned());
                        }
                        Some(b'\\') => i += 2,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                out.push(Token::Value);
            }
            b'.' => {
                if !b[i..].starts_with(b"...") {
                    return Err("a lone `.`".to_owned());
                }
                out.push(Token::Spread);
                i += 3;
            }
            c @ (b'!' | b'$' | b'&' | b'(' | b')' | b':' | b'=' | b'@' | b'[' | b']' | b'{'
            | b'}' | b'|') => {
                out.push(Token::Punct(c));
                i += 1;
            }
            c if c == b'-' || c.is_ascii_digit() => {
                i += 1;
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'.' | b'+' | b'-'))
                {
                    i += 1;
                }
                out.push(Token::Value);
            }
            c if c == b'_' || c.is_ascii_alphabetic() => {
                let start = i;
                while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                    i += 1;
                }
                out.push(Token::Name(&text[start..i]));
            }
            _ if b[i..].starts_with("\u{feff}".as_bytes()) => i += 3,
            _ => return Err("a character GraphQL does not allow".to_owned()),
        }
    }
    Ok(out)
}
