//! The OpenAPI document. Its component schemas ARE the contract's JSON
//! Schemas (OpenAPI 3.1 speaks JSON Schema 2020-12), inserted verbatim.

use serde_json::{Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, OpenApiBuilder};
use zm_contracts::catalogue::CATALOGUE;
use zm_contracts::{CONTRACT_VERSION, ErrorCode};

fn error_responses(codes: &[ErrorCode]) -> Value {
    let mut out = serde_json::Map::new();
    for c in codes {
        out.insert(
            c.http_status().to_string(),
            json!({
                "description": format!("`{}`", c.as_str()),
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
            }),
        );
    }
    Value::Object(out)
}

/// Build the document for a server at `public_url`.
pub fn document(public_url: &str) -> Value {
    let skeleton = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("zero-memory")
                .version(CONTRACT_VERSION)
                .description(Some(
                    "REST mirror of the zero-memory MCP tools. Every tool takes the same input and returns the same output as over MCP; every failure is the error body with its code's HTTP status.",
                ))
                .build(),
        )
        .components(Some(
            ComponentsBuilder::new()
                .security_scheme("bearer", SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()))
                .build(),
        ))
        .build();
    let mut doc = serde_json::to_value(skeleton).expect("openapi serialises");
    doc["openapi"] = json!("3.1.0");
    doc["servers"] = json!([{"url": public_url}]);
    doc["security"] = json!([{"bearer": []}]);
    let schemas = doc["components"]["schemas"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut schemas = schemas;
    schemas.insert(
        "ErrorBody".into(),
        zm_contracts::output_schema_of::<zm_contracts::ErrorBody>(),
    );
    let mut paths = serde_json::Map::new();
    let tool_errors = ErrorCode::ALL;
    for t in CATALOGUE {
        schemas.insert(t.input_type.into(), (t.input_schema)());
        schemas.insert(t.output_type.into(), (t.output_schema)());
        let mut responses = error_responses(&tool_errors);
        responses["200"] = json!({
            "description": "The tool's output.",
            "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}", t.output_type)}}},
        });
        paths.insert(
            format!("/api/tools/{}", t.name),
            json!({"post": {
                "operationId": t.name,
                "summary": t.title,
                "description": t.description,
                // An empty body reads as `{}` (a tool whose input needs a
                // field then answers `validation_failed` naming it).
                "requestBody": {"required": false, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}", t.input_type)}}}},
                "parameters": [{"$ref": "#/components/parameters/Agent"}],
                "responses": responses,
            }}),
        );
    }
    schemas.insert(
        "Memory".into(),
        zm_contracts::output_schema_of::<zm_contracts::Memory>(),
    );
    schemas.insert(
        "Rules".into(),
        zm_contracts::output_schema_of::<zm_contracts::RuleList>(),
    );
    let mut mem_responses = error_responses(&[
        ErrorCode::ValidationFailed,
        ErrorCode::Unauthorized,
        ErrorCode::NotFound,
        ErrorCode::RateLimited,
        ErrorCode::Internal,
    ]);
    mem_responses["200"] = json!({"description": "One memory, full fidelity.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Memory"}}}});
    paths.insert(
        "/api/memories/{id}".into(),
        json!({"get": {
            "operationId": "get_memory",
            "summary": "One memory (what zm://memory/{id} returns)",
            "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string", "pattern": zm_contracts::IdKind::Memory.pattern()}}],
            "responses": mem_responses,
        }}),
    );
    // Every route behind a token answers `validation_failed` to an
    // address holding an encoded NUL (`%00`), whatever else it reads.
    let mut rules_responses = error_responses(&[
        ErrorCode::ValidationFailed,
        ErrorCode::Unauthorized,
        ErrorCode::RateLimited,
        ErrorCode::Internal,
    ]);
    rules_responses["200"] = json!({"description": "Your standing rules, pinned first.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Rules"}}}});
    paths.insert("/api/rules".into(), json!({"get": {"operationId": "get_rules", "summary": "Your standing rules", "responses": rules_responses}}));
    paths.insert(
        "/api/contract".into(),
        json!({"get": {"operationId": "get_contract", "summary": "The contract: version, errors, prefixes, tools, deprecations", "security": [], "responses": {"200": {"description": "The contract document.", "content": {"application/json": {"schema": {"type": "object"}}}}}}}),
    );
    admin_paths(&mut paths, &mut schemas);
    operational_paths(&mut paths);
    declare_headers(&mut paths);
    doc["paths"] = Value::Object(paths);
    doc["components"]["schemas"] = Value::Object(schemas);
    doc["components"]["parameters"] = json!({
        "Agent": {
            "name": "X-ZM-Agent", "in": "header", "required": false,
            "description": "The agent making the call, recorded with what it writes (as an MCP client's name is): control characters dropped, cut to 100 characters; a value that is not visible ASCII is ignored.",
            "schema": {"type": "string"},
        },
    });
    doc["components"]["headers"] = json!({
        "X-Request-Id": {"description": "This request's id (the `req_…` id sent in `X-Request-Id`, else a new one): quote it when reporting an `internal` error.", "schema": {"type": "string"}},
        "Retry-After": {"description": "Seconds to wait before trying again.", "schema": {"type": "integer", "minimum": 1}},
        "WWW-Authenticate": {"description": "The Bearer challenge (RFC 6750): on every 401, naming the error; on a 403 only when the token lacks a scope the call needs (`insufficient_scope`, naming the scopes to ask for).", "schema": {"type": "string"}},
    });
    doc
}

