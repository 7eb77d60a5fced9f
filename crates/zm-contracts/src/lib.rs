//! # zm-contracts — the zero-memory contract
//!
//! The one source of truth for every tool input and output, the error
//! taxonomy, ids, scopes, resource URIs, the tool catalogue and the
//! deprecations ledger. Everything else in zero-memory (MCP, REST, OpenAPI,
//! docs, the dashboard) derives from this crate; other people's Rust code
//! can depend on it too.
//!
//! ## Validating a tool call and branching on the error code
//!
//! ```
//! use serde_json::json;
//! use zm_contracts::{ErrorCode, RememberInput, MemoryKind, parse_input, prefixes::Prefix};
//!
//! // A good input: typed, defaults filled in.
//! let ok: RememberInput = parse_input(&json!({
//!     "content": "The API uses snake_case JSON.",
//!     "kind": "convention",
//!     "scope": "core"
//! })).expect("valid");
//! assert_eq!(ok.kind, MemoryKind::Convention);
//!
//! // A bad one: every offending field is named in `details.fields`.
//! let err = parse_input::<RememberInput>(&json!({
//!     "content": "",
//!     "kind": "rumour",
//!     "colour": "blue"
//! })).unwrap_err();
//! match err.code {
//!     ErrorCode::ValidationFailed => {
//!         let fields = err.details.as_ref().unwrap()["fields"].as_array().unwrap();
//!         let paths: Vec<&str> = fields.iter().map(|f| f["path"].as_str().unwrap()).collect();
//!         assert!(paths.contains(&"content") && paths.contains(&"kind") && paths.contains(&"colour"));
//!     }
//!     ErrorCode::NotFound | ErrorCode::Conflict => unreachable!("not for a parse"),
//!     other => panic!("unexpected {other}"),
//! }
//!
//! // Refusals with a stable prefix are matched on the prefix, never the text.
//! let refused = zm_contracts::ToolError::validation(
//!     Prefix::ScopeTargetRequired.message("no project is attached"));
//! assert!(refused.has_prefix(Prefix::ScopeTargetRequired));
//! assert_eq!(refused.code.http_status(), 400);
//! ```

pub mod catalogue;
pub mod contract;
pub mod deprecations;
pub mod enums;
pub mod error;
pub mod ids;
pub mod io;
pub mod output;
pub mod scope;
pub mod shapes;
pub mod teams;
pub mod uri;
pub mod validate;
pub mod version;

pub use catalogue::{Access, Annotations, CATALOGUE, ToolContract, ToolName, ToolOutput, ToolSpec};
pub use enums::*;
pub use error::{ErrorBody, ErrorCode, ToolError, prefixes, tool_error};
pub use ids::{EntityId, IdKind, InvitationId, MemoryId, UserId};
pub use io::*;
pub use output::FooterFacts;
pub use scope::{ReadScope, ScopePath, ScopeSpec, WriteScope};
pub use shapes::*;
pub use teams::{ADMIN_ROUTES, AdminRoute, RouteAccess, TeamRole};
pub use validate::{FieldError, output_schema_of, parse_input, schema_of};
pub use version::{CONTRACT_VERSION, contract_version};
