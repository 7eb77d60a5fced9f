//! The one validation entry point: raw JSON → typed input, or a
//! `validation_failed` [`ToolError`] whose `details.fields` lists every
//! offending field with its reason.
//!
//! Three passes, each reporting every problem it finds:
//! 1. the input's JSON Schema (missing, unknown and mistyped fields, bad ids
//!    and scopes, lengths, ranges, enums);
//! 2. serde (only reached when the schema passed; reports its one error with
//!    the field path);
//! 3. garde (rules the schema cannot express, such as "not only whitespace").

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, LazyLock, Mutex};

use garde::Validate;
use jsonschema::error::ValidationErrorKind;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::{ErrorCode, ToolError, tool_error};
use crate::ids::IdKind;
use crate::scope;

mod repeated;
pub use repeated::{REPEATED_KEY_REASON, refuse_repeated_keys, repeated_key};

/// One offending field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// Dotted path with indices, e.g. `entities[0].name`; empty for the whole input.
    pub path: String,
    /// What is wrong, in words.
    pub reason: String,
}

/// The JSON Schema of an input type, as the contract publishes it: what a
/// client may send (draft 2020-12, subschemas inlined).
pub fn schema_of<T: JsonSchema>() -> Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12()
        .for_deserialize()
        .with(|s| s.inline_subschemas = true)
        .with_transform(KnownNumberFormats);
    finish(settings.into_generator().into_root_schema_for::<T>())
}

/// The JSON Schema of an output type: what the server sends. A field that
/// is always serialised is required (nullable when it may be null); a field
/// skipped when empty is optional.
pub fn output_schema_of<T: JsonSchema>() -> Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .with(|s| s.inline_subschemas = true)
        .with_transform(KnownNumberFormats);
    finish(settings.into_generator().into_root_schema_for::<T>())
}

/// The numeric `format`s a client's validator knows: JSON Schema 2020-12
/// defines none, the OpenAPI format registry (which our OpenAPI document
/// uses, and Ajv's `ajv-formats` in the TypeScript MCP SDK ships) defines
/// these four.
const KNOWN_NUMBER_FORMATS: [&str; 4] = ["int32", "int64", "float", "double"];

/// A schemars transform that drops the `format`s schemars invents for Rust
/// integers (`uint32`, `uint64`, `uint`, `int8`, …) from integer and number
/// schemas: no standard defines them, and validators warn about an unknown
/// format (the TypeScript MCP SDK logs one warning per field). What they
/// meant stays as keywords every validator knows: an unsigned integer keeps
/// (or gets) `minimum: 0`, and schemars already writes the ranges of the
/// small types as `minimum`/`maximum`.
#[derive(Debug, Clone, Copy)]
struct KnownNumberFormats;

impl schemars::transform::Transform for KnownNumberFormats {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        if let Some(o) = schema.as_object_mut() {
            let numeric = match o.get("type") {
                Some(Value::String(t)) => t == "integer" || t == "number",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer" || t == "number"),
                _ => false,
            };
            let unknown = o
                .get("format")
                .and_then(Value::as_str)
                .filter(|f| numeric && !KNOWN_NUMBER_FORMATS.contains(f))
                .map(str::to_owned);
            if let Some(format) = unknown {
                o.remove("format");
                if format.starts_with("uint") && !o.contains_key("minimum") {
                    o.insert("minimum".into(), json!(0));
                }
            }
        }
        schemars::transform::transform_subschemas(self, schema);
    }
}

fn finish(schema: schemars::Schema) -> Value {
    let mut v = serde_json::to_value(schema).expect("schema serialises");
    // A closed object with no fields still lists `properties`, so a stray
    // field is reported by name.
    if let Some(o) = v.as_object_mut()
        && o.get("additionalProperties") == Some(&Value::Bool(false))
        && !o.contains_key("properties")
    {
        o.insert("properties".into(), Value::Object(Default::default()));
    }
    v
}

