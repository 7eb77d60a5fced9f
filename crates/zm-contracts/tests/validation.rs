//! The single validation entry point, on the cases a client gets wrong.

use serde_json::{Value, json};
use zm_contracts::*;

fn fields(err: &ToolError) -> Vec<(String, String)> {
    assert_eq!(err.code, ErrorCode::ValidationFailed, "{err:?}");
    err.details.as_ref().expect("details")["fields"]
        .as_array()
        .expect("fields array")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn paths(err: &ToolError) -> Vec<String> {
    fields(err).into_iter().map(|(p, _)| p).collect()
}

const MEM: &str = "mem_0123456789abcdef.0123456789";

#[test]
fn missing_field() {
    let err = parse_input::<RememberInput>(&json!({"kind": "fact"})).unwrap_err();
    assert_eq!(paths(&err), vec!["content"]);
    assert!(fields(&err)[0].1.contains("required"));
}

#[test]
fn wrong_type() {
    let err = parse_input::<RecallInput>(&json!({"query": 42, "k": "ten"})).unwrap_err();
    let p = paths(&err);
    assert!(
        p.contains(&"query".to_string()) && p.contains(&"k".to_string()),
        "{p:?}"
    );
}

#[test]
fn unknown_field() {
    let err = parse_input::<ForgetInput>(&json!({"memory_id": MEM, "why": "x"})).unwrap_err();
    assert_eq!(
        fields(&err),
        vec![("why".to_string(), "unknown field".to_string())]
    );
}

#[test]
fn malformed_memory_id() {
    let err = parse_input::<ForgetInput>(&json!({"memory_id": "mem_nope"})).unwrap_err();
    assert_eq!(paths(&err), vec!["memory_id"]);
    assert!(fields(&err)[0].1.contains("memory id"));
    let err = parse_input::<ForgetInput>(&json!({"memory_id": "ent_0123456789abcdef.0123456789"}))
        .unwrap_err();
    assert_eq!(paths(&err), vec!["memory_id"]);
    // Nested ids are named with their index.
    let err = parse_input::<RememberInput>(&json!({
        "content": "x", "links": [{"dst": MEM, "type": "supersedes"}, {"dst": "bad", "type": "supersedes"}]
    }))
    .unwrap_err();
    assert_eq!(paths(&err), vec!["links[1].dst"]);
}

#[test]
fn invalid_scope() {
    for bad in ["global", "proj", "Proj.X", "proj..x", "*"] {
        let err = parse_input::<RememberInput>(&json!({"content": "x", "scope": bad})).unwrap_err();
        assert_eq!(paths(&err), vec!["scope"], "{bad}");
        assert!(fields(&err)[0].1.contains("invalid scope"), "{bad}");
    }
    // `*` is fine for reads.
    let ok = parse_input::<RecallInput>(&json!({"query": "x", "scopes": ["*", "core"]})).unwrap();
    assert_eq!(ok.scopes.unwrap().len(), 2);
    let err =
        parse_input::<RecallInput>(&json!({"query": "x", "scopes": ["core", "nope"]})).unwrap_err();
    assert_eq!(paths(&err), vec!["scopes[1]"]);
}

#[test]
fn empty_and_blank_content() {
    let err = parse_input::<RememberInput>(&json!({"content": ""})).unwrap_err();
    assert_eq!(paths(&err), vec!["content"]);
    let err = parse_input::<RememberInput>(&json!({"content": "  \n\t "})).unwrap_err();
    assert_eq!(paths(&err), vec!["content"]);
}

#[test]
fn every_offending_field_is_named() {
    let err = parse_input::<RememberInput>(&json!({
        "content": "",
        "kind": "rumour",
        "scope": "nowhere",
        "entities": [{"name": ""}],
        "extra": true
    }))
    .unwrap_err();
    let mut p = paths(&err);
    p.sort();
    assert_eq!(
        p,
        vec!["content", "entities[0].name", "extra", "kind", "scope"]
    );
    assert!(err.message.starts_with("Invalid input: "));
}

#[test]
fn defaults_and_canonical_ids() {
    let r = parse_input::<RememberInput>(&json!({"content": "a fact"})).unwrap();
    assert_eq!(r.kind, MemoryKind::Fact);
    let q = parse_input::<RecallInput>(&json!({"query": "x"})).unwrap();
    assert_eq!(q.k, 10);
    let l = parse_input::<ListConflictsInput>(&json!({})).unwrap();
    assert_eq!((l.status, l.limit), (ConflictStatus::Pending, 20));
    let f = parse_input::<ForgetInput>(&json!({"memory_id": " MEM_0123456789ABCDEF.0123456789 "}))
        .unwrap();
    assert_eq!(f.memory_id.as_str(), MEM);
    // null arguments are an empty object.
    parse_input::<DeleteAccountInput>(&Value::Null).unwrap();
}

#[test]
fn ranges_and_sizes() {
    let err = parse_input::<RecallInput>(&json!({"query": "x", "k": 0})).unwrap_err();
    assert_eq!(paths(&err), vec!["k"]);
    let err = parse_input::<RecallInput>(&json!({"query": "x", "k": 101})).unwrap_err();
    assert_eq!(paths(&err), vec!["k"]);
    let ids: Vec<String> = (0..201)
        .map(|_| MemoryId::generate().into_string())
        .collect();
    let err = parse_input::<MoveMemoriesInput>(&json!({"memory_ids": ids, "scope": "proj.a.b"}))
        .unwrap_err();
    assert_eq!(paths(&err), vec!["memory_ids"]);
    let err = parse_input::<MoveMemoriesInput>(&json!({"memory_ids": []})).unwrap_err();
    assert_eq!(paths(&err), vec!["memory_ids"]);
}

#[test]
fn non_objects_never_panic() {
    for raw in [json!("x"), json!(1), json!([1, 2]), json!(true)] {
        let err = parse_input::<RememberInput>(&raw).unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationFailed);
    }
}

