//! Each contract check must FAIL on a planted bad case, and pass on the
//! committed contract.

use serde_json::{Value, json};
use xtask::checks::*;
use zm_contracts::contract::contract_document;
use zm_contracts::deprecations::Ledger;

fn doc() -> Value {
    contract_document()
}

fn tool_mut<'a>(doc: &'a mut Value, name: &str) -> &'a mut Value {
    doc["tools"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["name"] == name)
        .unwrap()
}

fn with_version(mut doc: Value, v: &str) -> Value {
    doc["version"] = json!(v);
    doc
}

/// The current contract version with one part bumped, so the planted cases
/// do not go stale at the next release.
fn bumped(part: &str) -> String {
    let mut v = zm_contracts::contract_version();
    match part {
        "patch" => v.patch += 1,
        "minor" => (v.minor, v.patch) = (v.minor + 1, 0),
        _ => (v.major, v.minor, v.patch) = (v.major + 1, 0, 0),
    }
    v.to_string()
}

#[test]
fn the_committed_contract_passes_every_check() {
    let outcomes = xtask::run_checks();
    for o in &outcomes {
        assert!(o.result.is_ok(), "{}: {:?}", o.name, o.result);
    }
}

#[test]
fn description_budget_fails_at_2049_bytes() {
    let mut d = doc();
    tool_mut(&mut d, "recall")["description"] = json!("x".repeat(2048));
    assert!(check_description_budget(&d).is_ok());
    tool_mut(&mut d, "recall")["description"] = json!("x".repeat(2049));
    let errs = check_description_budget(&d).unwrap_err();
    assert!(
        errs[0].contains("recall") && errs[0].contains("2049"),
        "{errs:?}"
    );
    // Bytes, not characters: 683 three-byte characters are 2049 bytes.
    tool_mut(&mut d, "recall")["description"] = json!("€".repeat(683));
    assert!(check_description_budget(&d).is_err());
}

#[test]
fn annotation_check_fails_on_a_missing_hint() {
    let mut d = doc();
    tool_mut(&mut d, "forget")["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("idempotentHint");
    let errs = check_annotations(&d).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.contains("forget") && e.contains("idempotentHint")),
        "{errs:?}"
    );
}

#[test]
fn annotation_check_fails_on_wrong_read_only_or_open_world() {
    let mut d = doc();
    tool_mut(&mut d, "remember")["annotations"]["readOnlyHint"] = json!(true);
    assert!(
        check_annotations(&d)
            .unwrap_err()
            .iter()
            .any(|e| e.contains("remember"))
    );
    let mut d = doc();
    tool_mut(&mut d, "recall")["annotations"]["openWorldHint"] = json!(true);
    assert!(
        check_annotations(&d)
            .unwrap_err()
            .iter()
            .any(|e| e.contains("openWorldHint"))
    );
}

#[test]
fn removed_output_field_needs_a_major_bump() {
    let old = doc();
    let mut new = doc();
    tool_mut(&mut new, "forget")["output_schema"]["properties"]
        .as_object_mut()
        .unwrap()
        .remove("invalidated");
    // Same version: fails, naming the change and the bump.
    let errs = check_snapshot(&old, &new).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.contains("[breaking]") && e.contains("invalidated")),
        "{errs:?}"
    );
    assert!(errs.iter().any(|e| e.contains("major")), "{errs:?}");
    // A minor bump is not enough either.
    let r = compare_snapshot(&old, &with_version(new.clone(), &bumped("minor"))).unwrap();
    assert!(!r.bump_sufficient());
    // A major bump is.
    let r = compare_snapshot(&old, &with_version(new, &bumped("major"))).unwrap();
    assert!(r.bump_sufficient());
}

#[test]
fn new_optional_input_field_needs_a_minor_bump() {
    let old = doc();
    let mut new = doc();
    tool_mut(&mut new, "recall")["input_schema"]["properties"]["fuzzy"] =
        json!({"type": "boolean"});
    let r = compare_snapshot(&old, &new).unwrap();
    assert_eq!(r.changes.len(), 1, "{:?}", r.changes);
    assert_eq!(r.changes[0].class, xtask::diff::Class::Additive);
    assert!(check_snapshot(&old, &new).is_err());
    assert!(
        !compare_snapshot(&old, &with_version(new.clone(), &bumped("patch")))
            .unwrap()
            .bump_sufficient()
    );
    assert!(
        compare_snapshot(&old, &with_version(new, &bumped("minor")))
            .unwrap()
            .bump_sufficient()
    );
}

