//! The targets of issue 13, in one place, and the figures they are
//! checked against.
//!
//! Each suite of `cargo xtask bench` leaves its figures in a JSON file
//! (`bench-run --figures`, `bench-http-run --figures`, `stdio_bench.py
//! --json`); the targets are computed from those figures, never written by
//! hand. A benchmark reports: a target not met is a figure, not a failure.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which side of the limit a figure must stay on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    AtMost,
    AtLeast,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Id {
    StoreRecallP50,
    StoreRecallP99,
    StoreBriefingP50,
    StoreRemember,
    StoreImport,
    PostgresRecallP50,
    StdioRecallP50,
    StdioRecallP99,
    StdioRememberP50,
    StdioSpawn,
    StdioRss,
    HttpRecalls,
    HttpRecallP99,
    HttpErrors,
    HttpLost,
}

pub(crate) struct Target {
    pub(crate) id: Id,
    pub(crate) what: &'static str,
    pub(crate) bound: Bound,
    pub(crate) limit: f64,
    pub(crate) unit: &'static str,
}

/// The in-process targets are at this size.
pub(crate) const TARGET_SIZE: usize = 100_000;

/// Every target of issue 13.
pub(crate) const TARGETS: &[Target] = &[
    Target {
        id: Id::StoreRecallP50,
        what: "in process, SQLite: recall p50",
        bound: Bound::AtMost,
        limit: 2.0,
        unit: "ms",
    },
    Target {
        id: Id::StoreRecallP99,
        what: "in process, SQLite: recall p99",
        bound: Bound::AtMost,
        limit: 8.0,
        unit: "ms",
    },
    Target {
        id: Id::StoreBriefingP50,
        what: "in process, SQLite: briefing p50",
        bound: Bound::AtMost,
        limit: 5.0,
        unit: "ms",
    },
    Target {
        id: Id::StoreRemember,
        what: "in process, SQLite: sequential remember",
        bound: Bound::AtLeast,
        limit: 1_000.0,
        unit: "/s",
    },
    Target {
        id: Id::StoreImport,
        what: "in process, SQLite: import in batches",
        bound: Bound::AtLeast,
        limit: 10_000.0,
        unit: "/s",
    },
    Target {
        id: Id::PostgresRecallP50,
        what: "in process, PostgreSQL: recall p50",
        bound: Bound::AtMost,
        limit: 5.0,
        unit: "ms",
    },
    Target {
        id: Id::StdioRecallP50,
        what: "stdio: recall p50 / ping p50",
        bound: Bound::AtMost,
        limit: 3.0,
        unit: "×",
    },
    Target {
        id: Id::StdioRecallP99,
        what: "stdio: recall p99 / ping p50",
        bound: Bound::AtMost,
        limit: 8.0,
        unit: "×",
    },
    Target {
        id: Id::StdioRememberP50,
        what: "stdio: remember p50 / ping p50",
        bound: Bound::AtMost,
        limit: 4.0,
        unit: "×",
    },
    Target {
        id: Id::StdioSpawn,
        what: "stdio: spawn → tools/list answered",
        bound: Bound::AtMost,
        limit: 30.0,
        unit: "ms",
    },
    Target {
        id: Id::StdioRss,
        what: "stdio: server peak RSS",
        bound: Bound::AtMost,
        limit: 30.0,
        unit: "MiB",
    },
    Target {
        id: Id::HttpRecalls,
        what: "HTTP: recalls/s",
        bound: Bound::AtLeast,
        limit: 2_000.0,
        unit: "/s",
    },
    Target {
        id: Id::HttpRecallP99,
        what: "HTTP: recall p99",
        bound: Bound::AtMost,
        limit: 25.0,
        unit: "ms",
    },
    Target {
        id: Id::HttpErrors,
        what: "HTTP: errors",
        bound: Bound::AtMost,
        limit: 0.0,
        unit: "",
    },
    Target {
        id: Id::HttpLost,
        what: "HTTP: acknowledged writes missing after a restart",
        bound: Bound::AtMost,
        limit: 0.0,
        unit: "",
    },
];

