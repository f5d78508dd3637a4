//! `RUBYLIB`: its directories come first in Ruby's `$LOAD_PATH`, so a `json.rb` there is
//! required instead of the library's by every Ruby program the person runs, and a
//! `rubygems.rb` there runs at the start of every one (Ruby requires RubyGems, then
//! `did_you_mean`, `error_highlight` and `syntax_suggest`, before the program). A feature is
//! known by its name without `.rb` or `.so` (`require "etc"` takes an `etc.rb` anywhere on the
//! path before an `etc.so`). Only a directory's own files are compared: a feature below it
//! (`net/http.rb`) is not.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What Ruby requires before every program, wherever it keeps its library.
const START_UP: &[&str] = &[
    "rubygems",
    "did_you_mean",
    "error_highlight",
    "syntax_suggest",
];

/// Where Ruby keeps its library after `RUBYLIB`: Debian's `$LOAD_PATH` and the Red Hat
/// family's, relative to a prefix; `*` stands for any name.
const LOAD_PATH: &[&str] = &[
    "local/lib/site_ruby/*",
    "local/lib/*/site_ruby",
    "local/lib/site_ruby",
    "lib/ruby/vendor_ruby/*",
    "lib/*/ruby/vendor_ruby/*",
    "lib/ruby/vendor_ruby",
    "lib/ruby/*",
    "lib/*/ruby/*",
    "lib/ruby",
    "local/share/ruby/site_ruby",
    "local/lib64/ruby/site_ruby",
    "share/ruby/vendor_ruby",
    "lib64/ruby/vendor_ruby",
    "share/ruby",
    "lib64/ruby",
];

/// The feature a file of a load-path directory is required as: `json` for `json.rb` or
/// `json.so`; `None` for anything else.
pub(super) fn feature_of(name: &[u8]) -> Option<&[u8]> {
    let stem = name
        .strip_suffix(b".rb")
        .or_else(|| name.strip_suffix(b".so"))?;
    (!stem.is_empty()).then_some(stem)
}

/// The files a host directory holds `feature` as, in the order Ruby tries them.
pub(super) fn files_of(dir: &Path, feature: &[u8]) -> [PathBuf; 2] {
    let name = |ext: &[u8]| {
        let mut n = feature.to_vec();
        n.extend_from_slice(ext);
        dir.join(std::ffi::OsStr::from_bytes(&n))
    };
    [name(b".rb"), name(b".so")]
}

/// The features every Ruby requires before the program.
pub(super) fn always_on_host() -> impl Iterator<Item = &'static [u8]> {
    START_UP.iter().map(|f| f.as_bytes())
}

/// What `feature` stands for on every host, when no directory showed it.
pub(super) fn on_every_host(feature: &[u8]) -> Option<String> {
    START_UP.iter().any(|f| f.as_bytes() == feature).then(|| {
        format!(
            "Ruby's {}, required at every start",
            String::from_utf8_lossy(feature)
        )
    })
}

/// The host's Ruby library directories that exist: the system's (`/usr`), `/usr/local`'s, and
/// those of each Ruby the host's `PATH` finds as a program or a link to one (a `ruby-build`
/// or `ruby-install` prefix; a version manager's shim is a script, whose Ruby is not known
/// here: the start-up features are checked wherever it keeps them).
pub(super) fn host_dirs(path_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = vec!["/usr".into()];
    super::search::add_prefixes_on_path(&mut prefixes, path_dirs, &["ruby"]);
    let mut dirs: Vec<PathBuf> = Vec::new();
    for prefix in &prefixes {
        for pattern in LOAD_PATH {
            for d in super::perl::expand(&prefix.join(pattern).to_string_lossy()) {
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_and_where_ruby_keeps_them() {
        assert_eq!(feature_of(b"json.rb"), Some(&b"json"[..]));
        assert_eq!(feature_of(b"etc.so"), Some(&b"etc"[..]));
        assert_eq!(feature_of(b".rb"), None);
        assert_eq!(feature_of(b"Gemfile"), None);
        let dirs = host_dirs(&[]);
        assert!(dirs.iter().all(|d| d.is_dir()));
        if Path::new("/usr/lib/ruby/vendor_ruby").is_dir() {
            assert!(
                dirs.iter().any(|d| d.ends_with("lib/ruby/vendor_ruby")),
                "{dirs:?}"
            );
        }
        assert_eq!(
            files_of(Path::new("/l"), b"json"),
            [PathBuf::from("/l/json.rb"), PathBuf::from("/l/json.so")]
        );
    }
}