#[test]
fn new_required_input_field_is_breaking() {
    let old = doc();
    let mut new = doc();
    let t = tool_mut(&mut new, "recall");
    t["input_schema"]["properties"]["mode"] = json!({"type": "string"});
    t["input_schema"]["required"]
        .as_array_mut()
        .unwrap()
        .push(json!("mode"));
    let r = compare_snapshot(&old, &with_version(new, &bumped("minor"))).unwrap();
    assert_eq!(r.required, xtask::diff::Bump::Major, "{:?}", r.changes);
}

#[test]
fn narrowing_and_widening_are_told_apart() {
    let old = doc();
    // Input maxItems lowered: breaking. Raised: additive.
    let mut new = doc();
    tool_mut(&mut new, "move_memories")["input_schema"]["properties"]["memory_ids"]["maxItems"] =
        json!(100);
    assert_eq!(
        compare_snapshot(&old, &new).unwrap().required,
        xtask::diff::Bump::Major
    );
    let mut new = doc();
    tool_mut(&mut new, "move_memories")["input_schema"]["properties"]["memory_ids"]["maxItems"] =
        json!(500);
    assert_eq!(
        compare_snapshot(&old, &new).unwrap().required,
        xtask::diff::Bump::Minor
    );
    // A new tool is additive; a withdrawn one is breaking.
    let mut new = doc();
    let mut extra = tool_mut(&mut new, "recall").clone();
    extra["name"] = json!("recall_more");
    new["tools"].as_array_mut().unwrap().push(extra);
    assert_eq!(
        compare_snapshot(&old, &new).unwrap().required,
        xtask::diff::Bump::Minor
    );
    let mut new = doc();
    new["tools"]
        .as_array_mut()
        .unwrap()
        .retain(|t| t["name"] != "link");
    assert_eq!(
        compare_snapshot(&old, &new).unwrap().required,
        xtask::diff::Bump::Major
    );
    // A reworded description is a patch.
    let mut new = doc();
    tool_mut(&mut new, "recall")["description"] = json!("Search memories.");
    let r = compare_snapshot(&old, &new).unwrap();
    assert_eq!(r.required, xtask::diff::Bump::Patch);
    assert!(
        compare_snapshot(&old, &with_version(new, &bumped("patch")))
            .unwrap()
            .bump_sufficient()
    );
}

#[test]
fn a_changed_error_code_is_breaking() {
    let old = doc();
    let mut new = doc();
    new["error_codes"][0]["http_status"] = json!(422);
    assert_eq!(
        compare_snapshot(&old, &new).unwrap().required,
        xtask::diff::Bump::Major
    );
}

#[test]
fn ledger_refuses_a_removal_before_the_next_major() {
    let d = doc();
    let mut ledger = Ledger::committed();
    assert!(check_ledger(&ledger, &d).is_ok());
    ledger
        .deprecated
        .push(zm_contracts::deprecations::Deprecation {
            surface: "tool:recall.input.include_graph".into(),
            deprecated_in: "2.1.0".into(),
            replacement: "entities".into(),
            removal_no_earlier_than: "2.9.0".into(),
            note: String::new(),
        });
    let errs = check_ledger(&ledger, &d).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.contains("earlier than the next major")),
        "{errs:?}"
    );
    ledger.deprecated[0].removal_no_earlier_than = "3.0.0".into();
    assert!(check_ledger(&ledger, &d).is_ok());
}

#[test]
fn ledger_refuses_unknown_surfaces_and_bad_versions() {
    let d = doc();
    let mut ledger = Ledger::committed();
    ledger
        .deprecated
        .push(zm_contracts::deprecations::Deprecation {
            surface: "tool:recall.input.nope".into(),
            deprecated_in: "two".into(),
            replacement: "x".into(),
            removal_no_earlier_than: "3.0.0".into(),
            note: String::new(),
        });
    let errs = check_ledger(&ledger, &d).unwrap_err();
    assert!(
        errs.iter().any(|e| e.contains("no such surface")),
        "{errs:?}"
    );
    assert!(errs.iter().any(|e| e.contains("not a semver")), "{errs:?}");
}

#[test]
fn ledger_needs_a_history_entry_for_the_current_version() {
    let d = with_version(doc(), "2.2.0");
    let errs = check_ledger(&Ledger::committed(), &d).unwrap_err();
    assert!(errs.iter().any(|e| e.contains("2.2.0")), "{errs:?}");
}