/// The least input each tool accepts.
fn minimal(name: &str) -> Value {
    match name {
        "remember" => json!({"content": "x"}),
        "recall" => json!({"query": "x"}),
        "build_context" => json!({"topic": "x"}),
        "forget" | "restore_memory" | "close_loop" | "challenge" | "promote_rule" => {
            let mut v = json!({"memory_id": MEM});
            if name == "challenge" {
                v["reason"] = json!("wrong");
            }
            v
        }
        "share" => json!({"memory_id": MEM, "scope": "proj.a.b"}),
        "move_memories" => json!({"memory_ids": [MEM], "scope": "proj.a.b"}),
        "link" => json!({"src": "a", "dst": "b", "type": "uses"}),
        "get_conflict" | "resolve_conflict" => json!({"dispute_id": "mrq_x"}),
        "import_memory" => {
            json!({"content": "x", "kind": "fact", "target": "core", "source_path": "p", "source_hash": "h"})
        }
        _ => json!({}),
    }
}

#[test]
fn every_tool_rejects_unknown_fields_and_accepts_its_minimum() {
    for tool in ToolName::ALL {
        let ok = validate_tool(*tool, &minimal(tool.as_str()));
        assert!(ok.is_ok(), "{tool}: {ok:?}");
        let mut bad = minimal(tool.as_str());
        bad["surprise"] = json!(1);
        let err = validate_tool(*tool, &bad).unwrap_err();
        assert_eq!(paths(&err), vec!["surprise"], "{tool}");
    }
}

fn validate_tool(tool: ToolName, raw: &Value) -> Result<(), ToolError> {
    use zm_contracts::catalogue::tool::*;
    fn go<T: ToolContract>(raw: &Value) -> Result<(), ToolError> {
        parse_input::<T::Input>(raw).map(|_| ())
    }
    match tool {
        ToolName::Remember => go::<Remember>(raw),
        ToolName::Recall => go::<Recall>(raw),
        ToolName::BuildContext => go::<BuildContext>(raw),
        ToolName::Forget => go::<Forget>(raw),
        ToolName::RestoreMemory => go::<RestoreMemory>(raw),
        ToolName::CloseLoop => go::<CloseLoop>(raw),
        ToolName::Share => go::<Share>(raw),
        ToolName::MoveMemories => go::<MoveMemories>(raw),
        ToolName::Link => go::<Link>(raw),
        ToolName::Entities => go::<Entities>(raw),
        ToolName::Challenge => go::<Challenge>(raw),
        ToolName::ListConflicts => go::<ListConflicts>(raw),
        ToolName::GetConflict => go::<GetConflict>(raw),
        ToolName::ResolveConflict => go::<ResolveConflict>(raw),
        ToolName::PromoteRule => go::<PromoteRule>(raw),
        ToolName::ImportMemory => go::<ImportMemory>(raw),
        ToolName::ExportMemories => go::<ExportMemories>(raw),
        ToolName::DeleteAccount => go::<DeleteAccount>(raw),
    }
}

