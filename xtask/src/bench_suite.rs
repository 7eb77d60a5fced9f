//! `cargo xtask bench`: the one entry point of the benchmarks.
//!
//! * `--suite store` (the default): the store in process (`bench-run`,
//!   `bench.rs`), in release mode;
//! * `--suite stdio`: the release `zero-memory stdio` driven by the
//!   official Python MCP SDK (`bench/stdio_bench.py`, in the venv
//!   `.ci/tmp/venv` made from `.ci/requirements-mcp.txt`);
//! * `--suite http`: concurrent HTTP load on the release `zero-memory
//!   serve` (`bench-http-run`, `bench_http.rs`);
//! * `--suite all`: the three in sequence, then one table of every target
//!   of issue 13 (`bench_targets.rs`).
//!
//! Every suite leaves its figures in a JSON file; the target lines are
//! computed from them. A benchmark reports figures: a target not met does
//! not fail the command, a broken run does.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::bench::STORE_OPTIONS;
use crate::bench_http::HTTP_OPTIONS;
use crate::bench_support::{build_release, release_dir, root, run_release_xtask, temp_dir};
use crate::bench_targets::{self, HttpFigure, Line, StoreFigure};

const USAGE: &str = "\
usage: cargo xtask bench [--suite store|stdio|http|all] [options]

  --suite store  the store in process, in release mode: remember, import,
                 recall and briefing at each --sizes (default)
  --suite stdio  the release binary over stdio, driven by the official
                 Python MCP SDK (a venv at .ci/tmp/venv, made and filled
                 from .ci/requirements-mcp.txt when missing): spawn →
                 tools/list, remember, recall, ping, peak RSS, and the
                 ratios to ping
  --suite http   concurrent HTTP load on the release `zero-memory serve`
                 (64 clients, 90% recall / 10% remember, REST and /mcp)
  --suite all    store, stdio and http in sequence, then one table of
                 every target of issue 13

Each suite ends with its targets: the measured value, the target, met or
not, computed from the figures. PostgreSQL's line is there when
--postgres URL (or ZM_BENCH_DATABASE_URL) is given.

Time (2 cores): store at the default sizes (10k, 100k) a few minutes;
stdio at 10k memories one to two minutes; http the preload (10k at about
500/s) plus 2 × (warm-up + duration), about a minute and a half.
`--sizes 1000000` adds an estimated 10-30 minutes.";

const STDIO_OPTIONS: &str = "  --memories    memories remembered one at a time (default 10000; also
                the http suite's preload)
  --recalls     recalls measured (default 300)
  --binary      the zero-memory binary (default: target/release/zero-memory,
                built unless --binary is given)
  --server-memory
                also run the workload against @modelcontextprotocol/server-memory
                (npm) for comparison";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Suite {
    Store,
    Stdio,
    Http,
}

impl Suite {
    fn name(self) -> &'static str {
        match self {
            Suite::Store => "store",
            Suite::Stdio => "stdio",
            Suite::Http => "http",
        }
    }
}

/// An option: its name, whether it takes a value, the suites it is for.
struct Flag {
    name: &'static str,
    value: bool,
    suites: &'static [Suite],
}

const FLAGS: &[Flag] = &[
    Flag {
        name: "--sizes",
        value: true,
        suites: &[Suite::Store],
    },
    Flag {
        name: "--queries",
        value: true,
        suites: &[Suite::Store],
    },
    Flag {
        name: "--postgres",
        value: true,
        suites: &[Suite::Store],
    },
    Flag {
        name: "--backends",
        value: true,
        suites: &[Suite::Store],
    },
    Flag {
        name: "--bulk",
        value: true,
        suites: &[Suite::Store],
    },
    Flag {
        name: "--remembers-at-n",
        value: true,
        suites: &[Suite::Store],
    },
    Flag {
        name: "--spacing-minutes",
        value: true,
        suites: &[Suite::Store],
    },
    Flag {
        name: "--recall-mode",
        value: true,
        suites: &[Suite::Store],
    },
    Flag {
        name: "--keep",
        value: false,
        suites: &[Suite::Store, Suite::Http],
    },
    Flag {
        name: "--memories",
        value: true,
        suites: &[Suite::Stdio, Suite::Http],
    },
    Flag {
        name: "--binary",
        value: true,
        suites: &[Suite::Stdio, Suite::Http],
    },
    Flag {
        name: "--recalls",
        value: true,
        suites: &[Suite::Stdio],
    },
    Flag {
        name: "--server-memory",
        value: false,
        suites: &[Suite::Stdio],
    },
    Flag {
        name: "--clients",
        value: true,
        suites: &[Suite::Http],
    },
    Flag {
        name: "--duration",
        value: true,
        suites: &[Suite::Http],
    },
    Flag {
        name: "--warmup",
        value: true,
        suites: &[Suite::Http],
    },
    Flag {
        name: "--recall-pct",
        value: true,
        suites: &[Suite::Http],
    },
    Flag {
        name: "--surfaces",
        value: true,
        suites: &[Suite::Http],
    },
];

