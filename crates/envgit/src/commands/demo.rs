//! `envgit demo [--keep DIR] [--json]`.

use std::path::Path;
use std::process::ExitCode;

use crate::cli::DemoArgs;
use crate::demo;
use crate::failure::{CmdResult, Failure};
use crate::output::{self, Style};

pub fn run(_dir: Option<&Path>, args: &DemoArgs) -> CmdResult<ExitCode> {
    let (work, _temp) = match &args.keep {
        Some(dir) => {
            if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
                return Err(Failure::usage(format!(
                    "{} is not empty: --keep needs a new or empty directory",
                    dir.display()
                )));
            }
            std::fs::create_dir_all(dir)
                .map_err(|e| Failure::failed(format!("{}: {e}", dir.display())))?;
            (dir.canonicalize()?, None)
        }
        None => {
            let t = tempfile_dir()?;
            (t.clone(), Some(TempDir(t)))
        }
    };
    let style = Style::stdout();
    let json = args.out.json;
    let mut print = |s: &demo::Shown| {
        if json {
            return;
        }
        println!("\n{}", style.bold(&format!("── {}", s.title)));
        println!("{}", style.dim(&format!("$ {}", s.command)));
        print!("{}", s.output);
    };
    let result = demo::run(&work, &mut print)?;
    if json {
        output::json(&result)?;
    } else {
        let ok = result.checks.push_refused_rule.as_deref() == Some("git.push")
            && result.checks.remote_refs_unchanged
            && result.checks.head_after_rewind == result.checks.step2_commit;
        println!(
            "\n{}",
            if ok {
                style.green("The push was stopped at the request; the destroyed commit came back with a rewind.")
            } else {
                style.red("The demo did not go as expected: see the transcript above.")
            }
        );
        if args.keep.is_some() {
            println!("kept in {}", work.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A private temporary directory, removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        crate::runtime::forget_step_dirs_of(&crate::demo::envgit_home(&self.0));
        // Its store has the home overlay's work directory, mode 0.
        let _ = envgit_store::remove_tree(&self.0);
    }
}

fn tempfile_dir() -> CmdResult<std::path::PathBuf> {
    let base = std::env::temp_dir().join(format!(
        "envgit-demo-{}-{}",
        std::process::id(),
        envgit_store::now_ms()
    ));
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&base)
        .map_err(|e| Failure::failed(format!("{}: {e}", base.display())))?;
    Ok(base)
}
