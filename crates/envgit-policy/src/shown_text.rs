//! Text an agent chose (a file name, a command line, a request's summary) as a person's terminal
//! may be given it. A terminal acts on control characters (`ESC]52;…` writes the clipboard,
//! `ESC[2K` erases a line, a newline forges one), so each is shown escaped, as git quotes such
//! paths: `\x1b`, `\n`, `\u{9b}` for C1. Everything else is kept.

use std::borrow::Cow;

/// `text` with every control character escaped but those in `keep` (the newlines of a
/// message's own lines, the tabs of a file's).
pub fn escape_controls<'t>(text: &'t str, keep: &[char]) -> Cow<'t, str> {
    let kept = |c: char| !c.is_control() || keep.contains(&c);
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
}