fn usage() -> String {
    format!(
        "{USAGE}\n\nstore suite:\n{STORE_OPTIONS}\n\nstdio suite:\n{STDIO_OPTIONS}\n\nhttp suite:\n{HTTP_OPTIONS}"
    )
}

/// The suites to run and each one's arguments.
#[derive(Debug)]
struct Plan {
    suites: Vec<Suite>,
    store: Vec<String>,
    stdio: Vec<String>,
    http: Vec<String>,
    binary: Option<PathBuf>,
}

impl Plan {
    fn parse(args: &[String]) -> Result<Plan, String> {
        let mut plan = Plan {
            suites: vec![Suite::Store],
            store: Vec::new(),
            stdio: Vec::new(),
            http: Vec::new(),
            binary: None,
        };
        let mut it = args.iter();
        let mut given = Vec::new();
        while let Some(a) = it.next() {
            if a == "--suite" {
                let v = it.next().ok_or("--suite needs a value")?;
                plan.suites = match v.as_str() {
                    "store" => vec![Suite::Store],
                    "stdio" => vec![Suite::Stdio],
                    "http" => vec![Suite::Http],
                    "all" => vec![Suite::Store, Suite::Stdio, Suite::Http],
                    other => {
                        return Err(format!("--suite: store, stdio, http or all, not {other:?}"));
                    }
                };
                continue;
            }
            let flag = FLAGS
                .iter()
                .find(|f| f.name == a)
                .ok_or_else(|| format!("unknown argument {a:?}"))?;
            let mut words = vec![a.clone()];
            if flag.value {
                words.push(
                    it.next()
                        .ok_or_else(|| format!("{a} needs a value"))?
                        .clone(),
                );
            }
            if flag.name == "--binary" {
                plan.binary = Some(PathBuf::from(&words[1]));
            }
            given.push((flag, words));
        }
        for (flag, words) in given {
            if !flag.suites.iter().any(|s| plan.suites.contains(s)) {
                eprintln!(
                    "note: {} is for the {} suite, which is not run; ignored",
                    flag.name,
                    flag.suites
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(" and ")
                );
            }
            for s in flag.suites {
                match s {
                    Suite::Store => plan.store.extend(words.iter().cloned()),
                    Suite::Stdio => plan.stdio.extend(words.iter().cloned()),
                    Suite::Http => plan.http.extend(words.iter().cloned()),
                }
            }
        }
        Ok(plan)
    }

    /// The release packages the chosen suites need built.
    fn packages(&self) -> Vec<&'static str> {
        let mut p = Vec::new();
        if self.suites.iter().any(|s| *s != Suite::Stdio) {
            p.push("xtask");
        }
        if self.binary.is_none() && self.suites.iter().any(|s| *s != Suite::Store) {
            p.push("zm-server");
        }
        p
    }
}