/// A string's length bound is counted in characters, as the published
/// schema's `maxLength` is (JSON Schema counts code points): a value of
/// as many two-byte characters as the schema allows passes both, one more
/// fails both. Every top-level free-text field of every tool, and the
/// team inputs' addresses and scope.
#[test]
fn lengths_are_counted_in_characters_as_the_schema_counts_them() {
    let check = |what: &str,
                 schema: &Value,
                 base: &Value,
                 field: &str,
                 max: usize,
                 parse: &dyn Fn(&Value) -> Result<(), ToolError>,
                 fill: &dyn Fn(usize) -> String| {
        let v = jsonschema::validator_for(schema).unwrap();
        for (n, fits) in [(max, true), (max + 1, false)] {
            let mut raw = base.clone();
            raw[field] = json!(fill(n));
            assert_eq!(
                v.is_valid(&raw),
                fits,
                "{what}.{field}: the schema at {n} characters"
            );
            let parsed = parse(&raw);
            assert_eq!(
                parsed.is_ok(),
                fits,
                "{what}.{field}: the server at {n} characters: {parsed:?}"
            );
            if let Err(e) = parsed {
                assert_eq!(paths(&e), vec![field.to_string()], "{what}");
            }
        }
    };
    let two_byte = |n: usize| "é".repeat(n);
    let mut checked = 0;
    for tool in ToolName::ALL {
        let schema = (tool.spec().input_schema)();
        for (field, prop) in schema["properties"].as_object().unwrap() {
            let Some(max) = prop["maxLength"].as_u64() else {
                continue;
            };
            if prop.get("pattern").is_some()
                || prop.get("enum").is_some()
                || prop.get("format").is_some()
            {
                continue;
            }
            let parse = |raw: &Value| validate_tool(*tool, raw);
            check(
                tool.as_str(),
                &schema,
                &minimal(tool.as_str()),
                field,
                usize::try_from(max).unwrap(),
                &parse,
                &two_byte,
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} fields had a bound");
    let email = |n: usize| format!("{}@x.io", "é".repeat(n - 5));
    let schema = schema_of::<teams::AddMemberInput>();
    let parse = |raw: &Value| parse_input::<teams::AddMemberInput>(raw).map(|_| ());
    check(
        "add member",
        &schema,
        &json!({"email": "a@x.io", "role": "reader"}),
        "email",
        254,
        &parse,
        &email,
    );
    let schema = schema_of::<teams::InviteInput>();
    let parse = |raw: &Value| parse_input::<teams::InviteInput>(raw).map(|_| ());
    check(
        "invite",
        &schema,
        &json!({"email": "a@x.io", "role": "reader"}),
        "email",
        254,
        &parse,
        &email,
    );
}

#[test]
fn schemas_show_constraints() {
    let s = (ToolName::Remember.spec().input_schema)();
    assert_eq!(s["properties"]["content"]["minLength"], 1);
    assert_eq!(s["properties"]["links"]["maxItems"], 10);
    assert!(s["properties"]["scope"]["pattern"].is_string());
    assert_eq!(s["properties"]["kind"]["enum"].as_array().unwrap().len(), 9);
    assert_eq!(s["required"], json!(["content"]));
    let m = (ToolName::MoveMemories.spec().input_schema)();
    assert_eq!(m["properties"]["memory_ids"]["maxItems"], 200);
    assert!(
        m["properties"]["memory_ids"]["items"]["pattern"]
            .as_str()
            .unwrap()
            .contains("[mM][eE][mM]_")
    );
}

#[test]
fn outputs_validate_against_their_own_schemas() {
    let out = RememberOutput {
        memory_id: MemoryId::generate(),
        deduplicated: None,
        scope: "proj.a.b".into(),
        similar_existing: None,
        hint: None,
        length_directive: None,
        anchors: None,
        anchor_hint: None,
        routed_to_project: None,
        session: SessionState {
            attached_project: None,
            thread: None,
        },
    };
    let schema = (ToolName::Remember.spec().output_schema)();
    let v = jsonschema::validator_for(&schema).unwrap();
    let full = serde_json::to_value(&out).unwrap();
    assert!(v.is_valid(&full));
    assert!(!v.is_valid(&json!({"memory_id": "nope"})));
    // What the server always sends, the schema requires.
    for always in ["scope", "session"] {
        let mut without = full.clone();
        without.as_object_mut().unwrap().remove(always);
        assert!(!v.is_valid(&without), "{always} is required");
    }
}

#[test]
fn every_contract_schema_is_valid_json_schema_2020_12() {
    for t in CATALOGUE {
        for (side, schema) in [
            ("input", (t.input_schema)()),
            ("output", (t.output_schema)()),
        ] {
            assert_eq!(
                schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
                "{} {side}",
                t.name
            );
            if let Err(e) = jsonschema::meta::validate(&schema) {
                panic!("{} {side} schema is not valid 2020-12: {e}", t.name);
            }
        }
    }
}

/// Every `format` in a schema, with where it is.
fn formats(at: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(f)) = o.get("format") {
                out.push((at.to_string(), f.clone()));
            }
            for (k, x) in o {
                formats(&format!("{at}/{k}"), x, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                formats(&format!("{at}/{i}"), x, out);
            }
        }
        _ => {}
    }
}