fn target(id: Id) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.id == id)
        .expect("every id has a target")
}

// ------------------------------------------------------------ figures

/// One size of one backend of the store benchmark.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoreFigure {
    /// `sqlite`, `sqlite-normal` or `postgres`.
    pub(crate) backend: String,
    pub(crate) size: usize,
    pub(crate) recall_p50_ms: f64,
    pub(crate) recall_p99_ms: f64,
    pub(crate) briefing_p50_ms: f64,
    /// Sequential `remember`s per second when the store holds `size`.
    pub(crate) remember_per_s: Option<f64>,
    /// `import` (in batches) or `remember`.
    pub(crate) bulk: String,
    /// The bulk path's rate over everything it loaded so far (none when
    /// nothing was loaded that way, e.g. at a size under 2,500).
    pub(crate) bulk_per_s: Option<f64>,
}

/// One surface of the HTTP load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HttpFigure {
    pub(crate) surface: String,
    pub(crate) clients: usize,
    pub(crate) memories: usize,
    pub(crate) recalls_per_s: f64,
    pub(crate) recall_p50_ms: f64,
    pub(crate) recall_p99_ms: f64,
    pub(crate) errors: usize,
    pub(crate) acknowledged: usize,
    pub(crate) lost: usize,
}

/// A figure checked against a target.
pub(crate) struct Line {
    pub(crate) target: &'static Target,
    /// Where it was measured ("100,000 memories", "REST /api/tools").
    pub(crate) context: String,
    pub(crate) value: f64,
    /// What the value is made of, when it is a ratio.
    pub(crate) detail: String,
}

impl Line {
    fn new(id: Id, context: impl Into<String>, value: f64) -> Line {
        Line {
            target: target(id),
            context: context.into(),
            value,
            detail: String::new(),
        }
    }

    pub(crate) fn met(&self) -> bool {
        self.value.is_finite()
            && match self.target.bound {
                Bound::AtMost => self.value <= self.target.limit,
                Bound::AtLeast => self.value >= self.target.limit,
            }
    }
}

fn number(v: f64, unit: &str) -> String {
    let n = if v.abs() >= 100.0 || v.fract() == 0.0 {
        thousands(v)
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    match unit {
        "" => n,
        "/s" | "×" => format!("{n}{unit}"),
        _ => format!("{n} {unit}"),
    }
}

fn thousands(v: f64) -> String {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a benchmark figure, far below i64::MAX"
    )]
    let n = v.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// The store's lines: the `sqlite` rows at [`TARGET_SIZE`] (or the largest
/// size measured, said so), PostgreSQL's when it ran.
pub(crate) fn store_lines(rows: &[StoreFigure]) -> Vec<Line> {
    let mut lines = Vec::new();
    let at = |backend: &str| -> Option<(&StoreFigure, String)> {
        let mine: Vec<&StoreFigure> = rows.iter().filter(|r| r.backend == backend).collect();
        let row = mine
            .iter()
            .find(|r| r.size == TARGET_SIZE)
            .or_else(|| mine.iter().max_by_key(|r| r.size))?;
        let context = if row.size == TARGET_SIZE {
            format!("{} memories", thousands_usize(row.size))
        } else {
            format!(
                "{} memories (the target is at {})",
                thousands_usize(row.size),
                thousands_usize(TARGET_SIZE)
            )
        };
        Some((row, context))
    };
    if let Some((r, c)) = at("sqlite") {
        lines.push(Line::new(Id::StoreRecallP50, c.clone(), r.recall_p50_ms));
        lines.push(Line::new(Id::StoreRecallP99, c.clone(), r.recall_p99_ms));
        lines.push(Line::new(
            Id::StoreBriefingP50,
            c.clone(),
            r.briefing_p50_ms,
        ));
        if let Some(rate) = r.remember_per_s {
            lines.push(Line::new(Id::StoreRemember, c.clone(), rate));
        }
        if let (Some(rate), "import") = (r.bulk_per_s, r.bulk.as_str()) {
            lines.push(Line::new(
                Id::StoreImport,
                format!("batches of 500, loading to {}", thousands_usize(r.size)),
                rate,
            ));
        }
    }
    if let Some((r, c)) = at("postgres") {
        lines.push(Line::new(Id::PostgresRecallP50, c, r.recall_p50_ms));
    }
    lines
}

