//! The `zero-memory` binary. Everything lives in the `zm_server` library;
//! see its documentation.

use std::process::ExitCode;
use std::time::Duration;

use clap::FromArgMatches;
use zm_server::config::Inputs;
use zm_server::{cli, commands};

/// Exit with clap's message, every URL password in it hidden
/// ([`cli::redacted_error`]): clap quotes raw arguments, and such a line
/// ends up in journald. `--help` and `--version` print as clap prints them.
fn exit_redacted(e: &clap::Error) -> ! {
    if !e.use_stderr() {
        e.exit();
    }
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    eprint!("{}", cli::redacted_error(e, &args));
    std::process::exit(e.exit_code());
}

fn main() -> ExitCode {
    let matches = match cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => exit_redacted(&e),
    };
    if let Err(e) = cli::check_flag_placement(&matches) {
        exit_redacted(&e);
    }
    let parsed = match cli::Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => exit_redacted(&e),
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