#[test]
fn stale_generated_docs_fail() {
    assert!(check_generated("docs/X.md", Some("a"), "a").is_ok());
    assert!(check_generated("docs/X.md", Some("a"), "b").is_err());
    assert!(check_generated("docs/X.md", None, "b").is_err());
}

#[test]
fn behavioural_check_sees_what_handlers_do_and_fails_on_a_wrong_hint() {
    use zm_contracts::ToolName;
    let observed = xtask::behaviour::observe_all().expect("scratch stores run");
    let get = |t: ToolName| observed.iter().find(|(n, _)| *n == t).unwrap().1;
    let remember = get(ToolName::Remember);
    assert!(
        !remember.read_only && !remember.destructive && remember.idempotent,
        "{remember:?}"
    );
    let forget = get(ToolName::Forget);
    assert!(
        !forget.read_only && forget.destructive && forget.idempotent,
        "{forget:?}"
    );
    let promote = get(ToolName::PromoteRule);
    assert!(!promote.idempotent, "{promote:?}");
    let recall = get(ToolName::Recall);
    assert!(
        recall.read_only && !recall.destructive && recall.idempotent,
        "{recall:?}"
    );
    let delete = get(ToolName::DeleteAccount);
    assert!(delete.destructive, "{delete:?}");
    // The real annotations pass...
    assert!(xtask::behaviour::check_behaviour(&observed, |t| t.spec().annotations).is_ok());
    // ...and a planted wrong one fails, naming the tool and the hint.
    let errs = xtask::behaviour::check_behaviour(&observed, |t| {
        let mut a = t.spec().annotations;
        if t == ToolName::Share {
            a.destructive_hint = true;
        }
        if t == ToolName::Entities {
            a.read_only_hint = false;
        }
        a
    })
    .unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.contains("`share`") && e.contains("destructiveHint")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.contains("`entities`") && e.contains("readOnlyHint")),
        "{errs:?}"
    );
}

/// A read tool that writes an operational row — a project scope, as
/// `recall` with a new `project_hint` once did — fails the behavioural
/// check: the fingerprint covers every table, not only memory data.
#[test]
fn a_read_tool_that_writes_any_row_fails_the_behavioural_check() {
    use zm_contracts::ToolName;
    let dir = std::env::temp_dir().join(format!(
        "zm-planted-{}-{}",
        std::process::id(),
        zm_contracts::IdKind::Request.generate()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seen = rt
        .block_on(xtask::behaviour::observe_with(
            ToolName::Recall,
            &dir,
            async |tools, fixture| {
                // The planted side effect: a project scope (and its member
                // row) created during the read.
                let user = &fixture.caller().user_id;
                let scope = zm_contracts::scope::project_scope(user, "planted");
                tools
                    .store()
                    .add_scope_member(user, &scope, user, zm_store::Role::Admin)
                    .await
                    .map_err(|e| e.to_string())
            },
        ))
        .expect("the planted run completes");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!seen.read_only, "the planted write is seen: {seen:?}");
    let errs =
        xtask::behaviour::check_behaviour(&[(ToolName::Recall, seen)], |t| t.spec().annotations)
            .unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.contains("`recall`") && e.contains("readOnlyHint")),
        "{errs:?}"
    );
}

#[test]
fn admin_routes_are_diffed_like_tools() {
    let old = doc();
    // A withdrawn route breaks its clients.
    let mut new = doc();
    new["admin_api"]
        .as_array_mut()
        .unwrap()
        .retain(|r| r["operation_id"] != "team_audit");
    let errs = check_snapshot(&old, &new).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.contains("[breaking]") && e.contains("team_audit")),
        "{errs:?}"
    );
    // A new required input field breaks senders; a new route is additive.
    let mut new = doc();
    let routes = new["admin_api"].as_array_mut().unwrap();
    let create = routes
        .iter_mut()
        .find(|r| r["operation_id"] == "create_team")
        .unwrap();
    create["input_schema"]["properties"]["region"] = json!({"type": "string"});
    create["input_schema"]["required"]
        .as_array_mut()
        .unwrap()
        .push(json!("region"));
    let errs = check_snapshot(&old, &new).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.contains("[breaking]") && e.contains("create_team") && e.contains("region")),
        "{errs:?}"
    );
    let mut new = doc();
    let mut extra = new["admin_api"][0].clone();
    extra["operation_id"] = json!("rename_team");
    new["admin_api"].as_array_mut().unwrap().push(extra);
    let r = compare_snapshot(&old, &with_version(new, &bumped("minor"))).unwrap();
    assert!(r.bump_sufficient(), "a new route needs only a minor bump");
}