#[test]
fn schemas_use_only_formats_a_validator_knows() {
    // schemars writes `uint32` / `uint64` for u32 / u64: no standard defines
    // them and the TypeScript MCP SDK warns about each. Unsigned stays
    // `minimum: 0`.
    let known = ["int32", "int64", "float", "double"];
    let mut seen = Vec::new();
    for t in CATALOGUE {
        formats(&format!("{} input", t.name), &(t.input_schema)(), &mut seen);
        formats(
            &format!("{} output", t.name),
            &(t.output_schema)(),
            &mut seen,
        );
    }
    let unknown: Vec<_> = seen
        .iter()
        .filter(|(_, f)| !known.contains(&f.as_str()))
        .collect();
    assert!(unknown.is_empty(), "unknown formats: {unknown:?}");
    let recall = (ToolName::Recall.spec().output_schema)();
    let age = &recall["properties"]["memories"]["items"]["properties"]["stale_days"];
    assert_eq!(age["minimum"], 0, "{age}");
    assert!(age.get("format").is_none(), "{age}");
    let k = &(ToolName::Recall.spec().input_schema)()["properties"]["k"];
    assert_eq!(
        (k["minimum"].clone(), k["maximum"].clone()),
        (json!(1), json!(100)),
        "{k}"
    );
    let del = (ToolName::DeleteAccount.spec().output_schema)();
    assert_eq!(
        del["properties"]["memories"],
        json!({"type": "integer", "minimum": 0})
    );
}

#[test]
fn integral_floats_count_as_integers_like_json_schema_says() {
    let q = parse_input::<RecallInput>(&json!({"query": "x", "k": 10.0})).unwrap();
    assert_eq!(q.k, 10);
    let err = parse_input::<RecallInput>(&json!({"query": "x", "k": 10.5})).unwrap_err();
    assert_eq!(paths(&err), vec!["k"]);
}

#[test]
fn share_and_move_targets_must_be_project_or_team_scopes() {
    let err =
        parse_input::<ShareInput>(&json!({"memory_id": MEM, "scope": "user.x.core"})).unwrap_err();
    assert_eq!(paths(&err), vec!["scope"]);
    assert!(
        fields(&err)[0].1.contains("project or team"),
        "{:?}",
        fields(&err)
    );
    parse_input::<ShareInput>(&json!({"memory_id": MEM, "scope": "team.acme.backend"})).unwrap();
    let err =
        parse_input::<PromoteRuleInput>(&json!({"memory_id": MEM, "applies_scope": "user.1"}))
            .unwrap_err();
    assert_eq!(paths(&err), vec!["applies_scope"]);
}

