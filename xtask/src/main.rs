use std::process::ExitCode;

mod bench;
mod bench_http;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  check      run every contract check (description budget, annotations,
             deprecations ledger, contract snapshot and version bump,
             generated docs); exits non-zero naming what is wrong
  contract   regenerate contract/snapshot.json, docs/CONTRACT.md and
             docs/DEPRECATIONS.md (refuses when CONTRACT_VERSION was not
             bumped enough for the changes)
  bench      store benchmark in release mode: remember throughput, recall
             and briefing latency, database size at 10k and 100k memories
             (SQLite; PostgreSQL with --postgres URL); --help for options
  bench-http concurrent HTTP load on the release `zero-memory serve`:
             64 clients, 90% recall / 10% remember, over REST and /mcp;
             throughput, p50/p99, errors, lost writes; --help for options";

fn main() -> ExitCode {
    let cmd = std::env::args().nth(1);
    match cmd.as_deref() {
        Some("bench") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench::bench(&args)
        }
        Some("bench-run") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench::bench_run(&args)
        }
        Some("bench-http") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench_http::bench_http(&args)
        }
        Some("bench-http-run") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench_http::bench_http_run(&args)
        }
        Some("check") => {
            let mut failed = false;
            for o in xtask::run_checks() {
                match o.result {
                    Ok(()) => println!("ok    {}", o.name),
                    Err(errs) => {
                        failed = true;
                        println!("FAIL  {}", o.name);
                        for e in errs {
                            println!("        {e}");
                        }
                    }
                }
            }
            if failed {
                eprintln!("cargo xtask check: FAILED");
                ExitCode::FAILURE
            } else {
                println!("cargo xtask check: all contract checks passed");
                ExitCode::SUCCESS
            }
        }
        Some("contract") => match xtask::regenerate() {
            Ok(written) if written.is_empty() => {
                println!("contract files are up to date");
                ExitCode::SUCCESS
            }
            Ok(written) => {
                for w in written {
                    println!("wrote {w}");
                }
                ExitCode::SUCCESS
            }
            Err(errs) => {
                for e in errs {
                    eprintln!("{e}");
                }
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
