//! The whole contract as one JSON document: what `contract/snapshot.json`
//! holds, what `GET /api/contract` serves, and what `cargo xtask check`
//! compares.

use serde_json::{Value, json};

use crate::catalogue::{CATALOGUE, PROMPTS, RESOURCES};
use crate::error::{ErrorCode, prefixes::Prefix};
use crate::version::CONTRACT_VERSION;

/// The contract document.
pub fn contract_document() -> Value {
    let tools: Vec<Value> = CATALOGUE
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "title": t.title,
                "description": t.description,
                "annotations": t.annotations,
                "input_schema": (t.input_schema)(),
                "output_schema": (t.output_schema)(),
            })
        })
        .collect();
    let errors: Vec<Value> = ErrorCode::ALL
        .iter()
        .map(|c| json!({"code": c.as_str(), "http_status": c.http_status()}))
        .collect();
    let prefixes: Vec<&str> = Prefix::ALL.iter().map(|p| p.as_str()).collect();
    json!({
        "version": CONTRACT_VERSION,
        "error_codes": errors,
        "error_body_schema": crate::validate::output_schema_of::<crate::error::ErrorBody>(),
        "prefixes": prefixes,
        "resources": RESOURCES,
        "prompts": PROMPTS,
        "tools": tools,
        "admin_api": crate::teams::admin_api_document(),
    })
}