type Validators = Mutex<HashMap<TypeId, Arc<jsonschema::Validator>>>;
static VALIDATORS: LazyLock<Validators> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn validator_for<T: JsonSchema + 'static>() -> Arc<jsonschema::Validator> {
    let mut map = VALIDATORS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    map.entry(TypeId::of::<T>())
        .or_insert_with(|| {
            Arc::new(
                jsonschema::validator_for(&schema_of::<T>())
                    .expect("contract schemas are valid JSON Schema"),
            )
        })
        .clone()
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn pointer_to_path(location: &jsonschema::paths::Location) -> String {
    let mut out = String::new();
    for seg in location.segments() {
        match seg {
            jsonschema::paths::LocationSegment::Property(p) => out = join(&out, &p),
            jsonschema::paths::LocationSegment::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

fn pattern_reason(pattern: &str) -> String {
    if pattern == scope::SHAREABLE_PATTERN {
        return "invalid scope: a project or team scope is proj.… or team.… with at least two labels of [a-z0-9_]".into();
    }
    if pattern == scope::WRITE_PATTERN
        || pattern == scope::READ_PATTERN
        || pattern == scope::PATH_PATTERN
    {
        return format!("invalid scope: {}", scope::SCOPE_HELP);
    }
    for kind in IdKind::ALL {
        if pattern == kind.pattern() {
            return format!(
                "not a valid {} id (expected {}_ + 16 + '.' + 10 Crockford base32 characters)",
                kind.describe(),
                kind.prefix()
            );
        }
    }
    format!("does not match the pattern {pattern}")
}

fn schema_errors(validator: &jsonschema::Validator, raw: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    for err in validator.iter_errors(raw) {
        if out.len() >= MAX_FIELD_ERRORS {
            // Counted, not described: [`validation_error`] lists the first
            // ones only and says how many more there were.
            let more = match err.kind() {
                ValidationErrorKind::AdditionalProperties { unexpected } => unexpected.len(),
                _ => 1,
            };
            out.extend((0..more).map(|_| FieldError {
                path: String::new(),
                reason: String::new(),
            }));
            continue;
        }
        let path = pointer_to_path(err.instance_path());
        match err.kind() {
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                out.push(FieldError {
                    path: join(&path, name),
                    reason: "is required".into(),
                });
            }
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                for name in unexpected {
                    out.push(FieldError {
                        path: join(&path, name),
                        reason: "unknown field".into(),
                    });
                }
            }
            ValidationErrorKind::Type { kind } => out.push(FieldError {
                path,
                reason: format!("wrong type: expected {}", type_words(kind)),
            }),
            ValidationErrorKind::MinLength { limit } => out.push(FieldError {
                path,
                reason: if *limit == 1 {
                    "must not be empty".into()
                } else {
                    format!("must be at least {limit} characters")
                },
            }),
            ValidationErrorKind::MaxLength { limit } => out.push(FieldError {
                path,
                reason: format!("must be at most {limit} characters"),
            }),
            ValidationErrorKind::MinItems { limit } => out.push(FieldError {
                path,
                reason: format!("must have at least {limit} item(s)"),
            }),
            ValidationErrorKind::MaxItems { limit } => out.push(FieldError {
                path,
                reason: format!("must have at most {limit} items"),
            }),
            ValidationErrorKind::Minimum { limit } => out.push(FieldError {
                path,
                reason: format!("must be at least {limit}"),
            }),
            ValidationErrorKind::Maximum { limit } => out.push(FieldError {
                path,
                reason: format!("must be at most {limit}"),
            }),
            ValidationErrorKind::Pattern { pattern } => out.push(FieldError {
                path,
                reason: pattern_reason(pattern),
            }),
            ValidationErrorKind::Enum { options } => out.push(FieldError {
                path,
                reason: format!("must be one of {options}"),
            }),
            _ => out.push(FieldError {
                path,
                reason: err.to_string(),
            }),
        }
    }
    out
}

fn type_words(kind: &jsonschema::error::TypeKind) -> String {
    match kind {
        jsonschema::error::TypeKind::Single(t) => t.to_string(),
        jsonschema::error::TypeKind::Multiple(set) => {
            let names: Vec<String> = set.iter().map(|t| t.to_string()).collect();
            names.join(" or ")
        }
    }
}

/// A copy of `v` where every float with no fractional part (e.g. `10.0`)
/// is an integer, as JSON Schema already treats it.
fn integral_floats_as_integers(v: &Value) -> Value {
    match v {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
            // Exactly representable: integral and well inside ±2^53.
            #[allow(clippy::cast_possible_truncation, reason = "integral and below 2^53")]
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
            _ => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(integral_floats_as_integers).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), integral_floats_as_integers(x)))
                .collect(),
        ),
        _ => v.clone(),
    }
}

