//! The `zero-memory` binary. Everything lives in the `zm_server` library;
//! see its documentation.

use std::process::ExitCode;
use std::time::Duration;

use clap::FromArgMatches;
use zm_server::config::Inputs;
use zm_server::{cli, commands};

/// Exit with clap's message, a rejected value's password hidden: clap
/// quotes the raw value (`invalid value 'postgres://zm:S3cret@…'`), and
/// such a line ends up in journald.
fn exit_redacted(e: &clap::Error) -> ! {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::ValueValidation {
        e.exit();
    }
    let mut text = e.render().to_string();
    if let Some(ContextValue::String(raw)) = e.get(ContextKind::InvalidValue) {
        text = text.replace(raw.as_str(), &zm_server::config::redact_url(raw));
    }
    eprint!("{text}");
    std::process::exit(e.exit_code());
}

fn main() -> ExitCode {
    let matches = match cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => exit_redacted(&e),
    };
    if let Err(e) = cli::check_flag_placement(&matches) {
        e.exit();
    }
    let parsed = match cli::Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let inputs = Inputs::from_matches(&matches);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zero-memory: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(commands::run(parsed.command, inputs));
    // Do not wait on a blocked stdin reader (stdio) or stray tasks.
    runtime.shutdown_timeout(Duration::from_secs(2));
    code
}
