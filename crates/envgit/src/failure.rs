//! How a command fails: a message for stderr and the exit code: 1 failed (including
//! fsck finding corruption, a full disk), 2 usage or policy error.

use envgit_store::StoreError;

#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

pub type CmdResult<T = ()> = Result<T, Failure>;

impl Failure {
    /// The user asked for something that cannot be (exit 2); nothing was changed.
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }

    /// The command could not do its work (exit 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        if e.is_disk_full() {
            return Self::failed(format!(
                "{e}\nthe disk is full: nothing was recorded; free some space (or run `envgit gc`) and try again"
            ));
        }
        match e {
            StoreError::NoSuchStep(n) => Self::usage(format!(
                "step {n} does not exist; `envgit log` lists the steps"
            )),
            StoreError::Pruned(_) | StoreError::Refused(_) => Self::usage(e.to_string()),
            StoreError::Corrupt(_) => {
                Self::failed(format!("{e}\nrun `envgit fsck` to see what is affected"))
            }
            StoreError::InFlight(_) | StoreError::Io { .. } => Self::failed(e.to_string()),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::failed(e.to_string())
    }
}
