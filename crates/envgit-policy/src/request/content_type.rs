//! The request's media type, as servers dispatch on it: `Multipart/Form-Data; boundary=x` is
//! `multipart/form-data`.

/// The media type, lower-cased, without parameters; `None` when the header is absent or blank.
/// It ends where any server ends it: Rack at a `;` or `,`, PHP at either or a space (so
/// `application/x-www-form-urlencoded, text/plain` is a form to both).
pub(crate) fn media_type(content_type: Option<&str>) -> Option<String> {
    let value = content_type?.trim_start();
    let end = value
        .find(|c: char| c == ';' || c == ',' || c.is_ascii_whitespace())
        .unwrap_or(value.len());
    (end > 0).then(|| value[..end].to_ascii_lowercase())
}

pub(crate) const FORM: &str = "application/x-www-form-urlencoded";
pub(crate) const MULTIPART: &str = "multipart/form-data";
/// Multipart types Rack parses as a form too (`PARSEABLE_DATA_MEDIA_TYPES`), so Rails'
/// `Rack::MethodOverride` reads `_method` from them.
const RACK_MULTIPART: &[&str] = &["multipart/mixed", "multipart/related"];

/// Read as a multipart form by some server: `multipart/form-data`, or one Rack reads as one.
pub(crate) fn is_multipart_form(media_type: &str) -> bool {
    media_type == MULTIPART || RACK_MULTIPART.contains(&media_type)
}
