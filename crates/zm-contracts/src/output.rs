//! What a tool's output tells a transport, read from the typed output —
//! never by key from its JSON: the session state to keep, the memories to
//! link (ranked, then flat), and the facts a footer is written from.

use crate::catalogue::ToolOutput;
use crate::ids::MemoryId;
use crate::shapes::{Rule, SessionState};

/// The facts a human-readable footer is composed from.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FooterFacts<'a> {
    /// The project a read was pinned to.
    pub project_scope: Option<&'a str>,
    /// Why a `core`/`personal` write landed in a project instead.
    pub routed_to_project: Option<&'a str>,
    /// The session state after the call.
    pub session: Option<&'a SessionState>,
    /// The standing rules a briefing delivered.
    pub rules: &'a [Rule],
}

impl ToolOutput {
    /// The session state after the call (`remember`, `recall`,
    /// `build_context`): the attachment a transport keeps for the
    /// connection, already decided by the store (first attach wins).
    pub fn session(&self) -> Option<&SessionState> {
        match self {
            ToolOutput::Remember(o) => Some(&o.session),
            ToolOutput::Recall(o) => Some(&o.session),
            ToolOutput::BuildContext(o) => Some(&o.session),
            _ => None,
        }
    }

    /// The session state, for a transport that keeps another attachment
    /// than the call saw (a parallel call attached the session first) or
    /// none at all (a stateless request) to report what it keeps.
    pub fn session_mut(&mut self) -> Option<&mut SessionState> {
        match self {
            ToolOutput::Remember(o) => Some(&mut o.session),
            ToolOutput::Recall(o) => Some(&mut o.session),
            ToolOutput::BuildContext(o) => Some(&mut o.session),
            _ => None,
        }
    }

    /// The thread a call *issued* — a briefing's assertion — which the
    /// connection then keeps for calls that echo none. (`recall` and
    /// `remember` only echo a thread; a connection does not adopt it.)
    pub fn issued_thread(&self) -> Option<&str> {
        match self {
            ToolOutput::BuildContext(o) => o.session.thread.as_deref(),
            _ => None,
        }
    }

    /// The ranked hits of a read, best first.
    pub fn ranked_ids(&self) -> Vec<&MemoryId> {
        match self {
            ToolOutput::Recall(o) => o.memories.iter().map(|m| &m.id).collect(),
            ToolOutput::BuildContext(o) => o.memories.iter().map(|m| &m.id).collect(),
            _ => Vec::new(),
        }
    }

    /// Memories a read reached besides its hits (recall's related stubs,
    /// a briefing's linked memories), unranked.
    pub fn linked_ids(&self) -> Vec<&MemoryId> {
        match self {
            ToolOutput::Recall(o) => o.related.iter().map(|m| &m.id).collect(),
            ToolOutput::BuildContext(o) => o.linked_memories.iter().map(|m| &m.id).collect(),
            _ => Vec::new(),
        }
    }

    /// The facts a footer is written from.
    pub fn footer_facts(&self) -> FooterFacts<'_> {
        match self {
            ToolOutput::Remember(o) => FooterFacts {
                routed_to_project: o.routed_to_project.as_deref(),
                session: Some(&o.session),
                ..FooterFacts::default()
            },
            ToolOutput::Recall(o) => FooterFacts {
                project_scope: o.project_scope.as_deref(),
                session: Some(&o.session),
                ..FooterFacts::default()
            },
            ToolOutput::BuildContext(o) => FooterFacts {
                project_scope: o.project_scope.as_deref(),
                session: Some(&o.session),
                rules: &o.rules,
                ..FooterFacts::default()
            },
            _ => FooterFacts::default(),
        }
    }

    /// The output as its contract JSON.
    pub fn to_json(&self) -> serde_json::Value {
        // Every output is a plain struct of strings, numbers and lists:
        // serialising it cannot fail.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}