/// The `bench` command.
pub(crate) fn bench(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", usage());
        return ExitCode::SUCCESS;
    }
    let plan = match Plan::parse(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}\n\n{}", usage());
            return ExitCode::from(2);
        }
    };
    let figures = match temp_dir("bench-figures") {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cargo xtask bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = run(&plan, &figures);
    let _ = std::fs::remove_dir_all(&figures);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cargo xtask bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(plan: &Plan, figures: &Path) -> Result<(), String> {
    build_release(&plan.packages())?;
    let mut all: Vec<Line> = Vec::new();
    let mut growth = Vec::new();
    let mut failed = Vec::new();
    for &suite in &plan.suites {
        eprintln!("\n=== suite {} ===", suite.name());
        let lines = match suite {
            Suite::Store => store(plan, figures).map(|(lines, g)| {
                growth = g;
                lines
            }),
            Suite::Stdio => stdio(plan, figures),
            Suite::Http => http(plan, figures),
        };
        match lines {
            Ok(lines) => {
                println!("\nissue-13 targets, suite {}:\n", suite.name());
                print!("{}", bench_targets::table(&lines));
                if suite == Suite::Store {
                    for g in &growth {
                        println!("growth {g}");
                    }
                }
                all.extend(lines);
            }
            Err(e) => {
                eprintln!("suite {}: {e}", suite.name());
                failed.push(suite.name());
            }
        }
    }
    if plan.suites.len() > 1 {
        println!("\n=== every issue-13 target — {} ===\n", machine());
        print!("{}", bench_targets::table(&all));
        for g in &growth {
            println!("growth {g}");
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("suite(s) {} failed", failed.join(", ")))
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn with_figures(args: &[String], path: &Path) -> Vec<String> {
    let mut a = args.to_vec();
    a.push("--figures".into());
    a.push(path.display().to_string());
    a
}

fn store(plan: &Plan, dir: &Path) -> Result<(Vec<Line>, Vec<String>), String> {
    let path = dir.join("store.json");
    run_release_xtask("bench-run", &with_figures(&plan.store, &path))?;
    let rows: Vec<StoreFigure> = read_json(&path)?;
    Ok((
        bench_targets::store_lines(&rows),
        bench_targets::growth(&rows),
    ))
}

fn http(plan: &Plan, dir: &Path) -> Result<Vec<Line>, String> {
    let path = dir.join("http.json");
    let run = run_release_xtask("bench-http-run", &with_figures(&plan.http, &path));
    // Errors and lost writes fail the run but still leave figures.
    let rows: Vec<HttpFigure> = match (read_json(&path), run) {
        (Ok(rows), _) => rows,
        (Err(_), Err(e)) | (Err(e), Ok(())) => return Err(e),
    };
    Ok(bench_targets::http_lines(&rows))
}

fn stdio(plan: &Plan, dir: &Path) -> Result<Vec<Line>, String> {
    let python = venv()?;
    let path = dir.join("stdio.json");
    // --binary is passed on as given; the default is the release build.
    let mut args: Vec<String> = vec!["bench/stdio_bench.py".into()];
    if plan.binary.is_none() {
        let binary = release_dir().join("zero-memory");
        args.extend(["--binary".into(), binary.display().to_string()]);
    }
    args.extend(plan.stdio.iter().cloned());
    args.extend(["--json".into(), path.display().to_string()]);
    let status = Command::new(&python)
        .current_dir(root())
        .args(&args)
        .status()
        .map_err(|e| format!("run {}: {e}", python.display()))?;
    // It exits 1 when a call errored, after writing its figures.
    let results: serde_json::Value = match read_json(&path) {
        Ok(v) => v,
        Err(e) => return Err(format!("stdio_bench.py ({status}): {e}")),
    };
    if !status.success() {
        eprintln!("stdio_bench.py exited with {status} (see its errors above)");
    }
    bench_targets::stdio_lines(&results)
}

/// The Python venv with the SDK version CI pins: made when missing, then
/// `pip install -r .ci/requirements-mcp.txt` (a no-op when satisfied).
fn venv() -> Result<PathBuf, String> {
    let root = root();
    let venv = root.join(".ci/tmp/venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        eprintln!("making the venv {}…", venv.display());
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .map_err(|e| format!("python3 -m venv: {e}"))?;
        if !ok.success() {
            return Err(format!("python3 -m venv {} failed ({ok})", venv.display()));
        }
    }
    let ok = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "-r"])
        .arg(root.join(".ci/requirements-mcp.txt"))
        .status()
        .map_err(|e| format!("pip: {e}"))?;
    if !ok.success() {
        return Err(format!(
            "pip install -r .ci/requirements-mcp.txt failed ({ok})"
        ));
    }
    Ok(python)
}

/// The commit, the cores, the load: what the figures were measured on.
fn machine() -> String {
    let out = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .current_dir(root())
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = out("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "?".into());
    let dirty = out("git", &["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
    let date = out("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".into(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    );
    format!(
        "{date}, commit {commit}{}, {} CPUs, load average {load}",
        if dirty { " (with local changes)" } else { "" },
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn store_is_the_default_and_keeps_its_arguments() {
        let p = Plan::parse(&args("--sizes 10000 --queries 100")).expect("parses");
        assert_eq!(p.suites, vec![Suite::Store]);
        assert_eq!(p.store, args("--sizes 10000 --queries 100"));
        assert_eq!(p.packages(), vec!["xtask"]);
    }

    #[test]
    fn each_suite_gets_its_own_arguments() {
        let p = Plan::parse(&args(
            "--suite all --sizes 1000 --memories 500 --clients 8 --recalls 50 --keep",
        ))
        .expect("parses");
        assert_eq!(p.suites, vec![Suite::Store, Suite::Stdio, Suite::Http]);
        assert_eq!(p.store, args("--sizes 1000 --keep"));
        assert_eq!(p.stdio, args("--memories 500 --recalls 50"));
        assert_eq!(p.http, args("--memories 500 --clients 8 --keep"));
        assert_eq!(p.packages(), vec!["xtask", "zm-server"]);
    }

    #[test]
    fn unknown_arguments_and_suites_are_refused() {
        assert!(Plan::parse(&args("--suite nope")).is_err());
        assert!(Plan::parse(&args("--frobnicate")).is_err());
        assert!(Plan::parse(&args("--sizes")).is_err());
    }
}
