//! Insight: what the agents wrote over time (by kind, per week), where the
//! live memories are (by scope), who wrote them (by agent), and how old
//! the open loops are — as server-rendered SVG charts, each with a table
//! of the same figures for screen readers and for copying.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use zm_contracts::MemoryKind;

use super::Signed;
use super::memories::scope_label;
use crate::state::AppState;

const WEEKS: i64 = 12;

/// The characters of a bar's label that fit its column (12 px text
/// before the bars start at 210).
const LABEL_CHARS: usize = 30;

/// `text` cut to `max` characters, the cut marked with `…`.
fn clipped(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// Horizontal bars: one per (label, value); with a table of the same
/// figures, its columns headed `heads` (what is labelled, what is counted).
fn bars(id: &str, title: &str, heads: (&str, &str), rows: &[(String, u64)]) -> Markup {
    let max = rows.iter().map(|(_, n)| *n).max().unwrap_or(1).max(1);
    let row_h = 22;
    let height = rows.len().max(1) * row_h + 8;
    html! {
        figure.chart {
            svg id=(id) role="img" aria-labelledby=(format!("{id}-title")) viewBox=(format!("0 0 600 {height}")) width="100%" preserveAspectRatio="xMinYMin meet" {
                title id=(format!("{id}-title")) { (title) }
                @for (i, (label, n)) in rows.iter().enumerate() {
                    @let y = i * row_h + 4;
                    @let w = (*n * 330 / max).max(1);
                    // Cut to the label column (the full name on hover,
                    // and in the table below).
                    text x="0" y=(y + 15) class="label" {
                        title { (label) }
                        (clipped(label, LABEL_CHARS))
                    }
                    rect x="210" y=(y + 3) width=(w) height="15" class="bar" {}
                    text x=(215 + w) y=(y + 15) class="value" { (n) }
                }
            }
            figcaption { (title) }
        }
        table.sr-table {
            caption { (title) }
            thead { tr { th scope="col" { (heads.0) } th scope="col" { (heads.1) } } }
            tbody {
                @for (label, n) in rows {
                    tr { td { (label) } td { (n) } }
                }
            }
        }
    }
}

/// The colours the stylesheet has for stacked series (`k0` … `k8`).
const SERIES: usize = 9;

/// `(week, value, count)` rows with at most [`SERIES`] values: the
/// largest ones by total, the rest summed as "other". Returns the series
/// labels (display form) in order and the relabelled rows.
fn top_series(
    rows: &[(i64, String, u64)],
    label: impl Fn(&str) -> String,
) -> (Vec<String>, Vec<(i64, String, u64)>) {
    let mut totals: Vec<(String, u64)> = Vec::new();
    for (_, v, n) in rows {
        match totals.iter_mut().find(|(t, _)| t == v) {
            Some(t) => t.1 += n,
            None => totals.push((v.clone(), *n)),
        }
    }
    totals.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let keep = if totals.len() > SERIES {
        SERIES - 1
    } else {
        SERIES
    };
    let kept: Vec<&str> = totals.iter().take(keep).map(|(v, _)| v.as_str()).collect();
    let mut labels: Vec<String> = kept.iter().map(|v| label(v)).collect();
    if totals.len() > keep {
        labels.push("other".into());
    }
    let mut out: Vec<(i64, String, u64)> = Vec::new();
    for (w, v, n) in rows {
        let l = match kept.iter().position(|k| k == v) {
            Some(i) => labels[i].clone(),
            None => "other".into(),
        };
        match out.iter_mut().find(|(ow, ol, _)| ow == w && *ol == l) {
            Some(o) => o.2 += n,
            None => out.push((*w, l, *n)),
        }
    }
    (labels, out)
}

/// Weekly columns, the last [`WEEKS`] weeks, stacked by series (at most
/// [`SERIES`] labels); with a table of the weekly totals.
fn weekly(
    id: &str,
    title: &str,
    series: &[String],
    weeks: &[(i64, String, u64)],
    now: i64,
) -> Markup {
    const WEEK_MS: i64 = zm_store::usage::WEEK_MS;
    let first = (now.div_euclid(WEEK_MS) - WEEKS + 1) * WEEK_MS;
    let starts: Vec<i64> = (0..WEEKS).map(|i| first + i * WEEK_MS).collect();
    let total = |w: i64| {
        weeks
            .iter()
            .filter(|(s, _, _)| *s == w)
            .map(|(_, _, n)| *n)
            .sum::<u64>()
    };
    let max = starts.iter().map(|w| total(*w)).max().unwrap_or(1).max(1);
    let (col_w, chart_h) = (44u64, 160u64);
    // (x, y, height, series index, label, count) of every stacked segment.
    let mut segments: Vec<(u64, u64, u64, usize, &str, u64)> = Vec::new();
    for (i, w) in starts.iter().enumerate() {
        let x = 40 + col_w * i as u64;
        let mut y = chart_h;
        for (k, label) in series.iter().enumerate() {
            let n = weeks
                .iter()
                .find(|(s, v, _)| s == w && v == label)
                .map_or(0, |(_, _, n)| *n);
            if n > 0 {
                let h = (n * (chart_h - 10) / max).max(1);
                y -= h.min(y);
                segments.push((x, y, h, k, label, n));
            }
        }
    }
    html! {
        figure.chart {
            svg id=(id) role="img" aria-labelledby=(format!("{id}-title")) viewBox=(format!("0 0 {} {}", 40 + col_w * WEEKS as u64, chart_h + 30)) width="100%" preserveAspectRatio="xMinYMin meet" {
                title id=(format!("{id}-title")) { (title) ", the last " (WEEKS) " weeks" }
                @for (x, y, h, k, label, n) in &segments {
                    rect x=(x + 4) y=(y) width=(col_w - 8) height=(h) class=(format!("k{k}")) { title { (label) ": " (n) } }
                }
                @for (i, w) in starts.iter().enumerate() {
                    text x=(40 + col_w * i as u64 + 6) y=(chart_h + 16) class="label" { (zm_store::clock::rfc3339(*w).get(5..10).unwrap_or("")) }
                }
                text x="0" y="12" class="value" { (max) }
            }
            figcaption {
                (title) ": "
                @for (k, label) in series.iter().enumerate() { span class=(format!("swatch k{k}")) {} " " (label) " " }
            }
        }
        table.sr-table {
            caption { (title) }
            thead { tr { th { "Week of" } @for label in series { th { (label) } } th { "Total" } } }
            tbody {
                @for w in &starts {
                    tr {
                        td { (zm_store::clock::rfc3339(*w).get(..10).unwrap_or("")) }
                        @for label in series {
                            td { (weeks.iter().find(|(s, v, _)| s == w && v == label).map_or(0, |(_, _, n)| *n)) }
                        }
                        td { (total(*w)) }
                    }
                }
            }
        }
    }
}

/// `GET /insight`.
pub(crate) async fn index(State(state): State<AppState>, signed: Signed) -> Response {
    let caller = signed.caller();
    // Recall counts wait in memory for up to 30 s: write them now so the
    // page is current (this instance's; another instance writes its own).
    if let Err(e) = state.store.flush_usage().await {
        tracing::warn!(error = %e.message, "writing recall counts failed");
    }
    let usage = match state.store.usage_figures(&caller, WEEKS).await {
        Ok(u) => u,
        Err(e) => return signed.error(&signed.fail(e)),
    };
    let data = match state.store.insight(&caller, WEEKS).await {
        Ok(d) => d,
        Err(e) => {
            return signed.error(&signed.fail(e));
        }
    };
    let now = state.store.clock().now_ms();
    let mut scopes: Vec<(String, u64)> = data
        .by_scope
        .iter()
        .map(|(s, n)| (scope_label(s, &caller.user_id), *n))
        .collect();
    // Past the charted ones, summed: nothing is left out unsaid.
    if data.other_scopes > 0 {
        scopes.push(("(all other scopes)".into(), data.other_scopes));
    }
    let mut agents: Vec<(String, u64)> = data
        .by_agent
        .iter()
        .map(|(a, n)| {
            (
                if a.is_empty() {
                    "(none recorded)".into()
                } else {
                    a.clone()
                },
                *n,
            )
        })
        .collect();
    if data.other_agents > 0 {
        agents.push(("(all other agents)".into(), data.other_agents));
    }
    let ages: Vec<(String, u64)> = ["under a week", "under a month", "under a quarter", "older"]
        .iter()
        .zip(data.open_loop_ages)
        .map(|(l, n)| ((*l).to_string(), n))
        .collect();
    let kinds: Vec<String> = MemoryKind::ALL
        .iter()
        .map(|k| k.as_str().to_string())
        .collect();
    let (scope_series, weekly_scopes) =
        top_series(&data.weekly_scopes, |s| scope_label(s, &caller.user_id));
    let recalls: Vec<(i64, String, u64)> = usage
        .activity
        .iter()
        .map(|(w, a, n, _)| (*w, a.clone(), *n))
        .collect();
    let (agent_series, recalls) = top_series(&recalls, str::to_string);
    let mut recall_totals: Vec<(String, u64, u64)> = Vec::new();
    for (_, agent, n, hits) in &usage.activity {
        match recall_totals.iter_mut().find(|(a, _, _)| a == agent) {
            Some(t) => {
                t.1 += n;
                t.2 += hits;
            }
            None => recall_totals.push((agent.clone(), *n, *hits)),
        }
    }
    recall_totals.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let body = html! {
        h1 { "Insight" }
        h2 { "Written over time" }
        (weekly("weekly", "Memories written per week, by kind", &kinds, &data.weekly, now))
        (weekly("weekly-scopes", "Memories written per week, by scope", &scope_series, &weekly_scopes, now))
        h2 { "Recall activity by agent" }
        @if recall_totals.is_empty() {
            p.muted #recall-activity { "No recall by your agents counted yet." }
        } @else {
            (weekly("recalls-weekly", "Your agents' recalls per week, by agent", &agent_series, &recalls, now))
            table #recall-activity {
                caption { "Recalls by agent, the last " (WEEKS) " weeks" }
                thead { tr { th scope="col" { "Agent" } th scope="col" { "Recalls" } th scope="col" { "Memories returned" } th scope="col" { "Per recall" } } }
                tbody {
                    @for (agent, n, hits) in &recall_totals {
                        tr { td { (agent) } td { (n) } td { (hits) } td { (format!("{:.1}", *hits as f64 / (*n).max(1) as f64)) } }
                    }
                }
            }
        }
        h2 { "Live memories by scope" }
        (bars("by-scope", "Live memories by scope", ("Scope", "Live memories"), &scopes))
        h2 { "Memories by agent" }
        (bars("by-agent", "Memories by writing agent", ("Agent", "Memories"), &agents))
        h2 { "Most recalled" }
        p.muted { "By your agents: a teammate's recalls of a team memory are theirs." }
        @if usage.most.is_empty() { p.muted #most-recalled { "No recall counted yet." } } @else {
            ol #most-recalled { @for (id, text, n) in &usage.most { li { a href=(signed.href(&format!("/memories/{id}"))) { bdi { (text) } } " — " (n) " recall" @if *n != 1 { "s" } } } }
        }
        h2 { "Never recalled" }
        p #never-recalled { strong { (usage.never) } " live memories your agents have not recalled yet." @if !usage.never_oldest.is_empty() { " The oldest:" } }
        @if !usage.never_oldest.is_empty() {
            ul { @for (id, text) in &usage.never_oldest { li { a href=(signed.href(&format!("/memories/{id}"))) { (text) } } } }
        }
        h2 { "Open loops by age" }
        (bars("loop-ages", "Live tasks and open questions by age", ("Age", "Open loops"), &ages))
        p.muted { "Open loops are closed from a memory's page (" em { "Close the loop" } ") or by an agent's " code { "close_loop" } "." }
    };
    signed.page(StatusCode::OK, "Insight", "/insight", body)
}