/// The `validation_failed` error of one field (`path`) and why.
pub fn field_error(path: &str, reason: impl Into<String>) -> ToolError {
    validation_error(vec![FieldError {
        path: path.into(),
        reason: reason.into(),
    }])
}

/// The most field errors one `validation_failed` lists; past them, one
/// more entry (with an empty path) says how many were left out. A small
/// input can offend many times over (a long array of bad scopes, many
/// unknown keys): the answer stays small.
pub const MAX_FIELD_ERRORS: usize = 20;

/// The most characters of a path an error echoes (an unknown key can be
/// as long as the body); a longer one is cut and ends with `…`.
pub const MAX_ERROR_PATH_CHARS: usize = 200;

/// Build the `validation_failed` error for a list of field errors.
pub fn validation_error(fields: impl AsRef<[FieldError]>) -> ToolError {
    let all = fields.as_ref();
    let mut fields: Vec<FieldError> = all
        .iter()
        .take(MAX_FIELD_ERRORS)
        .map(|f| FieldError {
            path: cut_path(&f.path),
            reason: f.reason.clone(),
        })
        .collect();
    if all.len() > MAX_FIELD_ERRORS {
        fields.push(FieldError {
            path: String::new(),
            reason: format!(
                "and {} more field error(s), not listed",
                all.len() - MAX_FIELD_ERRORS
            ),
        });
    }
    let fields = fields.as_slice();
    let summary = fields
        .iter()
        .map(|f| {
            if f.path.is_empty() {
                f.reason.clone()
            } else {
                format!("{}: {}", f.path, f.reason)
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    tool_error(
        ErrorCode::ValidationFailed,
        format!("Invalid input: {summary}"),
        Some(json!({ "fields": fields })),
    )
}

/// `path`, cut to [`MAX_ERROR_PATH_CHARS`] characters.
fn cut_path(path: &str) -> String {
    match path.char_indices().nth(MAX_ERROR_PATH_CHARS) {
        Some((at, _)) => format!("{}…", &path[..at]),
        None => path.to_string(),
    }
}

/// Every string of the input holding U+0000, as a field error: PostgreSQL
/// stores no NUL in text (SQLite would), so the same input must be refused
/// the same way on both backends, and as the caller's to fix.
fn nul_errors(v: &Value, path: &mut String, out: &mut Vec<FieldError>) {
    match v {
        Value::String(s) if s.contains('\0') => out.push(FieldError {
            path: path.clone(),
            reason: "holds a NUL character (U+0000); remove it".into(),
        }),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                nul_errors(item, path, out);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                nul_errors(item, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Validate raw JSON into a typed tool input.
///
/// Never panics: every malformed input becomes a `validation_failed` error
/// naming each offending field.
pub fn parse_input<T>(raw: &Value) -> Result<T, ToolError>
where
    T: DeserializeOwned + JsonSchema + Validate<Context = ()> + 'static,
{
    // An absent `arguments` is an empty object.
    let empty = Value::Object(Default::default());
    let raw = if raw.is_null() { &empty } else { raw };
    if !raw.is_object() {
        return Err(validation_error(vec![FieldError {
            path: String::new(),
            reason: "the input must be a JSON object".into(),
        }]));
    }
    let mut errors = schema_errors(&validator_for::<T>(), raw);
    // Only an input the schema accepts is walked for NULs: its keys are
    // known and its arrays bounded (an unknown key as long as the body,
    // over a long array of NULs, was copied into every error).
    if errors.is_empty() {
        nul_errors(raw, &mut String::new(), &mut errors);
    }
    // JSON Schema counts 3.0 as an integer; serde's integer types do not.
    let normalised = integral_floats_as_integers(raw);
    let raw = &normalised;
    if !errors.is_empty() {
        return Err(validation_error(errors));
    }
    let typed: T = serde_path_to_error::deserialize(raw).map_err(|e| {
        let path = e.path().to_string();
        validation_error(vec![FieldError {
            path: if path == "." { String::new() } else { path },
            reason: e.inner().to_string(),
        }])
    })?;
    if let Err(report) = typed.validate() {
        let fields: Vec<FieldError> = report
            .iter()
            .map(|(path, err)| FieldError {
                path: path.to_string(),
                reason: err.message().to_string(),
            })
            .collect();
        return Err(validation_error(fields));
    }
    Ok(typed)
}
