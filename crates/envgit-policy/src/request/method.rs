//! The methods a request may be served as. Frameworks let a request name another method
//! (`X-HTTP-Method-Override` and friends, which the gate hands over as
//! [`RequestInfo::method_overrides`]; Rails/Laravel/Symfony's `_method` and Slim's `_METHOD`
//! in the query or a form body, and Laravel's and Slim's in a JSON `POST`'s top-level keys,
//! read in any case), so a rule judges every method named. A `_method` the gate cannot read
//! (body not read or cut short, an undecodable query) may name any method.

use super::RequestInfo;
use super::content_type::{FORM, is_multipart_form, media_type};
use super::form_error::FormError;
use super::json::top_level_strings;
use super::matchers::{Methods, Tri, form_decode};
use super::payload::form_fields_as;

/// A field naming the method: `_method` (Rails, Laravel, Symfony), `_METHOD` (Slim), in any
/// case.
fn is_method_field(name: &str) -> bool {
    name.eq_ignore_ascii_case("_method")
}

/// Every method the request names.
#[derive(Debug, Clone)]
pub(crate) struct MethodSet {
    /// Upper-cased, deduplicated; the request's own method first.
    pub known: Vec<String>,
    /// Why any method at all is possible, when one is.
    pub any: Option<String>,
}

/// How a server would read `_method` from the body, if it would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyForm {
    None,
    /// A form `Content-Type` (or a multipart one Rack reads as a form): read as the form it
    /// says it is.
    Declared,
    /// A POST without `Content-Type`, which Rack reads as a form too, whatever it holds.
    Sniffed,
    /// A JSON POST: Laravel (whose input is the JSON body of a request whose `Content-Type`
    /// holds `/json` or `+json` anywhere) and Slim (`application/json`, `…+json`) read
    /// `_method` from its top-level object, for a POST only.
    Json,
}

fn body_form(req: &RequestInfo<'_>) -> BodyForm {
    let post = req.method.eq_ignore_ascii_case("POST");
    match media_type(req.content_type).as_deref() {
        Some(t) if t == FORM || is_multipart_form(t) => BodyForm::Declared,
        None if post => BodyForm::Sniffed,
        Some(_) if post && declares_json(req.content_type) => BodyForm::Json,
        _ => BodyForm::None,
    }
}

/// Laravel's `isJson`: the header holds `/json` or `+json` anywhere (read in any case here).
/// Not the streaming RPCs (`application/grpc+json`, `application/connect+json`), whose
/// servers are no such framework: their bodies are message streams, and waiting for a prefix
/// of one would stall a call whose client waits for an answer before it sends more.
fn declares_json(content_type: Option<&str>) -> bool {
    let streams = media_type(content_type).is_some_and(|m| {
        m.starts_with("application/grpc") || m.starts_with("application/connect+")
    });
    !streams
        && content_type.is_some_and(|t| {
            let t = t.to_ascii_lowercase();
            t.contains("/json") || t.contains("+json")
        })
}

/// Can the body name a method (a `_method` form field, or a JSON POST's top-level key)?
pub(crate) fn body_may_name_method(req: &RequestInfo<'_>) -> bool {
    body_form(req) != BodyForm::None
}

impl MethodSet {
    /// `from_body`: whether a body that may name a method is read for it (`false` judges the
    /// request as though it named none, to tell whether reading it matters).
    pub fn of(
        req: &RequestInfo<'_>,
        query: &Result<Vec<(String, String)>, FormError>,
        from_body: bool,
    ) -> MethodSet {
        let mut set = MethodSet {
            known: Vec::new(),
            any: None,
        };
        set.add(req.method);
        for value in req.method_overrides {
            // A header may be repeated or hold a list.
            value.split(',').for_each(|m| set.add(m));
        }
        match query {
            Ok(pairs) => pairs
                .iter()
                .filter(|(k, _)| is_method_field(k))
                .for_each(|(_, v)| set.add(v)),
            Err(why) => set.any = Some(format!("query may name a method ({why})")),
        }
        if set.any.is_none() && from_body {
            set.any = match body_form(req) {
                BodyForm::None => None,
                BodyForm::Declared => set.add_from_form(req).err(),
                BodyForm::Sniffed => set.add_from_any_body(req).err(),
                BodyForm::Json => set.add_from_json(req).err(),
            };
        }
        set
    }

