//! Tool-call metrics: counts and latency per tool and transport, kept in
//! atomics (no lock on the call path) and rendered as Prometheus text.
//! Counts only — never user data.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use zm_contracts::{ErrorCode, ToolError, ToolName};

use crate::store::{Caller, Transport};

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Outcome slots: success, then one per error code.
const OUTCOMES: usize = 1 + ErrorCode::ALL.len();

#[derive(Debug, Default)]
struct Cell {
    outcomes: [AtomicU64; OUTCOMES],
    /// Read calls the client cancelled before they answered (not in
    /// `outcomes`: they answered nothing).
    cancelled: AtomicU64,
}

#[derive(Debug, Default)]
struct Latency {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// Counters of every (tool, transport, outcome) and a latency histogram
/// per tool.
#[derive(Debug)]
pub struct ToolMetrics {
    cells: Vec<Cell>,
    latency: Vec<Latency>,
}

impl Default for ToolMetrics {
    fn default() -> Self {
        ToolMetrics {
            cells: (0..ToolName::ALL.len() * Transport::ALL.len())
                .map(|_| Cell::default())
                .collect(),
            latency: (0..ToolName::ALL.len())
                .map(|_| Latency::default())
                .collect(),
        }
    }
}

fn outcome_slot(code: Option<ErrorCode>) -> usize {
    match code {
        None => 0,
        Some(c) => 1 + ErrorCode::ALL.iter().position(|x| *x == c).unwrap_or(0),
    }
}

impl ToolMetrics {
    fn cell(&self, tool: ToolName, transport: Transport) -> &Cell {
        &self.cells[tool as usize * Transport::ALL.len() + transport as usize]
    }

