//! Which GraphQL operations a request could run, read where servers read them: `query` and
//! `operationName` in the query string (GET, and servers such as Rails that merge it with the
//! body) and in the body (JSON object, JSON batch array, `application/graphql`, a form, or
//! the multipart `operations` field). Documents are parsed with `apollo-parser`, with
//! recursion and token limits. Anything that cannot be classified (no query text, a
//! persisted query, a document with errors) is an error, which the caller turns into "cannot
//! evaluate" (fail closed).

use apollo_parser::Parser;
use apollo_parser::cst;

use crate::GraphqlOperation;

use super::content_type::{FORM, MULTIPART, media_type};
use super::form_error::FormError;
use super::json::{Doc, NotJson, entries, parse_doc};
use super::payload::{Body, Unavailable, form_fields_as};

/// Nesting deeper than this (selection sets, values, types) is refused, not parsed.
const RECURSION_LIMIT: usize = 128;
/// More tokens than this (a 1 MiB body holds at most about this many) are refused.
const TOKEN_LIMIT: usize = 256 * 1024;

/// One operation of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Operation {
    pub kind: GraphqlOperation,
    pub name: Option<String>,
    /// The top-level fields of its selection set (aliases resolved; `...F` for a spread),
    /// for summaries.
    pub root_fields: Vec<String>,
}

/// Why a request's GraphQL operations cannot be told. The caller turns any of these into
/// "cannot evaluate" (fail closed) with this text as the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GraphqlError {
    #[error("query string: {0}")]
    QueryString(FormError),
    /// The body is missing or cut short.
    #[error("{0}")]
    Body(Unavailable),
    #[error("{0}")]
    Json(NotJson),
    #[error("body is not UTF-8")]
    NotUtf8,
    #[error("form: {0}")]
    Form(FormError),
    #[error("a GraphQL request is a JSON object")]
    NotAnObject,
    #[error("`query` is not a string")]
    QueryNotAString,
    #[error("`operationName` is not a string")]
    NameNotAString,
    #[error("a persisted query (a hash or id instead of the text) cannot be classified")]
    Persisted,
    #[error("no `query` in the query string or the body")]
    NoQuery,
    #[error("the document has no operation")]
    NoOperation,
    #[error("not a GraphQL document ({message} at byte {at})")]
    Syntax { message: String, at: usize },
    #[error("not an executable GraphQL definition")]
    NotExecutable,
}

/// What one source (the query string, or one body request) carries.
#[derive(Debug, Default)]
struct Params {
    queries: Vec<String>,
    names: Vec<String>,
    /// A hash or id stands in for the query text.
    persisted: bool,
}

/// Keys that name a stored document instead of sending it (Apollo APQ, Relay, GitHub's
/// persisted documents).
const PERSISTED_KEYS: &[&str] = &["id", "documentId", "queryId", "doc_id"];

/// Every operation the request could run on some server: each query text (query string and
/// body; every element of a batch; duplicates included) with each `operationName` any source
/// gives, or all of its operations when no name is given or the name is not in it.
pub(crate) fn operations(
    query: &Result<Vec<(String, String)>, FormError>,
    body: Body<'_>,
    content_type: Option<&str>,
) -> Result<Vec<Operation>, GraphqlError> {
    let query = match query {
        Ok(pairs) => from_pairs(pairs),
        Err(why) => return Err(GraphqlError::QueryString(*why)),
    };
    let bodies = body_requests(body, content_type)?;
    let sources: Vec<&Params> = std::iter::once(&query).chain(&bodies).collect();
    if sources.iter().any(|p| p.persisted) {
        return Err(GraphqlError::Persisted);
    }
    // A server that merges query string and body may pair any text with any name.
    let all_names: Vec<&str> = sources
        .iter()
        .flat_map(|p| p.names.iter().map(String::as_str))
        .collect();
    let mut out: Vec<Operation> = Vec::new();
    let mut texts = 0;
    for source in &sources {
        for text in &source.queries {
            texts += 1;
            let ops = document(text)?;
            if ops.is_empty() {
                return Err(GraphqlError::NoOperation);
            }
            let mut names: Vec<Option<&str>> = all_names.iter().map(|n| Some(*n)).collect();
            if source.names.is_empty() {
                names.push(None);
            }
            for name in names {
                for op in select(&ops, name) {
                    if !out.contains(op) {
                        out.push(op.clone());
                    }
                }
            }
        }
    }
    if texts == 0 {
        return Err(GraphqlError::NoQuery);
    }
    Ok(out)
}

/// The operation `name` selects; all of them for no name, or for a name the document lacks
/// (such a request fails on a strict server, but a lax one may run what is there).
fn select<'o>(ops: &'o [Operation], name: Option<&str>) -> Vec<&'o Operation> {
    let named: Vec<&Operation> = ops
        .iter()
        .filter(|op| name.is_some() && op.name.as_deref() == name)
        .collect();
    if named.is_empty() {
        ops.iter().collect()
    } else {
        named
    }
}