fn thousands_usize(n: usize) -> String {
    #[allow(clippy::cast_precision_loss, reason = "a store size")]
    thousands(n as f64)
}

/// How recall and remember grow from one size to the next (per backend).
pub(crate) fn growth(rows: &[StoreFigure]) -> Vec<String> {
    let mut out = Vec::new();
    for pair in rows.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.backend != b.backend {
            continue;
        }
        #[allow(clippy::cast_precision_loss, reason = "store sizes")]
        let factor = b.size as f64 / a.size as f64;
        let remember = match (a.remember_per_s, b.remember_per_s) {
            (Some(x), Some(y)) => format!("{:.2}", y / x),
            _ => "?".into(),
        };
        out.push(format!(
            "{}: {} → {} memories (×{factor:.0}): recall p50 ×{:.2}, p99 ×{:.2}; briefing p50 ×{:.2}; remember/s ×{remember}",
            a.backend,
            thousands_usize(a.size),
            thousands_usize(b.size),
            b.recall_p50_ms / a.recall_p50_ms,
            b.recall_p99_ms / a.recall_p99_ms,
            b.briefing_p50_ms / a.briefing_p50_ms,
        ));
    }
    out
}

/// The stdio lines from `stdio_bench.py --json` (the zero-memory result).
pub(crate) fn stdio_lines(results: &Value) -> Result<Vec<Line>, String> {
    let r = results
        .as_array()
        .and_then(|a| a.iter().find(|r| r["server"] == "zero-memory"))
        .ok_or("no zero-memory result in the stdio figures")?;
    let f = |key: &str| {
        r[key]
            .as_f64()
            .ok_or_else(|| format!("stdio figures: no {key}"))
    };
    let ping = f("ping_p50")?;
    let context = format!(
        "{} memories, official Python SDK",
        r["memories"].as_f64().map_or_else(|| "?".into(), thousands)
    );
    let ratio = |id: Id, key: &str, name: &str| -> Result<Line, String> {
        let v = f(key)?;
        let mut l = Line::new(id, context.clone(), v / ping);
        l.detail = format!("{name} {v:.2} ms, ping p50 {ping:.3} ms");
        Ok(l)
    };
    Ok(vec![
        ratio(Id::StdioRecallP50, "recall_p50", "recall p50")?,
        ratio(Id::StdioRecallP99, "recall_p99", "recall p99")?,
        ratio(Id::StdioRememberP50, "remember_p50", "remember p50")?,
        Line::new(
            Id::StdioSpawn,
            "a fresh data directory (migrations run first)",
            f("spawn_to_tools_list_ms")?,
        ),
        Line::new(Id::StdioRss, context.clone(), f("peak_rss_mib")?),
    ])
}

/// The HTTP lines, per surface; errors and lost writes over the run.
pub(crate) fn http_lines(surfaces: &[HttpFigure]) -> Vec<Line> {
    let mut lines = Vec::new();
    for s in surfaces {
        let c = format!(
            "{}, {} clients, {} memories",
            s.surface,
            s.clients,
            thousands_usize(s.memories)
        );
        lines.push(Line::new(Id::HttpRecalls, c.clone(), s.recalls_per_s));
        lines.push(Line::new(Id::HttpRecallP99, c, s.recall_p99_ms));
    }
    if !surfaces.is_empty() {
        #[allow(clippy::cast_precision_loss, reason = "a count")]
        let sum = |f: fn(&HttpFigure) -> usize| surfaces.iter().map(f).sum::<usize>() as f64;
        lines.push(Line::new(
            Id::HttpErrors,
            "every surface",
            sum(|s| s.errors),
        ));
        let mut lost = Line::new(Id::HttpLost, "every surface", sum(|s| s.lost));
        lost.detail = format!("of {} acknowledged", sum(|s| s.acknowledged));
        lines.push(lost);
    }
    lines
}

