//! The closed error taxonomy: seven codes, one body shape, three stable
//! message prefixes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The seven error codes. Closed: adding or changing one is a breaking
/// change of the contract.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The input is malformed or breaks a rule the caller can fix.
    ValidationFailed,
    /// No credentials, or credentials that are not valid.
    Unauthorized,
    /// Valid credentials without the right to do this.
    Forbidden,
    /// The thing does not exist, or is not the caller's (indistinguishable).
    NotFound,
    /// The thing is in a state that does not allow this (already done, stale).
    Conflict,
    /// Too many requests; retry later.
    RateLimited,
    /// A failure no caller can act on. The message is generic.
    Internal,
}

impl ErrorCode {
    /// Every code, in taxonomy order.
    pub const ALL: [ErrorCode; 7] = [
        ErrorCode::ValidationFailed,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::Conflict,
        ErrorCode::RateLimited,
        ErrorCode::Internal,
    ];

    /// The wire name (`snake_case`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ValidationFailed => "validation_failed",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP status every non-protocol HTTP route answers with.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::ValidationFailed => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict => 409,
            ErrorCode::RateLimited => 429,
            ErrorCode::Internal => 500,
        }
    }

    /// Parse a wire name.
    pub fn from_wire(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified failure. Serialises (through [`ErrorBody`]) as
/// `{"error":{"code":…,"message":…,"details":…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// The taxonomy code; branch on this, never on the message.
    pub code: ErrorCode,
    /// Human-readable text. May be reworded in any release, except for the
    /// stable prefixes in [`prefixes`].
    pub message: String,
    /// Optional structured context (for `validation_failed`: the offending
    /// fields). Never a stack trace or SQL text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// The error body every non-protocol surface returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    pub error: ToolError,
}

/// Build a [`ToolError`].
pub fn tool_error(
    code: ErrorCode,
    message: impl Into<String>,
    details: Option<Value>,
) -> ToolError {
    ToolError {
        code,
        message: message.into(),
        details,
    }
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        tool_error(code, message, None)
    }
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ValidationFailed, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }
    pub fn rate_limited(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::RateLimited, message)
    }
    /// The generic internal error. The cause belongs in the log, not here.
    pub fn internal() -> Self {
        Self::new(ErrorCode::Internal, "Internal server error.")
    }
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
    /// The `{"error": {...}}` body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.clone(),
        }
    }
    /// The body as a JSON value.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.body()).expect("error body serialises")
    }
    /// Does the message carry this stable prefix?
    pub fn has_prefix(&self, prefix: prefixes::Prefix) -> bool {
        prefix.matches(&self.message)
    }
}

/// The stable message prefixes. They are part of the contract: match them
/// with `starts_with`, never the text after them.
pub mod prefixes {
    /// A write with no resolvable target.
    pub const SCOPE_TARGET_REQUIRED: &str = "scope_target_required:";
    /// A `project_hint` that resolves to no project.
    pub const PROJECT_HINT_UNRESOLVABLE: &str = "project_hint_unresolvable:";
    /// The content guard found a secret.
    pub const SECRET_CONTENT_REJECTED: &str = "secret_content_rejected:";

    /// The three prefixes as a closed set.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Prefix {
        ScopeTargetRequired,
        ProjectHintUnresolvable,
        SecretContentRejected,
    }

    impl Prefix {
        pub const ALL: [Prefix; 3] = [
            Prefix::ScopeTargetRequired,
            Prefix::ProjectHintUnresolvable,
            Prefix::SecretContentRejected,
        ];
        /// The prefix text, colon included.
        pub const fn as_str(self) -> &'static str {
            match self {
                Prefix::ScopeTargetRequired => SCOPE_TARGET_REQUIRED,
                Prefix::ProjectHintUnresolvable => PROJECT_HINT_UNRESOLVABLE,
                Prefix::SecretContentRejected => SECRET_CONTENT_REJECTED,
            }
        }
        /// Build a message: the prefix, a space, then the human text.
        pub fn message(self, text: impl AsRef<str>) -> String {
            format!("{} {}", self.as_str(), text.as_ref())
        }
        /// Does `message` start with this prefix?
        pub fn matches(self, message: &str) -> bool {
            message.starts_with(self.as_str())
        }
        /// Which prefix, if any, does `message` start with?
        pub fn of(message: &str) -> Option<Prefix> {
            Prefix::ALL.into_iter().find(|p| p.matches(message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serialises_exactly() {
        let e = tool_error(
            ErrorCode::Forbidden,
            "You do not have access to this scope",
            None,
        );
        assert_eq!(
            serde_json::to_string(&e.body()).unwrap(),
            r#"{"error":{"code":"forbidden","message":"You do not have access to this scope"}}"#
        );
        let d = e.clone().with_details(json!({"scope": "proj.x.y"}));
        assert_eq!(
            d.to_json(),
            json!({"error":{"code":"forbidden","message":"You do not have access to this scope","details":{"scope":"proj.x.y"}}})
        );
    }

    #[test]
    fn all_codes_round_trip_with_statuses() {
        let statuses = [400, 401, 403, 404, 409, 429, 500];
        for (code, status) in ErrorCode::ALL.into_iter().zip(statuses) {
            let wire = serde_json::to_value(code).unwrap();
            assert_eq!(wire, json!(code.as_str()));
            let back: ErrorCode = serde_json::from_value(wire).unwrap();
            assert_eq!(back, code);
            assert_eq!(ErrorCode::from_wire(code.as_str()), Some(code));
            assert_eq!(code.http_status(), status);
            let body = tool_error(code, "m", Some(json!({"k": 1}))).body();
            let again: ErrorBody =
                serde_json::from_str(&serde_json::to_string(&body).unwrap()).unwrap();
            assert_eq!(again, body);
        }
        assert!(serde_json::from_value::<ErrorCode>(json!("teapot")).is_err());
    }

    #[test]
    fn prefixes_build_and_match() {
        use prefixes::Prefix;
        let m = Prefix::SecretContentRejected.message("content contains a github-token");
        assert!(m.starts_with("secret_content_rejected: "));
        assert_eq!(Prefix::of(&m), Some(Prefix::SecretContentRejected));
        assert_eq!(Prefix::of("scope_target_required"), None);
        assert!(
            ToolError::validation(Prefix::ScopeTargetRequired.message("x"))
                .has_prefix(Prefix::ScopeTargetRequired)
        );
        assert_eq!(
            ToolError::internal().to_string(),
            "internal: Internal server error."
        );
    }
}
