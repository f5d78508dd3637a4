//! `envgit man --out DIR`: the man pages, generated from the clap definitions by the binary
//! they describe — `envgit.1` and `envgit-COMMAND.1` for every visible command. The npm
//! package ships them (scripts/package-npm runs this); `cargo install` users run it themselves.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::{Cli, ManArgs};
use crate::failure::{CmdResult, Failure};

pub fn run(args: &ManArgs) -> CmdResult<ExitCode> {
    let out = &args.out;
    std::fs::create_dir_all(out)
        .map_err(|e| Failure::failed(format!("creating {}: {e}", out.display())))?;
    // As clap_mangen::generate_to does: no `help` pseudo-command, built once.
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let mut pages = vec![root.clone()];
    pages.extend(root.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    let count = pages.len();
    for page in pages {
        let man = clap_mangen::Man::new(page);
        let mut roff = Vec::new();
        man.render(&mut roff)
            .map_err(|e| Failure::failed(format!("rendering a man page: {e}")))?;
        write_page(&out.join(man.get_filename()), &roff)?;
    }
    crate::output::note(&format!("wrote {count} man pages into {}", out.display()));
    Ok(ExitCode::SUCCESS)
}

/// Writes one page, replacing an older one, never through a symlink at its name.
fn write_page(path: &Path, roff: &[u8]) -> CmdResult<()> {
    let err = |e: std::io::Error| Failure::failed(format!("writing {}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(err)?;
    f.write_all(roff).map_err(err)
}
