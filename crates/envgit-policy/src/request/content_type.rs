//! The request's media type, as servers dispatch on it: `Multipart/Form-Data; boundary=x` is
//! `multipart/form-data`.

/// The media type, lower-cased, without parameters; `None` when the header is absent or blank.
pub(crate) fn media_type(content_type: Option<&str>) -> Option<String> {
    let value = content_type?.split(';').next()?.trim();
    (!value.is_empty()).then(|| value.to_ascii_lowercase())
}

pub(crate) const FORM: &str = "application/x-www-form-urlencoded";
pub(crate) const MULTIPART: &str = "multipart/form-data";