/// The headers every answer carries (`X-Request-Id`), and those a 429
/// (`Retry-After`) and a 401 or 403 (`WWW-Authenticate`) carry, on every
/// operation's responses.
fn declare_headers(paths: &mut serde_json::Map<String, Value>) {
    let header = |name: &str| json!({"$ref": format!("#/components/headers/{name}")});
    for item in paths.values_mut() {
        let Some(ops) = item.as_object_mut() else {
            continue;
        };
        for op in ops.values_mut() {
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                continue;
            };
            for (status, response) in responses.iter_mut() {
                let mut headers = serde_json::Map::new();
                headers.insert("X-Request-Id".into(), header("X-Request-Id"));
                match status.as_str() {
                    "429" => {
                        headers.insert("Retry-After".into(), header("Retry-After"));
                    }
                    // A 403 carries it when the token lacks a scope the
                    // call needs (`insufficient_scope`), not for a role.
                    "401" | "403" => {
                        headers.insert("WWW-Authenticate".into(), header("WWW-Authenticate"));
                    }
                    _ => {}
                }
                response["headers"] = Value::Object(headers);
            }
        }
    }
}

/// The teams administration routes, from `zm_contracts::ADMIN_ROUTES`.
fn admin_paths(
    paths: &mut serde_json::Map<String, Value>,
    schemas: &mut serde_json::Map<String, Value>,
) {
    for r in zm_contracts::ADMIN_ROUTES {
        let mut codes = r.answers();
        for always in [
            ErrorCode::Unauthorized,
            ErrorCode::RateLimited,
            ErrorCode::Internal,
        ] {
            if !codes.contains(&always) {
                codes.push(always);
            }
        }
        let mut responses = error_responses(&codes);
        let (out_name, out_schema) = r.output;
        schemas.insert(out_name.into(), out_schema());
        responses[r.status.to_string()] = json!({
            "description": r.summary,
            "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{out_name}")}}},
        });
        let parameters: Vec<Value> = r
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| {
                let mut schema = json!({"type": "string"});
                if let Some(p) = zm_contracts::teams::admin_path_pattern(name) {
                    schema["pattern"] = json!(p);
                }
                json!({"name": name, "in": "path", "required": true, "schema": schema})
            })
            .collect();
        let mut op = json!({
            "operationId": r.operation_id,
            "summary": r.summary,
            "tags": ["teams"],
            "parameters": parameters,
            "responses": responses,
        });
        if let Some((in_name, in_schema)) = r.input {
            schemas.insert(in_name.into(), in_schema());
            op["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{in_name}")}}}});
        }
        let entry = paths.entry(r.path.to_string()).or_insert_with(|| json!({}));
        entry[r.method.to_ascii_lowercase()] = op;
    }
}

/// The routes for operators and discovery, served without a token: what
/// they answer, so the document lists every route the server serves (the
/// dashboard's pages and OAuth's endpoints aside, which have documents of
/// their own: DASHBOARD.md and the authorization server's metadata).
fn operational_paths(paths: &mut serde_json::Map<String, Value>) {
    let json_of = |description: &str, schema: Value| json!({"description": description, "content": {"application/json": {"schema": schema}}});
    let health = json!({
        "type": "object",
        "required": ["ok", "version", "contract"],
        "properties": {"ok": {"type": "boolean"}, "version": {"type": "string"}, "contract": {"type": "string"}},
    });
    let ready = json!({
        "type": "object",
        "required": ["ok", "checks"],
        "properties": {
            "ok": {"type": "boolean"},
            "checks": {"type": "object", "required": ["database"], "properties": {"database": {"type": "boolean"}}},
        },
    });
    let resource = json!({
        "type": "object",
        "required": ["resource", "authorization_servers", "scopes_supported", "bearer_methods_supported"],
        "properties": {
            "resource": {"type": "string"},
            "authorization_servers": {"type": "array", "items": {"type": "string"}},
            "scopes_supported": {"type": "array", "items": {"type": "string"}},
            "bearer_methods_supported": {"type": "array", "items": {"type": "string"}},
            "resource_name": {"type": "string"},
        },
    });
    let get = |id: &str, summary: &str, responses: Value| json!({"get": {"operationId": id, "summary": summary, "security": [], "responses": responses}});
    paths.insert(
        "/healthz".into(),
        get(
            "healthz",
            "Liveness: the process answers",
            json!({"200": json_of("Alive.", health)}),
        ),
    );
    paths.insert(
        "/readyz".into(),
        get(
            "readyz",
            "Readiness: the database answers (503 while it does not)",
            json!({"200": json_of("Ready.", ready.clone()), "503": json_of("The database does not answer.", ready)}),
        ),
    );
    paths.insert(
        "/metrics".into(),
        get(
            "metrics",
            "Prometheus text: counts and totals, never a user's figures",
            json!({"200": {"description": "Prometheus text exposition format 0.0.4.", "content": {"text/plain": {"schema": {"type": "string"}}}}}),
        ),
    );
    for (path, id) in [
        (
            "/.well-known/oauth-protected-resource",
            "protected_resource",
        ),
        (
            "/.well-known/oauth-protected-resource/mcp",
            "protected_resource_mcp",
        ),
    ] {
        paths.insert(
            path.into(),
            get(
                id,
                "OAuth protected-resource metadata of /mcp (RFC 9728)",
                json!({"200": json_of("The metadata.", resource.clone())}),
            ),
        );
    }
    paths.insert(
        "/api/openapi.json".into(),
        get(
            "openapi",
            "This document",
            json!({"200": json_of("The OpenAPI document.", json!({"type": "object"}))}),
        ),
    );
}
