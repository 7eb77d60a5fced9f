//! The `zero-memory` binary. Everything lives in the `zm_server` library;
//! see its documentation.

use std::process::ExitCode;
use std::time::Duration;

use clap::FromArgMatches;
use zm_server::config::Inputs;
use zm_server::{cli, commands};

fn main() -> ExitCode {
    let matches = cli::command().get_matches();
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