    fn add(&mut self, method: &str) {
        let method = method.trim().to_ascii_uppercase();
        if !method.is_empty() && !self.known.contains(&method) {
            self.known.push(method);
        }
    }

    /// The form body's `_method` values; `Err` when the body could hold one not seen.
    fn add_from_form(&mut self, req: &RequestInfo<'_>) -> Result<(), String> {
        let Some(bytes) = req.body else {
            return Err("body not read (a form may name a method)".to_owned());
        };
        let (fields, all) = form_fields_as(bytes, req.body_complete, req.content_type)
            .map_err(|why| format!("form body may name a method ({why})"))?;
        fields
            .iter()
            .filter(|(k, _)| is_method_field(k))
            .for_each(|(_, v)| self.add(v));
        if all {
            Ok(())
        } else {
            Err("form body larger than the inspected prefix (it may name a method)".to_owned())
        }
    }

    /// A body of unknown type read as a lenient urlencoded form: `&`-separated pairs,
    /// undecodable ones skipped (they cannot spell `_method` to a strict parser either).
    fn add_from_any_body(&mut self, req: &RequestInfo<'_>) -> Result<(), String> {
        let Some(bytes) = req.body else {
            return Err("body not read (a form may name a method)".to_owned());
        };
        let text = String::from_utf8_lossy(bytes);
        for pair in text.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if form_decode(k).is_ok_and(|k| is_method_field(&k)) {
                self.add(&form_decode(v).unwrap_or_else(|_| v.to_owned()));
            }
        }
        if req.body_complete {
            Ok(())
        } else {
            Err("body larger than the inspected prefix (it may name a method)".to_owned())
        }
    }

    /// The JSON body's top-level `_method` strings; `Err` when the body could hold one not
    /// seen: cut short, or not read as JSON (fail closed: a server's parser may differ).
    fn add_from_json(&mut self, req: &RequestInfo<'_>) -> Result<(), String> {
        let Some(bytes) = req.body else {
            return Err("body not read (a JSON body may name a method)".to_owned());
        };
        if !req.body_complete {
            return Err(
                "JSON body larger than the inspected prefix (it may name a method)".to_owned(),
            );
        }
        // No body at all is no JSON (PHP reads it as nothing), and a common POST.
        if bytes.trim_ascii().is_empty() {
            return Ok(());
        }
        let named = top_level_strings(bytes, is_method_field)
            .map_err(|why| format!("JSON body may name a method ({why})"))?;
        named.iter().for_each(|m| self.add(m));
        Ok(())
    }

    /// `Match` when every method named matches, `NoMatch` when none does, `Unknown` when
    /// they disagree or any method is possible.
    pub fn tri(&self, methods: &Methods) -> Tri {
        if let Methods::Any = methods {
            return Tri::Match;
        }
        if let Some(why) = &self.any {
            return Tri::Unknown(why.clone());
        }
        let hits = self.known.iter().filter(|m| methods.matches(m)).count();
        if hits == self.known.len() {
            Tri::Match
        } else if hits == 0 {
            Tri::NoMatch
        } else {
            Tri::Unknown(format!(
                "the request names several methods ({})",
                self.known.join(", ")
            ))
        }
    }

    /// `POST`, or `POST (as DELETE)` when the request names others, for summaries.
    pub fn label(&self) -> String {
        let mut out = self.known.first().cloned().unwrap_or_default();
        let others = &self.known[1.min(self.known.len())..];
        if !others.is_empty() {
            out.push_str(&format!(" (as {})", others.join(", ")));
        } else if self.any.is_some() {
            out.push_str(" (as any method)");
        }
        out
    }
}
