//! The request as rules and matchers see it, prepared once per decision.

use super::form_error::FormError;
use super::method::MethodSet;
use super::normalize::PathError;
use super::payload::Body;

/// The request as matchers see it, prepared once.
pub(crate) struct Prepared<'a> {
    pub methods: MethodSet,
    pub host: &'a str,
    pub port: u16,
    pub views: Result<Vec<Vec<String>>, PathError>,
    pub query: Result<Vec<(String, String)>, FormError>,
    pub body: Body<'a>,
    /// The `Content-Type` header, as sent.
    pub content_type: Option<&'a str>,
    /// The request's header names, lowercase.
    pub header_names: &'a [&'a str],
}
