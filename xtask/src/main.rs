use std::process::ExitCode;

mod bench;
mod bench_http;
mod bench_suite;
mod bench_support;
mod bench_targets;
mod duplicates;
mod quality;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  check      run every contract check (description budget, annotations,
             deprecations ledger, contract snapshot and version bump,
             generated docs); exits non-zero naming what is wrong
  contract   regenerate contract/snapshot.json, docs/CONTRACT.md and
             docs/DEPRECATIONS.md (refuses when CONTRACT_VERSION was not
             bumped enough for the changes)
  bench      the benchmarks, in release mode, each ending with its
             issue-13 targets (measured, target, met):
             --suite store (default): the store in process at 10k and
             100k memories (SQLite; PostgreSQL with --postgres URL);
             --suite stdio: the binary over stdio with the Python MCP SDK;
             --suite http: 64 HTTP clients on `zero-memory serve`;
             --suite all: the three, then one table of every target;
             --help for options
  bench-http the same as `bench --suite http`
  quality    retrieval quality of recall (hit@1/5/10, recall@10, MRR@10)
             on the paraphrase set and LongMemEval-S smoke, next to a BM25
             baseline computed in the same run; --help for options
  embed-speed the embedding model alone (bundled, or --model DIR): one
             query's p50/p99 and batch throughput; run it in release
  recall-latency FILE EMAIL
             the store suite's recall and briefing timings on a database
             `bench --keep` left (hybrid when the model is compiled in)
  dense-agreement FILE EMAIL
             the dense leg's shortlist against an exact scan, on such a
             database";

fn main() -> ExitCode {
    let cmd = std::env::args().nth(1);
    match cmd.as_deref() {
        Some("bench") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench_suite::bench(&args)
        }
        Some("bench-run") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench::bench_run(&args)
        }
        Some("bench-http") => {
            let args: Vec<String> = ["--suite".to_string(), "http".to_string()]
                .into_iter()
                .chain(std::env::args().skip(2))
                .collect();
            bench_suite::bench(&args)
        }
        Some("bench-http-run") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench_http::bench_http_run(&args)
        }
        Some("dense-agreement") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench::dense_agreement_of(&args)
        }
        Some("recall-latency") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench::recall_latency(&args)
        }
        Some("embed-speed") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            bench::embed_speed(&args)
        }
        Some("quality") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            quality::quality(&args)
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
