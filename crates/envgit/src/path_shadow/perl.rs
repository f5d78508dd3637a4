//! `PERL5LIB`: its directories come before Perl's own in `@INC`, so a `strict.pm` or
//! `Carp.pm` there is loaded instead of Perl's by every Perl program the person runs (nearly
//! every one says `use strict`). Only a directory's own `.pm` files are compared: a module
//! below it (`File/Temp.pm`) is not.

use std::path::PathBuf;

/// Where Perl keeps its modules after `PERL5LIB`: Debian's `@INC`, and the Red Hat family's;
/// `*` stands for any name, `5.*` for any name starting `5.`.
const INC: &[&str] = &[
    "/etc/perl",
    "/usr/local/lib/*/perl/5.*",
    "/usr/local/share/perl/5.*",
    "/usr/lib/*/perl5/5.*",
    "/usr/share/perl5",
    "/usr/lib/*/perl-base",
    "/usr/lib/*/perl/5.*",
    "/usr/share/perl/5.*",
    "/usr/local/lib/site_perl",
    "/usr/local/lib64/perl5",
    "/usr/local/share/perl5",
    "/usr/lib64/perl5/vendor_perl",
    "/usr/share/perl5/vendor_perl",
    "/usr/lib64/perl5",
];

/// A file of a search directory Perl loads by that name: a module, `*.pm`.
pub(super) fn is_module(name: &[u8]) -> bool {
    name.len() > 3 && name.ends_with(b".pm")
}

/// The host's Perl module directories that exist.
pub(super) fn host_dirs() -> Vec<PathBuf> {
    INC.iter().flat_map(|p| expand(p)).collect()
}

/// The directories `pattern` names (see [`INC`]), in name order.
pub(super) fn expand(pattern: &str) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("/")];
    for part in pattern.split('/').filter(|p| !p.is_empty()) {
        let Some(prefix) = part.strip_suffix('*') else {
            found = found.into_iter().map(|d| d.join(part)).collect();
            continue;
        };
        let mut next = Vec::new();
        for dir in found {
            let Ok(list) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<_> = list
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with(prefix))
                })
                .map(|e| e.path())
                .collect();
            names.sort();
            next.extend(names);
        }
        found = next;
    }
    found.retain(|d| d.is_dir());
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_and_where_perl_keeps_them() {
        assert!(is_module(b"strict.pm") && !is_module(b".pm") && !is_module(b"strict.pl"));
        let dirs = host_dirs();
        if std::path::Path::new("/usr/share/perl5").is_dir() {
            assert!(dirs.iter().any(|d| d.ends_with("share/perl5")), "{dirs:?}");
        }
        assert!(dirs.iter().all(|d| d.is_dir()));
    }
}