    pub(crate) fn record<T>(
        &self,
        tool: ToolName,
        caller: &Caller,
        result: &Result<T, ToolError>,
        started: Instant,
    ) {
        let code = result.as_ref().err().map(|e| e.code);
        self.cell(tool, caller.transport).outcomes[outcome_slot(code)]
            .fetch_add(1, Ordering::Relaxed);
        let elapsed = started.elapsed();
        let lat = &self.latency[tool as usize];
        let secs = elapsed.as_secs_f64();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                lat.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        lat.count.fetch_add(1, Ordering::Relaxed);
        lat.sum_micros.fetch_add(
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// A read call of `tool` that its client cancelled: stopped unanswered.
    pub(crate) fn record_cancelled(&self, tool: ToolName, caller: &Caller) {
        self.cell(tool, caller.transport)
            .cancelled
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Calls of `tool` over `transport` that their client cancelled and
    /// that stopped unanswered.
    pub fn cancelled(&self, tool: ToolName, transport: Transport) -> u64 {
        self.cell(tool, transport).cancelled.load(Ordering::Relaxed)
    }

    /// Calls of `tool` over `transport` that ended with `code` (`None`:
    /// succeeded).
    pub fn count(&self, tool: ToolName, transport: Transport, code: Option<ErrorCode>) -> u64 {
        self.cell(tool, transport).outcomes[outcome_slot(code)].load(Ordering::Relaxed)
    }

    /// Prometheus text exposition of every non-zero series.
    pub fn render(&self) -> String {
        let mut calls = String::new();
        let mut errors = String::new();
        let mut cancelled = String::new();
        for tool in ToolName::ALL {
            for transport in Transport::ALL {
                let cell = self.cell(*tool, *transport);
                let stopped = cell.cancelled.load(Ordering::Relaxed);
                if stopped > 0 {
                    let _ = writeln!(
                        cancelled,
                        "zm_tool_cancelled_total{{tool=\"{tool}\",transport=\"{}\"}} {stopped}",
                        transport.as_str()
                    );
                }
                let total: u64 = cell
                    .outcomes
                    .iter()
                    .map(|c| c.load(Ordering::Relaxed))
                    .sum();
                if total == 0 {
                    continue;
                }
                let labels = format!("tool=\"{tool}\",transport=\"{}\"", transport.as_str());
                let _ = writeln!(calls, "zm_tool_calls_total{{{labels}}} {total}");
                for code in ErrorCode::ALL {
                    let n = cell.outcomes[outcome_slot(Some(code))].load(Ordering::Relaxed);
                    if n > 0 {
                        let _ = writeln!(
                            errors,
                            "zm_tool_errors_total{{{labels},code=\"{}\"}} {n}",
                            code.as_str()
                        );
                    }
                }
            }
        }
        let mut out = String::new();
        out.push_str("# HELP zm_tool_calls_total Tool calls by tool and transport (mcp, rest, cli).\n# TYPE zm_tool_calls_total counter\n");
        out.push_str(&calls);
        out.push_str("# HELP zm_tool_errors_total Failed tool calls by tool, transport and error code.\n# TYPE zm_tool_errors_total counter\n");
        out.push_str(&errors);
        out.push_str("# HELP zm_tool_cancelled_total Read tool calls stopped unanswered because their client cancelled them, by tool and transport.\n# TYPE zm_tool_cancelled_total counter\n");
        out.push_str(&cancelled);
        out.push_str("# HELP zm_tool_duration_seconds Tool call latency, validation to response.\n# TYPE zm_tool_duration_seconds histogram\n");
        for tool in ToolName::ALL {
            let lat = &self.latency[*tool as usize];
            let count = lat.count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "zm_tool_duration_seconds_bucket{{tool=\"{tool}\",le=\"{le}\"}} {}",
                    lat.buckets[i].load(Ordering::Relaxed)
                );
            }
            let _ = writeln!(
                out,
                "zm_tool_duration_seconds_bucket{{tool=\"{tool}\",le=\"+Inf\"}} {count}"
            );
            let sum = lat.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(out, "zm_tool_duration_seconds_sum{{tool=\"{tool}\"}} {sum}");
            let _ = writeln!(
                out,
                "zm_tool_duration_seconds_count{{tool=\"{tool}\"}} {count}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_tool_transport_and_code() {
        let m = ToolMetrics::default();
        let mut caller = Caller::new("usr_x");
        caller.transport = Transport::Rest;
        let t = Instant::now();
        m.record::<()>(ToolName::Recall, &caller, &Ok(()), t);
        m.record::<()>(
            ToolName::Recall,
            &caller,
            &Err(ToolError::forbidden("no")),
            t,
        );
        caller.transport = Transport::Mcp;
        m.record::<()>(ToolName::Remember, &caller, &Ok(()), t);
        assert_eq!(m.count(ToolName::Recall, Transport::Rest, None), 1);
        assert_eq!(
            m.count(
                ToolName::Recall,
                Transport::Rest,
                Some(ErrorCode::Forbidden)
            ),
            1
        );
        assert_eq!(m.count(ToolName::Recall, Transport::Mcp, None), 0);
        let text = m.render();
        assert!(text.contains("zm_tool_calls_total{tool=\"recall\",transport=\"rest\"} 2"));
        assert!(text.contains(
            "zm_tool_errors_total{tool=\"recall\",transport=\"rest\",code=\"forbidden\"} 1"
        ));
        assert!(text.contains("zm_tool_calls_total{tool=\"remember\",transport=\"mcp\"} 1"));
        assert!(text.contains("zm_tool_duration_seconds_count{tool=\"recall\"} 2"));
        assert!(!text.contains("zm_tool_cancelled_total{"));
        m.record_cancelled(ToolName::Recall, &caller);
        assert_eq!(m.cancelled(ToolName::Recall, Transport::Mcp), 1);
        assert_eq!(m.cancelled(ToolName::Recall, Transport::Rest), 0);
        assert_eq!(m.count(ToolName::Recall, Transport::Mcp, None), 0);
        assert!(
            m.render()
                .contains("zm_tool_cancelled_total{tool=\"recall\",transport=\"mcp\"} 1")
        );
        assert!(text.contains("zm_tool_duration_seconds_bucket{tool=\"recall\",le=\"+Inf\"} 2"));
    }
}
