//! `envgit log`: newest first, one line per step (`-v` for detail, `--json` for data).

use std::path::Path;
use std::process::ExitCode;

use envgit_store::Step;

use crate::cli::LogArgs;
use crate::failure::CmdResult;
use crate::output::{self, Style};
use crate::project::ProjectDirs;

pub fn run(dir: Option<&Path>, args: &LogArgs) -> CmdResult<ExitCode> {
    let project = ProjectDirs::find_for_reading(dir)?;
    let store = project.open_store_for_log()?;
    let limit = args.limit.unwrap_or(usize::MAX);
    // Only the steps shown are decoded.
    let steps: Vec<&Step> = store
        .steps_newest_first()
        .take(limit)
        .collect::<Result<_, _>>()?;
    if args.out.json {
        output::json(&steps)?;
        return Ok(ExitCode::SUCCESS);
    }
    let style = Style::stdout();
    let mut out = String::new();
    for step in steps {
        out.push_str(&line(step, &style));
        out.push('\n');
        if args.verbose {
            out.push_str(&detail(step, &style));
        }
    }
    crate::pager::page(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// `  4  run     sh release.sh   greet.js, .git (+3)   [flags]`
pub fn line(step: &Step, style: &Style) -> String {
    let mut l = format!(
        "{}  {:<7} {}",
        style.bold(&format!("{:>4}", step.number)),
        step.kind.as_str(),
        output::escape_controls(&step.summary)
    );
    if let Some(code) = step.exit_code.filter(|c| *c != 0) {
        l.push_str(&style.red(&format!(" (exit {code})")));
    }
    l.push_str("  ");
    l.push_str(&style.dim(&output::changed_files(step)));
    let denied = step.refusals.len();
    if !step.requests.is_empty() || denied > 0 {
        l.push_str(&format!("  {} request(s)", step.requests.len()));
        if denied > 0 {
            l.push_str(&style.red(&format!(", {denied} refused")));
        }
    }
    let flags = output::flag_names(step);
    if !flags.is_empty() {
        l.push_str(&style.yellow(&format!("  [{}]", flags.join(", "))));
    }
    l
}

pub fn detail(step: &Step, style: &Style) -> String {
    let mut d = String::new();
    let push = |d: &mut String, s: String| {
        d.push_str("      ");
        d.push_str(&s);
        d.push('\n');
    };
    push(
        &mut d,
        format!(
            "{} .. {}{}",
            output::time(step.started_at_ms),
            output::time(step.ended_at_ms),
            step.parent
                .map(|p| format!("  parent {p}"))
                .unwrap_or_default()
        ),
    );
    if let Some(cmd) = &step.command {
        push(
            &mut d,
            format!("command: {}", output::escape_controls(&cmd.join(" "))),
        );
    }
    if let Some(cwd) = &step.cwd {
        push(&mut d, format!("in: {}", output::escape_controls(cwd)));
    }
    if let Some(code) = step.exit_code {
        push(&mut d, format!("exit code: {code}"));
    }
    match step.tree {
        Some(t) => push(&mut d, format!("tree: {}", t.short())),
        None => push(&mut d, "tree: pruned (cannot be restored)".into()),
    }
    if let Some(t) = step.target {
        push(&mut d, format!("restored step {t}"));
    }
    if let Some(o) = &step.origin {
        push(&mut d, format!("forked from {} step {}", o.project, o.step));
    }
    for n in &step.notes {
        // One line each, whatever the note holds.
        push(&mut d, format!("note: {}", output::escape_controls(n)));
    }
    let t = &step.changes_total;
    push(
        &mut d,
        format!(
            "{} added, {} modified, {} deleted",
            t.added, t.modified, t.deleted
        ),
    );
    // Paths outside .git first, as in the one-line summary.
    let mut changes: Vec<&envgit_store::Change> = step.changes.iter().collect();
    envgit_store::project_first(&mut changes, |c| c.path.as_bytes());
    for c in changes {
        let sign = match c.change {
            envgit_store::ChangeKind::Added => style.green("+"),
            envgit_store::ChangeKind::Modified => "~".into(),
            envgit_store::ChangeKind::Deleted => style.red("-"),
        };
        push(
            &mut d,
            format!("  {sign} {}", output::escape_controls(&c.path)),
        );
    }
    if step.changes_truncated {
        push(
            &mut d,
            format!("  … `envgit diff {}` lists all", step.number),
        );
    }
    for r in &step.requests {
        let rule = r
            .rule
            .as_deref()
            .map(|r| format!(" rule={r}"))
            .unwrap_or_default();
        push(
            &mut d,
            format!(
                "{} {} {}{}{rule}",
                r.decision,
                r.method,
                output::escape_controls(&r.host),
                output::escape_controls(&r.path)
            ),
        );
    }
    // Refused requests are already listed above; other refusals (files, commands) are not.
    let as_requests: Vec<String> = step
        .requests
        .iter()
        .map(|r| format!("{} {}{}", r.method, r.host, r.path))
        .collect();
    for r in step
        .refusals
        .iter()
        .filter(|r| !as_requests.contains(&r.what))
    {
        push(
            &mut d,
            style.red(&format!(
                "denied {} rule={}",
                output::escape_controls(&r.what),
                r.rule
            )),
        );
    }
    for a in &step.approvals {
        push(
            &mut d,
            format!(
                "{} {} rule={} by {}",
                a.answer,
                output::escape_controls(&a.what),
                a.rule,
                output::escape_controls(&a.approver)
            ),
        );
    }
    d
}