#[test]
fn a_nul_character_is_refused_wherever_it_is() {
    let err = parse_input::<RememberInput>(&json!({
        "content": "a\u{0}b",
        "scope": "core",
        "entities": [{"name": "ok"}, {"name": "bad\u{0}"}],
    }))
    .unwrap_err();
    let mut p = paths(&err);
    p.sort();
    assert_eq!(p, vec!["content", "entities[1].name"], "{err:?}");
    assert!(fields(&err)[0].1.contains("NUL"), "{err:?}");
    // Other control characters are text like any other.
    parse_input::<RememberInput>(&json!({"content": "tab\there", "scope": "core"})).unwrap();
}

/// An idempotency key that is only whitespace names nothing: refused, not
/// shared by every such item.
#[test]
fn a_blank_source_hash_is_refused() {
    for hash in ["   ", "\t\n"] {
        let raw = json!({"content": "x", "kind": "fact", "target": "core", "source_path": "p", "source_hash": hash});
        let err = validate_tool(ToolName::ImportMemory, &raw).unwrap_err();
        assert_eq!(paths(&err), vec!["source_hash"], "{hash:?}");
    }
}

/// A small input that offends many times over gets a small answer: at most
/// `MAX_FIELD_ERRORS` fields, then one entry saying how many more; a path
/// as long as the body is cut. (An unknown key of 100 KiB over thousands of
/// NULs was echoed in every one of thousands of errors, twice.)
#[test]
fn many_errors_and_long_paths_stay_small() {
    let scopes: Vec<&str> = vec!["!"; 300];
    let err = parse_input::<RecallInput>(&json!({"query": "x", "scopes": scopes})).unwrap_err();
    let f = fields(&err);
    assert_eq!(f.len(), validate::MAX_FIELD_ERRORS + 1, "{:?}", &f[..3]);
    let (path, reason) = f.last().unwrap();
    assert!(
        path.is_empty() && reason.starts_with("and ") && reason.contains("more"),
        "{reason}"
    );
    let more: usize = reason.split_whitespace().nth(1).unwrap().parse().unwrap();
    // 300 bad scopes and the list's own length.
    assert_eq!(more + validate::MAX_FIELD_ERRORS, 301, "{reason}");

    let long_key = "k".repeat(100 * 1024);
    let nuls: Vec<&str> = vec!["\u{0}"; 5_000];
    let mut raw = json!({"query": "x"});
    raw[long_key.as_str()] = json!(nuls);
    let err = parse_input::<RecallInput>(&raw).unwrap_err();
    let body = serde_json::to_string(&err.to_json()).unwrap();
    assert!(body.len() < 4_096, "{} bytes", body.len());
    let f = fields(&err);
    assert_eq!(f.len(), 1, "the unknown key only (no NUL walk of it)");
    assert!(f[0].0.ends_with('…'), "{}", &f[0].0[..40]);
    assert_eq!(f[0].0.chars().count(), validate::MAX_ERROR_PATH_CHARS + 1);
}

/// The repeated-key walk names the repeat under a long key and a long
/// array as it names it under short ones.
#[test]
fn a_repeat_deep_under_a_long_key_is_named() {
    let long_key = "k".repeat(10 * 1024);
    let mut items: Vec<Value> = vec![json!(0); 20_000];
    items.push(json!({"a": 1}));
    let mut text = serde_json::to_string(&json!({ long_key.clone(): items })).unwrap();
    // The last element's object gets its key a second time.
    let at = text.rfind("{\"a\":1}").unwrap();
    text.replace_range(at..at + 7, "{\"a\":1,\"a\":2}");
    let path = validate::repeated_key(text.as_bytes()).expect("the repeat");
    assert_eq!(path, format!("{long_key}[20000].a"));
    assert_eq!(
        validate::repeated_key(br#"{"x":[{"a":1},{"b":[1,{"c":2,"c":3}]}]}"#).as_deref(),
        Some("x[1].b[1].c")
    );
}