/// The lines as a Markdown table.
pub(crate) fn table(lines: &[Line]) -> String {
    let mut s =
        String::from("| target | where | measured | limit | met |\n|---|---|---:|---:|---|\n");
    for l in lines {
        let t = l.target;
        let measured = if l.detail.is_empty() {
            number(l.value, t.unit)
        } else {
            format!("{} ({})", number(l.value, t.unit), l.detail)
        };
        let sign = match t.bound {
            Bound::AtMost => "≤",
            Bound::AtLeast => "≥",
        };
        s.push_str(&format!(
            "| {} | {} | {measured} | {sign} {} | {} |\n",
            t.what,
            l.context,
            number(t.limit, t.unit),
            if l.met() { "yes" } else { "no" }
        ));
    }
    let met = lines.iter().filter(|l| l.met()).count();
    s.push_str(&format!("\n{met} of {} targets met.\n", lines.len()));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(backend: &str, size: usize, recall: f64) -> StoreFigure {
        StoreFigure {
            backend: backend.into(),
            size,
            recall_p50_ms: recall,
            recall_p99_ms: recall * 3.0,
            briefing_p50_ms: 4.0,
            remember_per_s: Some(900.0),
            bulk: "import".into(),
            bulk_per_s: Some(12_000.0),
        }
    }

    #[test]
    fn met_follows_the_figure() {
        let lines = store_lines(&[row("sqlite", 10_000, 1.0), row("sqlite", 100_000, 2.5)]);
        let p50 = &lines[0];
        assert_eq!(p50.target.id, Id::StoreRecallP50);
        assert!((p50.value - 2.5).abs() < 1e-9, "the 100k row is used");
        assert!(!p50.met());
        assert!(lines[2].met(), "briefing 4 ms ≤ 5 ms");
        assert!(!lines[3].met(), "900/s < 1,000/s");
        assert!(lines[4].met(), "12,000/s ≥ 10,000/s");
    }

    #[test]
    fn the_largest_size_stands_in_and_says_so() {
        let lines = store_lines(&[row("sqlite", 1_000, 1.0), row("sqlite", 10_000, 1.5)]);
        assert!((lines[0].value - 1.5).abs() < 1e-9);
        assert!(lines[0].context.contains("the target is at 100,000"));
        assert!(
            store_lines(&[row("sqlite", 1_000, 1.0)])
                .iter()
                .all(|l| l.target.id != Id::PostgresRecallP50)
        );
    }

    #[test]
    fn postgres_has_its_line_when_it_ran() {
        let lines = store_lines(&[row("sqlite", 100_000, 1.0), row("postgres", 100_000, 6.0)]);
        let pg = lines
            .iter()
            .find(|l| l.target.id == Id::PostgresRecallP50)
            .expect("a PostgreSQL line");
        assert!((pg.value - 6.0).abs() < 1e-9 && !pg.met());
        assert_eq!(pg.context, "100,000 memories");
        let g = growth(&[row("sqlite", 10_000, 1.0), row("postgres", 100_000, 6.0)]);
        assert!(g.is_empty(), "no growth across backends");
    }

    #[test]
    fn stdio_ratios_are_to_ping() {
        let v = serde_json::json!([{"server": "zero-memory", "memories": 1000,
            "ping_p50": 0.25, "recall_p50": 0.5, "recall_p99": 2.5, "remember_p50": 1.25,
            "spawn_to_tools_list_ms": 31.0, "peak_rss_mib": 20.0}]);
        let lines = stdio_lines(&v).expect("figures");
        assert!((lines[0].value - 2.0).abs() < 1e-9 && lines[0].met());
        assert!((lines[1].value - 10.0).abs() < 1e-9 && !lines[1].met());
        assert!((lines[2].value - 5.0).abs() < 1e-9 && !lines[2].met());
        assert!(!lines[3].met() && lines[4].met());
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(number(10_000.0, "/s"), "10,000/s");
        assert_eq!(number(2.0, "ms"), "2 ms");
        assert_eq!(number(3.91, "ms"), "3.91 ms");
        assert_eq!(number(24.5, "×"), "24.5×");
        assert_eq!(number(0.0, ""), "0");
    }
}