/// `query`, `operationName` and persisted-query markers of decoded `name=value` pairs (a
/// query string or a urlencoded form).
fn from_pairs(pairs: &[(String, String)]) -> Params {
    let mut out = Params::default();
    for (name, value) in pairs {
        match name.as_str() {
            "query" => out.queries.push(value.clone()),
            "operationName" if !value.is_empty() => out.names.push(value.clone()),
            "extensions" => out.persisted |= value.contains("persistedQuery"),
            key if PERSISTED_KEYS.contains(&key) => out.persisted = true,
            _ => {}
        }
    }
    out
}

/// A JSON request object. Duplicate keys: every value counts (servers differ on which wins).
fn from_json(fields: &[(String, serde_json::Value)]) -> Result<Params, GraphqlError> {
    let mut out = Params::default();
    for v in entries(fields, "query") {
        match v {
            serde_json::Value::String(s) => out.queries.push(s.clone()),
            _ => return Err(GraphqlError::QueryNotAString),
        }
    }
    for v in entries(fields, "operationName") {
        match v {
            serde_json::Value::Null => {}
            serde_json::Value::String(s) => out.names.push(s.clone()),
            _ => return Err(GraphqlError::NameNotAString),
        }
    }
    out.persisted = entries(fields, "extensions").any(|e| e.get("persistedQuery").is_some())
        || fields
            .iter()
            .any(|(k, v)| PERSISTED_KEYS.contains(&k.as_str()) && !v.is_null());
    Ok(out)
}

/// The requests the body carries (none for an empty body).
fn body_requests(body: Body<'_>, content_type: Option<&str>) -> Result<Vec<Params>, GraphqlError> {
    let bytes = body.whole().map_err(GraphqlError::Body)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    match media_type(content_type).as_deref() {
        Some("application/graphql") => {
            let text = std::str::from_utf8(bytes).map_err(|_| GraphqlError::NotUtf8)?;
            Ok(vec![Params {
                queries: vec![text.to_owned()],
                ..Params::default()
            }])
        }
        Some(FORM | MULTIPART) => {
            let (fields, _) =
                form_fields_as(bytes, true, content_type).map_err(GraphqlError::Form)?;
            // The GraphQL multipart request spec puts the JSON request in `operations`.
            let mut out = Vec::new();
            for (_, json) in fields.iter().filter(|(k, _)| k == "operations") {
                out.extend(json_requests(json.as_bytes())?);
            }
            out.push(from_pairs(&fields));
            Ok(out)
        }
        _ => json_requests(bytes),
    }
}

/// A JSON object, or a batch (an array of objects).
fn json_requests(bytes: &[u8]) -> Result<Vec<Params>, GraphqlError> {
    match parse_doc(bytes).map_err(GraphqlError::Json)? {
        Doc::Object(fields) => Ok(vec![from_json(&fields)?]),
        Doc::Array(items) => items
            .iter()
            .map(|item| match item {
                Doc::Object(fields) => from_json(fields),
                _ => Err(GraphqlError::NotAnObject),
            })
            .collect(),
        Doc::Other => Err(GraphqlError::NotAnObject),
    }
}

/// The operations of a GraphQL document, in order. A document with any syntax error, or one
/// holding type-system definitions, is refused (servers would not execute it either, but a
/// reader that guesses could be led to the wrong operation).
pub(crate) fn document(text: &str) -> Result<Vec<Operation>, GraphqlError> {
    let tree = Parser::new(text)
        .recursion_limit(RECURSION_LIMIT)
        .token_limit(TOKEN_LIMIT)
        .parse();
    if let Some(e) = tree.errors().next() {
        return Err(GraphqlError::Syntax {
            message: e.message().to_owned(),
            at: e.index(),
        });
    }
    let mut ops = Vec::new();
    for definition in tree.document().definitions() {
        match definition {
            cst::Definition::OperationDefinition(op) => ops.push(operation(&op)),
            cst::Definition::FragmentDefinition(_) => {}
            _ => return Err(GraphqlError::NotExecutable),
        }
    }
    Ok(ops)
}

fn operation(op: &cst::OperationDefinition) -> Operation {
    let kind = match op.operation_type() {
        Some(t) if t.mutation_token().is_some() => GraphqlOperation::Mutation,
        Some(t) if t.subscription_token().is_some() => GraphqlOperation::Subscription,
        // `{ … }` shorthand, or `query`.
        _ => GraphqlOperation::Query,
    };
    let root_fields = op
        .selection_set()
        .map(|set| set.selections().map(|s| selection_label(&s)).collect())
        .unwrap_or_default();
    Operation {
        kind,
        name: op.name().map(|n| n.text().to_string()),
        root_fields,
    }
}

fn selection_label(selection: &cst::Selection) -> String {
    match selection {
        cst::Selection::Field(field) => field
            .name()
            .map(|n| n.text().to_string())
            .unwrap_or_default(),
        cst::Selection::FragmentSpread(spread) => {
            let name = spread
                .fragment_name()
                .and_then(|f| f.name())
                .map(|n| n.text().to_string())
                .unwrap_or_default();
            format!("...{name}")
        }
        cst::Selection::InlineFragment(_) => "...".to_owned(),
    }
}