#[test]
fn unsafe_blocks_are_confined_to_the_forward_pass() {
    let file = |p: &str, t: &str| (p.to_string(), t.to_string());
    // Built at run time so that this file does not match the check itself.
    let gemm = format!(
        "#[allow({})]\nunsafe {{ gemm() }}",
        concat!("unsafe", "_code")
    );
    let gemm = gemm.as_str();
    assert_eq!(
        check_unsafe_confined(&[
            file(UNSAFE_ALLOWED_IN, gemm),
            file("crates/zm-store/src/lib.rs", "fn safe() {}")
        ]),
        Ok(())
    );
    let elsewhere =
        check_unsafe_confined(&[file("crates/zm-store/src/semantic.rs", gemm)]).unwrap_err();
    assert!(
        elsewhere[0].contains("crates/zm-store/src/semantic.rs"),
        "{elsewhere:?}"
    );
    let twice = format!("{gemm}\n{gemm}");
    let twice = check_unsafe_confined(&[file(UNSAFE_ALLOWED_IN, &twice)]).unwrap_err();
    assert!(twice[0].contains("2 unsafe"), "{twice:?}");
    // One attribute for the whole file, then a second block: caught by the
    // blocks, and another spelling of the lint is caught too.
    let file_wide = format!(
        "#![expect({})]\nfn a() {{ unsafe {{ x() }} }}\nfn b() {{ unsafe {{ y() }} }}",
        concat!("unsafe", "_code")
    );
    assert!(check_unsafe_confined(&[file(UNSAFE_ALLOWED_IN, &file_wide)]).is_err());
    let other = format!("#[allow(dead_code, {})]", concat!("unsafe", "_code"));
    assert!(check_unsafe_confined(&[file("crates/zm-embed/src/lib.rs", &other)]).is_err());
    // Words in comments are not code.
    assert_eq!(
        check_unsafe_confined(&[file("crates/zm-store/src/lib.rs", "// no unsafe { here }")]),
        Ok(())
    );
}

#[test]
fn the_workspace_has_unsafe_only_in_the_forward_pass() {
    assert_eq!(xtask::unsafe_confined(), Ok(()));
}

#[test]
fn crate_lints_must_follow_the_workspace() {
    let workspace: toml::Value = toml::from_str(concat!(
        "[workspace.lints.rust]\nunsafe",
        "_code = \"forbid\"\n[workspace.lints.clippy]\nmap_unwrap_or = \"warn\"\n",
    ))
    .unwrap();
    let krate = |lints: &str| {
        (
            "crates/x/Cargo.toml".to_string(),
            toml::from_str::<toml::Value>(lints).unwrap(),
        )
    };
    let copy = concat!(
        "[lints.rust]\nunsafe",
        "_code = \"deny\"\n",
        "[lints.clippy]\nmap_unwrap_or = \"warn\"\n"
    );
    assert_eq!(
        check_lints(&workspace, &[krate("[lints]\nworkspace = true\n")]),
        Ok(())
    );
    assert_eq!(check_lints(&workspace, &[krate(copy)]), Ok(()));
    // A crate without lints, a copy missing a workspace lint, one adding
    // its own, and one allowing unsafe code: each fails, naming the lint.
    assert!(check_lints(&workspace, &[krate("[package]\nname = \"x\"\n")]).is_err());
    let missing = check_lints(
        &workspace,
        &[krate(&copy.replace("map_unwrap_or = \"warn\"\n", ""))],
    )
    .unwrap_err();
    assert!(missing[0].contains("clippy::map_unwrap_or"), "{missing:?}");
    let extra = check_lints(
        &workspace,
        &[krate(&format!("{copy}needless_pass_by_value = \"warn\"\n"))],
    )
    .unwrap_err();
    assert!(extra[0].contains("needless_pass_by_value"), "{extra:?}");
    let allowed =
        check_lints(&workspace, &[krate(&copy.replace("\"deny\"", "\"allow\""))]).unwrap_err();
    assert!(allowed[0].contains("rust::unsafe"), "{allowed:?}");
}

#[test]
fn the_workspace_crates_follow_its_lints() {
    assert_eq!(xtask::lints_follow_workspace(), Ok(()));
}
