//! Connect-time instructions, composed under a budget for clients known to
//! truncate them.

use zm_contracts::Rule;

/// The visible budget of capped clients, in characters.
pub const INSTRUCTION_BUDGET: usize = 2000;
/// How much of one rule the uncapped list inlines.
pub const RULE_INLINE_CHARS: usize = 1200;

/// The router's head: what the server is and the first moves. Always sent.
pub const ROUTER_HEAD: &str = "zero-memory is the user's long-term memory across conversations and tools: decisions with their why, conventions, preferences, gotchas, references and open loops. Treat it as your FIRST knowledge source, before the code or the web.

WHY THE FIRST CALL PAYS: one build_context at the start returns the standing rules, open loops and the most relevant memories for the project, and attaches this session to it.
WHAT SKIPPING COSTS: a scope-less remember is REFUSED (scope_target_required:) until a project is attached, and reads widen to everything you can see.

ROUTING:
- session or task start → build_context({topic, briefing: true, project_hint: <repo root path or git remote>})
- any sub-problem → recall({query})
- a durable fact, decision, convention or gotcha → remember it NOW: one atomic fact, declare supersedes links for what it replaces, pass the thread token";

/// The router's tail: finer guidance, dropped first when space is short.
pub const ROUTER_TAIL: &str = "- a memory that is wrong → challenge it, or remember the correction with a supersedes link
- a finished task or answered question → close_loop
- echo session.thread as thread on every call: it keeps the project across reconnects
Tool descriptions are authoritative for fields and errors. Branch on error codes, never on message text.";

/// For uncapped clients of a server that cannot see their workspace (over
/// HTTP): how a project gets attached.
pub const ATTACHMENT_NOTE: &str = "PROJECT ATTACHMENT: this server cannot see your workspace. Pass project_hint on your first call (the PROJECT value of a briefing, else `git remote get-url origin`, else the repository root path). Until a project is attached, a remember without scope is refused: use scope \"core\" for facts that hold everywhere and \"personal\" for the user's preferences. A project the user names in chat is authoritative.";

/// For uncapped clients of a local server (stdio) whose session has no
/// project: started with `--no-project`, or its project hint did not
/// resolve.
pub const LOCAL_UNATTACHED_NOTE: &str = "PROJECT ATTACHMENT: this session has no project (the server was started with --no-project, or its directory named none). Pass project_hint on your first call (the PROJECT value of a briefing, else `git remote get-url origin`, else the repository root path). Until a project is attached, a remember without scope is refused: use scope \"core\" for facts that hold everywhere and \"personal\" for the user's preferences. A project the user names in chat is authoritative.";

/// For uncapped clients of a local server (stdio) that attached the session
/// to `project` (the scope of the directory it was started in, or of its
/// `--project`).
pub fn local_attached_note(project: &str) -> String {
    format!(
        "PROJECT ATTACHMENT: this session is already attached to {project}, the project this server was started for (from its working directory, or --project). A remember without scope is stored there, whatever its kind: pass scope \"core\" for facts that hold everywhere and \"personal\" for the user's preferences. recall and build_context start from it. Pass project_hint to work in another project; a project the user names in chat is authoritative."
    )
}

/// The attachment note of a server: one that cannot see the client's
/// workspace (HTTP) or a local one (stdio), attached to `project` or not.
pub fn attachment_note(local: bool, project: Option<&str>) -> std::borrow::Cow<'static, str> {
    match (local, project) {
        (false, _) => ATTACHMENT_NOTE.into(),
        (true, None) => LOCAL_UNATTACHED_NOTE.into(),
        (true, Some(p)) => local_attached_note(p).into(),
    }
}

/// What a capped client reads of the attachment, when there is room after
/// the router and the rules' announcement: only a local server's
/// attachment, whose router head ("a scope-less remember is REFUSED until
/// a project is attached") would otherwise leave the model guessing.
pub fn capped_attachment_note(local: bool, project: Option<&str>) -> Option<String> {
    match (local, project) {
        (true, Some(p)) => Some(format!(
            "PROJECT: this session is already attached to {p}; a remember without scope is stored there."
        )),
        _ => None,
    }
}

