//! Text an agent chose (a file name, a command line, a request's summary) as a person's terminal
//! may be given it. A terminal acts on control characters (`ESC]52;…` writes the clipboard,
//! `ESC[2K` erases a line, a newline forges one), so each is shown escaped, as git quotes such
//! paths: `\x1b`, `\n`, `\u{9b}` for C1. So are the characters that reorder or hide the
//! text around them without showing themselves (bidirectional overrides and isolates, zero-width
//! spaces and joiners, the byte-order mark): with U+202E a ref name or a path in a question
//! reads backwards, and the person approves what they did not read. Everything else is kept.

use std::borrow::Cow;

/// Whether `c` changes how the text around it is shown without being seen itself: the
/// bidirectional controls (U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069) and the
/// invisible ones (U+200B, U+2060–U+2065, U+FEFF). The zero-width joiner and non-joiner are
/// kept: emoji sequences and Persian or Indic words need them, and they move nothing.
pub fn is_hiding(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200b}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// `text` with every control character escaped but those in `keep` (the newlines of a
/// message's own lines, the tabs of a file's), and every character [`is_hiding`] names.
pub fn escape_controls<'t>(text: &'t str, keep: &[char]) -> Cow<'t, str> {
    let kept = |c: char| (!c.is_control() && !is_hiding(c)) || keep.contains(&c);
    if text.chars().all(kept) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if kept(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::escape_controls;

    #[test]
    fn controls_are_escaped_and_the_rest_kept() {
        assert_eq!(escape_controls("plain ünï 🦀", &[]), "plain ünï 🦀");
        assert_eq!(
            escape_controls("a\x1b]52;c;x\x07\r\n\tb\u{9b}c\u{7f}", &[]),
            "a\\x1b]52;c;x\\x07\\r\\n\\tb\\u{9b}c\\x7f"
        );
        assert_eq!(
            escape_controls("a\nb\tc\x1b", &['\n', '\t']),
            "a\nb\tc\\x1b"
        );
    }

    #[test]
    fn what_reorders_or_hides_text_is_escaped() {
        assert_eq!(
            escape_controls("refs/heads/\u{202e}niam\u{200b}x\u{2066}y\u{feff}", &[]),
            "refs/heads/\\u{202e}niam\\u{200b}x\\u{2066}y\\u{feff}"
        );
        // Joiners inside an emoji sequence or a word are not among them, nor right-to-left
        // letters themselves.
        assert_eq!(escape_controls("👩\u{200d}💻 אב", &[]), "👩\u{200d}💻 אב");
    }
}
