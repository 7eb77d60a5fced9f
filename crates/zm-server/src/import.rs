//! `zero-memory import`: reads the file and hands it to the store's
//! importer (`zm_store::importer`, shared with the dashboard), then prints
//! what it did. The mapping of the server-memory graph is documented in
//! `docs/CLI.md` and in that module.

use std::path::Path;

use anyhow::{Context, bail};
use zm_store::importer::{ImportFormat, ImportInto, Summary, import_reader};
use zm_store::{Caller, ToolService, Transport};

use crate::cli::{ImportArgs, ImportFormat as FormatArg, ImportTargetArg};
use crate::commands::{find_user, open_store, say, usable};
use crate::config::Config;

/// `zero-memory import`.
pub async fn run(cfg: &Config, args: &ImportArgs) -> anyhow::Result<()> {
    // Read a line at a time: a file of any size imports in bounded memory.
    if std::fs::metadata(&args.file).is_ok_and(|m| m.is_dir()) {
        bail!("cannot read {}: it is a directory", args.file.display());
    }
    let file = tokio::fs::File::open(&args.file)
        .await
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let file = tokio::io::BufReader::new(file);
    let store = open_store(cfg).await?;
    // Memories are written as the account: a disabled one writes nothing.
    let user = usable(find_user(&store, &args.user).await?)?;
    let source_path = std::path::absolute(&args.file)
        .unwrap_or_else(|_| args.file.clone())
        .display()
        .to_string();
    let mut caller = Caller::new(user.id.clone());
    caller.transport = Transport::Cli;
    let format = match args.format {
        FormatArg::Zm => ImportFormat::Zm,
        FormatArg::ServerMemory => ImportFormat::ServerMemory,
    };
    let target = args.target.map(|t| match t {
        ImportTargetArg::Core => ImportInto::Core,
        ImportTargetArg::Personal => ImportInto::Personal,
    });
    let summary = import_reader(
        ToolService::new(store.clone()),
        caller,
        source_path,
        format,
        target,
        file,
    )
    .await;
    store.close().await;
    // Whether stdout took the summary or not (a reader gone early), the
    // bad lines are said on stderr and fail the command.
    let printed = if args.json {
        say(serde_json::to_string(&summary)?)
    } else {
        print_summary(&summary, &args.file, &user.email)
    };
    for w in &summary.warnings {
        eprintln!("warning: {w}");
    }
    if summary.warnings_unlisted > 0 {
        eprintln!(
            "warning: … and {} more (only the first {} are listed)",
            summary.warnings_unlisted,
            summary.warnings.len()
        );
    }
    for e in &summary.errors {
        eprintln!("error: {e}");
    }
    if summary.errors_unlisted > 0 {
        eprintln!(
            "error: … and {} more (only the first {} are listed)",
            summary.errors_unlisted,
            summary.errors.len()
        );
    }
    if let Some(what) = summary.failure_text() {
        bail!("{what}");
    }
    printed
}

/// The import's summary on stdout ([`say`]).
fn print_summary(s: &Summary, file: &Path, email: &str) -> anyhow::Result<()> {
    say(format!(
        "imported {} ({}) for {email}",
        file.display(),
        s.format
    ))?;
    if s.format == "server-memory" {
        say(format!(
            "  lines:     {} ({} entities, {} relations)",
            s.lines, s.entities, s.relations
        ))?;
    } else {
        say(format!("  lines:     {}", s.lines))?;
    }
    let mut mem = format!(
        "  memories:  {} imported, {} already present, {} skipped (imported before)",
        s.memories_imported, s.memories_existing, s.memories_skipped
    );
    if s.format == "zm" {
        mem.push_str(&format!(
            ", {} invalidated (not imported)",
            s.invalidated_skipped
        ));
        if s.copies_retired > 0 {
            mem.push_str(&format!(
                "; {} copies an earlier import made of those forgotten",
                s.copies_retired
            ));
        }
    }
    say(mem)?;
    if s.format == "server-memory" {
        say(format!(
            "  edges:     {} created, {} already existed",
            s.edges_created, s.edges_existing
        ))?;
    }
    if s.attachments_failed > 0 {
        say(format!(
            "  failed:    {} lines; {} memories imported but not attached (run the import again)",
            s.lines_failed, s.attachments_failed
        ))?;
    } else if s.lines_failed > 0 {
        say(format!("  failed:    {} lines", s.lines_failed))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines are counted once however many of their memories failed, and
    /// memories imported but not attached are told apart from them.
    #[test]
    fn the_failure_counts_lines_and_attachments_apart() {
        let mut s = Summary::default();
        assert_eq!(s.failure_text(), None);
        s.lines = 1;
        s.lines_failed = 1;
        s.errors = vec!["line 1: …".into(), "line 1: …".into(), "line 1: …".into()];
        assert_eq!(
            s.failure_text().as_deref(),
            Some(
                "1 of 1 lines could not be imported; fix them and run the import again (what was imported is skipped)"
            )
        );
        s.lines_failed = 0;
        s.attachments_failed = 1;
        s.errors = vec!["line 1: imported, but could not attach it to Billing: …".into()];
        let said = s.failure_text().unwrap();
        assert!(
            !said.contains("could not be imported") && said.contains("run the import again"),
            "{said}"
        );
    }
}