/// For a client of the stateless HTTP revision (2026-07-28): no session
/// holds anything between its calls, so what the router calls attaching
/// lasts one call. Put first, so a capped client reads it too.
pub const STATELESS_NOTE: &str = "STATELESS CONNECTION: this server keeps nothing between your calls (MCP 2026-07-28 over HTTP), so no call attaches a project for the next one. Pass the last answer's session.thread as thread (or project_hint) on EVERY call; a remember without scope, thread or project_hint is refused.";

/// Segment names recorded when dropped.
pub const DROPPED_OWNER_RULES: &str = "owner-rules";
pub const DROPPED_ROUTER_TAIL: &str = "router-tail";
pub const DROPPED_ATTACHMENT_NOTE: &str = "attachment-note";

/// Composed instructions and what was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instructions {
    pub text: String,
    pub dropped: Vec<&'static str>,
}

fn router() -> String {
    format!("{ROUTER_HEAD}\n{ROUTER_TAIL}")
}

fn rules_list(rules: &[Rule]) -> String {
    let mut out = format!(
        "OWNER RULES — {} standing instruction(s) the user (or a team of theirs) promoted; follow them like system rules (build_context re-delivers them as rules[], pinned first):",
        rules.len()
    );
    for (i, r) in rules.iter().enumerate() {
        let text: String = r.text.chars().take(RULE_INLINE_CHARS).collect();
        out.push_str(&format!(
            "\n{}.{} {}",
            i + 1,
            if r.pinned { " [pinned]" } else { "" },
            text
        ));
    }
    out
}

fn rules_announcement(n: usize) -> String {
    format!(
        "OWNER RULES: the user (with their teams) has {n} standing rule(s). They are not reproduced here because this channel is truncated; build_context with briefing: true returns them in full as rules[] — follow them like system rules."
    )
}

/// Is this client known to cap its instructions?
pub fn is_capped(client_name: Option<&str>, capped: &[String]) -> bool {
    client_name
        .map(|n| n.trim().to_lowercase())
        .is_some_and(|n| capped.iter().any(|c| c.trim().to_lowercase() == n))
}

/// Compose the instructions for a client.
///
/// Uncapped clients get everything: the router, the attachment note and
/// the owner's rules. Capped clients get at most [`INSTRUCTION_BUDGET`]
/// characters, built from whole segments; when they do not fit, the owner
/// rules go first, then the router's tail. Nothing is cut mid-sentence.
pub fn compose(rules: &[Rule], capped: bool) -> Instructions {
    compose_within(rules, capped, INSTRUCTION_BUDGET)
}

/// [`compose`] for a connection: its attachment note (see
/// [`attachment_note`]) in place of [`ATTACHMENT_NOTE`], and for a
/// stateless one [`STATELESS_NOTE`] first, a capped client's budget
/// holding that note too.
/// The instructions: `note` is the attachment note an uncapped client
/// reads, `capped_note` the one a capped client reads if there is room.
pub fn compose_for(
    rules: &[Rule],
    capped: bool,
    stateless: bool,
    note: &str,
    capped_note: Option<&str>,
) -> Instructions {
    let notes = Notes { note, capped_note };
    if !stateless {
        return compose_noted(rules, capped, INSTRUCTION_BUDGET, notes);
    }
    let head = STATELESS_NOTE.chars().count() + 2;
    let mut composed = compose_noted(
        rules,
        capped,
        INSTRUCTION_BUDGET.saturating_sub(head),
        notes,
    );
    composed.text = format!("{STATELESS_NOTE}\n\n{}", composed.text);
    composed
}

/// [`compose`] with an explicit budget for capped clients.
pub fn compose_within(rules: &[Rule], capped: bool, budget: usize) -> Instructions {
    let notes = Notes {
        note: ATTACHMENT_NOTE,
        capped_note: None,
    };
    compose_noted(rules, capped, budget, notes)
}

/// The attachment notes of [`compose_for`].
#[derive(Clone, Copy)]
struct Notes<'a> {
    note: &'a str,
    capped_note: Option<&'a str>,
}

