//! How a step is named on the command line: a number (`7`), or relative to the newest step as
//! jj and git name revisions: `@` (the newest), `@-` (its parent), `@--`, `@~3` (three parents
//! back). One parser for every command that takes a step.

use std::fmt;
use std::str::FromStr;

use envgit_store::Store;

use crate::failure::{CmdResult, Failure};

/// The help text every step argument shares.
pub const HELP: &str = "A step number, or relative to the newest: @ (the newest), @- (its parent), \
                        @-- , @~3 (three parents back)";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepRef {
    Number(u64),
    /// So many parents back from the newest step.
    Newest(u64),
}

/// A step argument that names no step (clap shows it with the argument's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a step: give a number (7), @ (the newest), @- (its parent) or @~N")]
pub struct NotAStep(String);

impl FromStr for StepRef {
    type Err = NotAStep;

    fn from_str(s: &str) -> Result<Self, NotAStep> {
        let bad = || NotAStep(s.to_string());
        if let Some(rest) = s.strip_prefix('@') {
            if rest.chars().all(|c| c == '-') {
                return Ok(Self::Newest(rest.len() as u64));
            }
            if let Some(n) = rest.strip_prefix('~') {
                return n.parse().map(Self::Newest).map_err(|_| bad());
            }
            return Err(bad());
        }
        s.parse().map(Self::Number).map_err(|_| bad())
    }
}

impl fmt::Display for StepRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Newest(0) => write!(f, "@"),
            Self::Newest(k) => write!(f, "@~{k}"),
        }
    }
}

impl StepRef {
    /// The step number this names in `store`, following parents (not numbers: after a rewind
    /// the newest step's parent is the step before it in time, the one `log` lists next).
    pub fn resolve(self, store: &Store) -> CmdResult<u64> {
        let back = match self {
            Self::Number(n) => return Ok(n),
            Self::Newest(k) => k,
        };
        let count = store.step_count();
        let Some(mut step) = store.head() else {
            return Err(Failure::usage(format!(
                "{self}: there are no steps yet; `envgit record` makes the first"
            )));
        };
        for _ in 0..back {
            let parent = step.parent.and_then(|p| store.step(p).ok());
            match parent {
                Some(p) => step = p,
                None => {
                    return Err(Failure::usage(format!(
                        "{self}: there are only {count} steps; `envgit log` lists them"
                    )));
                }
            }
        }
        Ok(step.number)
    }
}

#[cfg(test)]
mod tests {
    use super::StepRef;

    #[test]
    fn parses_numbers_and_relative_names() {
        assert_eq!("7".parse(), Ok(StepRef::Number(7)));
        assert_eq!("@".parse(), Ok(StepRef::Newest(0)));
        assert_eq!("@-".parse(), Ok(StepRef::Newest(1)));
        assert_eq!("@--".parse(), Ok(StepRef::Newest(2)));
        assert_eq!("@~3".parse(), Ok(StepRef::Newest(3)));
        for bad in ["", "@~", "@~x", "@+", "-1", "x"] {
            let e = bad.parse::<StepRef>().unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("`{bad}` is not a step: give a number")),
                "{e}"
            );
        }
    }
}