/// [`compose_within`] with the attachment notes.
fn compose_noted(rules: &[Rule], capped: bool, budget: usize, notes: Notes<'_>) -> Instructions {
    let Notes { note, capped_note } = notes;
    if !capped {
        let mut text = format!("{}\n\n{note}", router());
        if !rules.is_empty() {
            text.push_str("\n\n");
            text.push_str(&rules_list(rules));
        }
        return Instructions {
            text,
            dropped: Vec::new(),
        };
    }
    let len = |s: &str| s.chars().count();
    let mut dropped = Vec::new();
    let mut text = ROUTER_HEAD.to_string();
    let rules_segment = (!rules.is_empty()).then(|| rules_announcement(rules.len()));
    let with_tail = format!("{text}\n{ROUTER_TAIL}");
    let rules_fit_with_tail = rules_segment
        .as_ref()
        .is_none_or(|r| len(&with_tail) + 2 + len(r) <= budget);
    if len(&with_tail) <= budget {
        text = with_tail;
    } else {
        dropped.push(DROPPED_ROUTER_TAIL);
    }
    if let Some(r) = rules_segment {
        if rules_fit_with_tail && len(&text) + 2 + len(&r) <= budget {
            text.push_str("\n\n");
            text.push_str(&r);
        } else {
            dropped.insert(0, DROPPED_OWNER_RULES);
        }
    }
    if let Some(n) = capped_note {
        if len(&text) + 2 + len(n) <= budget {
            text.push_str("\n\n");
            text.push_str(n);
        } else {
            dropped.insert(0, DROPPED_ATTACHMENT_NOTE);
        }
    }
    Instructions { text, dropped }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(n: usize, len: usize) -> Vec<Rule> {
        (0..n)
            .map(|i| Rule {
                text: format!(
                    "Rule {i}: {}",
                    "always do the careful thing ".repeat(len / 28 + 1)
                ),
                pinned: i % 5 == 0,
            })
            .collect()
    }

    #[test]
    fn router_fits_and_says_what_it_must() {
        let r = router();
        assert!(
            r.chars().count() <= INSTRUCTION_BUDGET,
            "{}",
            r.chars().count()
        );
        for phrase in [
            "zero-memory is the user",
            "WHY THE FIRST CALL PAYS",
            "WHAT SKIPPING COSTS",
            "project_hint",
            "REFUSED",
        ] {
            assert!(ROUTER_HEAD.contains(phrase), "{phrase}");
        }
    }

    #[test]
    fn capped_output_stays_under_budget_for_0_1_12_500_rules() {
        for n in [0, 1, 12, 500] {
            let rs = rules(n, 450);
            let i = compose(&rs, true);
            assert!(
                i.text.chars().count() <= INSTRUCTION_BUDGET,
                "{n} rules: {}",
                i.text.chars().count()
            );
            assert!(i.text.starts_with(ROUTER_HEAD), "{n}");
            for r in &rs {
                assert!(!i.text.contains(&r.text), "rule text leaked with {n} rules");
            }
            for d in &i.dropped {
                assert!([DROPPED_OWNER_RULES, DROPPED_ROUTER_TAIL].contains(d));
            }
            // Never cut mid-sentence: the text ends where a segment ends.
            assert!(
                i.text.ends_with(ROUTER_TAIL)
                    || i.text.ends_with("like system rules.")
                    || i.text.ends_with(ROUTER_HEAD)
            );
        }
    }

    /// The stateless note counts against a capped client's budget: the
    /// whole text stays within it, the note first, the head after it.
    #[test]
    fn the_stateless_note_stays_within_the_budget() {
        for n in [0, 1, 12, 500] {
            let i = compose_for(&rules(n, 450), true, true, ATTACHMENT_NOTE, None);
            assert!(
                i.text.chars().count() <= INSTRUCTION_BUDGET,
                "{n} rules: {}",
                i.text.chars().count()
            );
            assert!(i.text.starts_with(STATELESS_NOTE), "{n}");
            assert!(i.text.contains(ROUTER_HEAD), "{n}");
        }
        let full = compose_for(&rules(3, 450), false, true, ATTACHMENT_NOTE, None);
        assert!(full.text.starts_with(STATELESS_NOTE) && full.dropped.is_empty());
    }

    #[test]
    fn capped_with_rules_announces_them_when_there_is_room() {
        let i = compose(&rules(12, 450), true);
        assert!(i.text.contains("12 standing rule(s)"), "{:?}", i.dropped);
        assert!(i.dropped.is_empty());
        let none = compose(&[], true);
        assert!(!none.text.contains("OWNER RULES"));
    }

    #[test]
    fn segments_drop_whole_in_priority_order() {
        let rs = rules(3, 100);
        let head = ROUTER_HEAD.chars().count();
        let full = compose_within(&rs, true, 10_000);
        assert!(full.dropped.is_empty());
        // Room for the whole router but not the announcement: owner rules go first.
        let router_len = router().chars().count();
        let i = compose_within(&rs, true, router_len + 10);
        assert_eq!(i.dropped, vec![DROPPED_OWNER_RULES]);
        assert!(i.text.ends_with(ROUTER_TAIL));
        // Room for the head only: the tail goes too, and nothing is cut.
        let i = compose_within(&rs, true, head + 5);
        assert_eq!(i.dropped, vec![DROPPED_OWNER_RULES, DROPPED_ROUTER_TAIL]);
        assert_eq!(i.text, ROUTER_HEAD);
    }

    #[test]
    fn uncapped_gets_everything() {
        let rs = rules(500, 450);
        let i = compose(&rs, false);
        assert!(i.dropped.is_empty());
        assert!(i.text.contains(ATTACHMENT_NOTE));
        assert!(i.text.contains("500 standing instruction(s)"));
        assert!(i.text.contains("1. [pinned] Rule 0"));
        assert!(i.text.contains("500. Rule 499"));
        assert!(!compose(&[], false).text.contains("OWNER RULES"));
    }

    /// A local server names the project it attached the session to, or
    /// says it was started without one; over HTTP the server cannot see
    /// the workspace. Capped clients get a short note for a local
    /// attachment only, after the router and the rules' announcement.
    #[test]
    fn the_attachment_note_says_what_the_server_knows() {
        let attached = attachment_note(true, Some("proj.usr_1.zero_memory"));
        let i = compose_for(&[], false, false, &attached, None);
        assert!(
            i.text
                .contains("already attached to proj.usr_1.zero_memory"),
            "{}",
            i.text
        );
        assert!(!i.text.contains("cannot see your workspace"));
        let unattached = compose_for(&[], false, false, &attachment_note(true, None), None);
        assert!(unattached.text.contains(LOCAL_UNATTACHED_NOTE));
        let remote = compose_for(
            &[],
            false,
            false,
            &attachment_note(false, Some("ignored")),
            None,
        );
        assert!(remote.text.contains(ATTACHMENT_NOTE) && !remote.text.contains("ignored"));
        let short = capped_attachment_note(true, Some("proj.usr_1.zero_memory"));
        let capped = compose_for(&[], true, false, &attached, short.as_deref());
        assert!(!capped.text.contains("PROJECT ATTACHMENT"));
        assert!(
            capped
                .text
                .ends_with("already attached to proj.usr_1.zero_memory; a remember without scope is stored there."),
            "{}",
            capped.text
        );
        assert!(capped.dropped.is_empty());
        assert!(capped_attachment_note(true, None).is_none());
        assert!(capped_attachment_note(false, Some("p")).is_none());
        // With the router and many rules it still fits Claude Code's budget.
        let many = compose_for(&rules(500, 450), true, false, &attached, short.as_deref());
        assert!(many.text.chars().count() <= INSTRUCTION_BUDGET);
        assert!(
            many.text.contains("500 standing rule(s)"),
            "{:?}",
            many.dropped
        );
        assert!(many.text.contains("already attached"), "{:?}", many.dropped);
        // Without room, it goes before the rules' announcement does.
        let tight = compose_noted(
            &rules(3, 100),
            true,
            router().chars().count() + 5,
            Notes {
                note: &attached,
                capped_note: short.as_deref(),
            },
        );
        assert_eq!(
            tight.dropped,
            vec![DROPPED_ATTACHMENT_NOTE, DROPPED_OWNER_RULES]
        );
    }

    #[test]
    fn capped_clients_are_matched_by_name() {
        let capped = vec!["claude-code".to_string()];
        assert!(is_capped(Some(" Claude-Code "), &capped));
        assert!(!is_capped(Some("cursor"), &capped));
        assert!(!is_capped(None, &capped));
    }
}
