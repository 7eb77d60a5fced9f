//! Classify the differences between two contract documents.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// How much a difference matters to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Wording,
    Additive,
    Breaking,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Wording => "wording",
            Class::Additive => "additive",
            Class::Breaking => "breaking",
        }
    }
}

/// One difference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub class: Class,
    pub what: String,
}

/// Which side of the wire a schema describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// The client sends it: widening is additive, narrowing breaks.
    Input,
    /// The server sends it: removing or loosening breaks.
    Output,
}

struct Diff {
    changes: Vec<Change>,
}

impl Diff {
    fn push(&mut self, class: Class, what: impl Into<String>) {
        self.changes.push(Change {
            class,
            what: what.into(),
        });
    }
}

/// Every difference between `old` and `new`, classified.
pub fn diff_contracts(old: &Value, new: &Value) -> Vec<Change> {
    let mut d = Diff {
        changes: Vec::new(),
    };
    // Error codes: a closed set. Any change is breaking.
    let codes = |v: &Value| -> BTreeMap<String, Value> {
        v["error_codes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["code"].as_str().unwrap_or_default().to_string(),
                    c["http_status"].clone(),
                )
            })
            .collect()
    };
    let (oc, nc) = (codes(old), codes(new));
    for (k, v) in &oc {
        match nc.get(k) {
            None => d.push(Class::Breaking, format!("error code `{k}` removed")),
            Some(nv) if nv != v => d.push(
                Class::Breaking,
                format!("error code `{k}` changed its HTTP status"),
            ),
            _ => {}
        }
    }
    for k in nc.keys().filter(|k| !oc.contains_key(*k)) {
        d.push(
            Class::Breaking,
            format!("error code `{k}` added to the closed taxonomy"),
        );
    }
    schema_diff(
        &mut d,
        "error body",
        &old["error_body_schema"],
        &new["error_body_schema"],
        Dir::Output,
    );

    // Prefixes.
    let set = |v: &Value, key: &str| -> BTreeSet<String> {
        v[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().map(str::to_string))
            .collect()
    };
    let (op, np) = (set(old, "prefixes"), set(new, "prefixes"));
    for p in op.difference(&np) {
        d.push(Class::Breaking, format!("stable prefix `{p}` removed"));
    }
    for p in np.difference(&op) {
        d.push(Class::Additive, format!("stable prefix `{p}` added"));
    }

    keyed_diff(
        &mut d,
        "resource",
        "uri",
        &old["resources"],
        &new["resources"],
        |d, name, o, n| {
            for key in ["mime_type", "template", "name"] {
                if o[key] != n[key] {
                    d.push(Class::Breaking, format!("resource `{name}`: {key} changed"));
                }
            }
            for key in ["title", "description"] {
                if o[key] != n[key] {
                    d.push(Class::Wording, format!("resource `{name}`: {key} reworded"));
                }
            }
        },
    );
    keyed_diff(
        &mut d,
        "prompt",
        "name",
        &old["prompts"],
        &new["prompts"],
        |d, name, o, n| {
            for key in ["title", "description"] {
                if o[key] != n[key] {
                    d.push(Class::Wording, format!("prompt `{name}`: {key} reworded"));
                }
            }
            let args = |v: &Value| -> BTreeMap<String, Value> {
                v["arguments"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        (
                            a["name"].as_str().unwrap_or_default().to_string(),
                            a.clone(),
                        )
                    })
                    .collect()
            };
            let (oa, na) = (args(o), args(n));
            for (k, a) in &oa {
                match na.get(k) {
                    None => d.push(
                        Class::Breaking,
                        format!("prompt `{name}`: argument `{k}` removed"),
                    ),
                    Some(b) => {
                        if a["required"] != b["required"] {
                            let class = if b["required"] == true {
                                Class::Breaking
                            } else {
                                Class::Additive
                            };
                            d.push(
                                class,
                                format!("prompt `{name}`: argument `{k}` required changed"),
                            );
                        }
                        if a["description"] != b["description"] {
                            d.push(
                                Class::Wording,
                                format!("prompt `{name}`: argument `{k}` reworded"),
                            );
                        }
                    }
                }
            }
            for (k, b) in na.iter().filter(|(k, _)| !oa.contains_key(*k)) {
                let class = if b["required"] == true {
                    Class::Breaking
                } else {
                    Class::Additive
                };
                d.push(class, format!("prompt `{name}`: argument `{k}` added"));
            }
        },
    );
    keyed_diff(
        &mut d,
        "tool",
        "name",
        &old["tools"],
        &new["tools"],
        |d, name, o, n| {
            for key in ["title", "description"] {
                if o[key] != n[key] {
                    d.push(Class::Wording, format!("tool `{name}`: {key} reworded"));
                }
            }
            if o["annotations"] != n["annotations"] {
                d.push(
                    Class::Breaking,
                    format!("tool `{name}`: annotations changed"),
                );
            }
            schema_diff(
                d,
                &format!("tool `{name}` input"),
                &o["input_schema"],
                &n["input_schema"],
                Dir::Input,
            );
            schema_diff(
                d,
                &format!("tool `{name}` output"),
                &o["output_schema"],
                &n["output_schema"],
                Dir::Output,
            );
        },
    );
    keyed_diff(
        &mut d,
        "admin route",
        "operation_id",
        &old["admin_api"],
        &new["admin_api"],
        |d, name, o, n| {
            for key in ["method", "path", "status", "access"] {
                if o[key] != n[key] {
                    d.push(
                        Class::Breaking,
                        format!("admin route `{name}`: {key} changed"),
                    );
                }
            }
            if o["summary"] != n["summary"] {
                d.push(
                    Class::Wording,
                    format!("admin route `{name}`: summary reworded"),
                );
            }
            let codes = |v: &Value| strings(&v["errors"]);
            for c in codes(n).difference(&codes(o)) {
                d.push(
                    Class::Breaking,
                    format!("admin route `{name}`: may now answer `{c}`"),
                );
            }
            for c in codes(o).difference(&codes(n)) {
                d.push(
                    Class::Additive,
                    format!("admin route `{name}`: no longer answers `{c}`"),
                );
            }
            schema_diff(
                d,
                &format!("admin route `{name}` input"),
                &o["input_schema"],
                &n["input_schema"],
                Dir::Input,
            );
            schema_diff(
                d,
                &format!("admin route `{name}` output"),
                &o["output_schema"],
                &n["output_schema"],
                Dir::Output,
            );
        },
    );
    d.changes
}

fn keyed_diff(
    d: &mut Diff,
    what: &str,
    key: &str,
    old: &Value,
    new: &Value,
    each: impl Fn(&mut Diff, &str, &Value, &Value),
) {
    let index = |v: &Value| -> BTreeMap<String, Value> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|t| (t[key].as_str().unwrap_or_default().to_string(), t.clone()))
            .collect()
    };
    let (o, n) = (index(old), index(new));
    for (name, ov) in &o {
        match n.get(name) {
            None => d.push(Class::Breaking, format!("{what} `{name}` withdrawn")),
            Some(nv) => each(d, name, ov, nv),
        }
    }
    for name in n.keys().filter(|k| !o.contains_key(*k)) {
        d.push(Class::Additive, format!("{what} `{name}` added"));
    }
}

fn types(v: &Value) -> BTreeSet<String> {
    match v {
        Value::String(s) => [s.clone()].into(),
        Value::Array(a) => a
            .iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
        _ => BTreeSet::new(),
    }
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(std::string::ToString::to_string)
        .collect()
}

/// Compare two JSON Schemas describing the same field.
fn schema_diff(d: &mut Diff, at: &str, old: &Value, new: &Value, dir: Dir) {
    if old == new {
        return;
    }
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        d.push(Class::Breaking, format!("{at}: schema replaced"));
        return;
    };
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    let (ov, nv) = (
        |k: &str| o.get(k).unwrap_or(&Value::Null),
        |k: &str| n.get(k).unwrap_or(&Value::Null),
    );
    for key in keys {
        let (a, b) = (ov(key), nv(key));
        if a == b {
            continue;
        }
        match key.as_str() {
            "$schema" => {}
            "description" | "title" | "examples" => {
                d.push(Class::Wording, format!("{at}: {key} reworded"));
            }
            "type" => {
                let (ta, tb) = (types(a), types(b));
                let ok = match dir {
                    Dir::Input => tb.is_superset(&ta),
                    Dir::Output => tb.is_subset(&ta),
                };
                let class = if ok { Class::Additive } else { Class::Breaking };
                d.push(class, format!("{at}: type {a} -> {b}"));
            }
            "properties" => {
                let empty = serde_json::Map::new();
                let (pa, pb) = (
                    a.as_object().unwrap_or(&empty),
                    b.as_object().unwrap_or(&empty),
                );
                let required_new = strings(nv("required"));
                for (name, sa) in pa {
                    match pb.get(name) {
                        None => d.push(Class::Breaking, format!("{at}: field `{name}` removed")),
                        Some(sb) => schema_diff(d, &format!("{at}.{name}"), sa, sb, dir),
                    }
                }
                for name in pb.keys().filter(|k| !pa.contains_key(*k)) {
                    let required = required_new.contains(&Value::String(name.clone()).to_string());
                    let class = match dir {
                        Dir::Input if required => Class::Breaking,
                        _ => Class::Additive,
                    };
                    let what = if required { "required" } else { "optional" };
                    d.push(class, format!("{at}: new {what} field `{name}`"));
                }
            }
            "required" => {
                let (ra, rb) = (strings(a), strings(b));
                let props_old = o.get("properties").and_then(Value::as_object);
                for f in rb.difference(&ra) {
                    // A brand-new required field is reported under `properties`.
                    let existed = props_old.is_some_and(|p| p.contains_key(f.trim_matches('"')));
                    if existed {
                        let class = if dir == Dir::Input {
                            Class::Breaking
                        } else {
                            Class::Additive
                        };
                        d.push(class, format!("{at}: field {f} became required"));
                    }
                }
                for f in ra.difference(&rb) {
                    let still = n
                        .get("properties")
                        .and_then(Value::as_object)
                        .is_some_and(|p| p.contains_key(f.trim_matches('"')));
                    if still {
                        let class = if dir == Dir::Input {
                            Class::Additive
                        } else {
                            Class::Breaking
                        };
                        d.push(class, format!("{at}: field {f} became optional"));
                    }
                }
            }
            "enum" => {
                let (ea, eb) = (strings(a), strings(b));
                let removed: Vec<_> = ea.difference(&eb).cloned().collect();
                let added: Vec<_> = eb.difference(&ea).cloned().collect();
                if !removed.is_empty() {
                    let class = if dir == Dir::Input {
                        Class::Breaking
                    } else {
                        Class::Additive
                    };
                    d.push(class, format!("{at}: enum values removed {removed:?}"));
                }
                if !added.is_empty() {
                    d.push(
                        Class::Additive,
                        format!("{at}: enum values added {added:?}"),
                    );
                }
            }
            "items" | "additionalItems" => schema_diff(d, &format!("{at}[]"), a, b, dir),
            "anyOf" | "oneOf" | "allOf" => match (a.as_array(), b.as_array()) {
                (Some(xa), Some(xb)) if xa.len() == xb.len() => {
                    for (i, (sa, sb)) in xa.iter().zip(xb).enumerate() {
                        schema_diff(d, &format!("{at}<{key}#{i}>"), sa, sb, dir);
                    }
                }
                _ => d.push(Class::Breaking, format!("{at}: {key} alternatives changed")),
            },
            "additionalProperties" => {
                let opened = b != &Value::Bool(false);
                let class = match (dir, opened) {
                    (Dir::Input, true) => Class::Additive,
                    (Dir::Output, _) => Class::Additive,
                    _ => Class::Breaking,
                };
                d.push(class, format!("{at}: additionalProperties {a} -> {b}"));
            }
            "minLength" | "minItems" | "minimum" | "exclusiveMinimum" => {
                let tighter = bound(b, f64::NEG_INFINITY) > bound(a, f64::NEG_INFINITY);
                d.push(bound_class(dir, tighter), format!("{at}: {key} {a} -> {b}"));
            }
            "maxLength" | "maxItems" | "maximum" | "exclusiveMaximum" => {
                let tighter = bound(b, f64::INFINITY) < bound(a, f64::INFINITY);
                d.push(bound_class(dir, tighter), format!("{at}: {key} {a} -> {b}"));
            }
            "default" => d.push(Class::Breaking, format!("{at}: default {a} -> {b}")),
            "format" if dir == Dir::Output && b.is_null() => {
                d.push(Class::Breaking, format!("{at}: format dropped"));
            }
            _ => d.push(Class::Breaking, format!("{at}: {key} {a} -> {b}")),
        }
    }
}

fn bound(v: &Value, absent: f64) -> f64 {
    v.as_f64().unwrap_or(absent)
}

/// Tighter input bounds break clients; looser output bounds break readers.
fn bound_class(dir: Dir, tighter: bool) -> Class {
    match (dir, tighter) {
        (Dir::Input, true) | (Dir::Output, false) => Class::Breaking,
        _ => Class::Additive,
    }
}

/// The bump between two versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bump {
    None,
    Patch,
    Minor,
    Major,
}

impl Bump {
    pub fn between(old: &semver::Version, new: &semver::Version) -> Bump {
        if new.major > old.major {
            Bump::Major
        } else if new.major == old.major && new.minor > old.minor {
            Bump::Minor
        } else if new.major == old.major && new.minor == old.minor && new.patch > old.patch {
            Bump::Patch
        } else {
            Bump::None
        }
    }

    pub fn required_for(class: Option<Class>) -> Bump {
        match class {
            None => Bump::None,
            Some(Class::Wording) => Bump::Patch,
            Some(Class::Additive) => Bump::Minor,
            Some(Class::Breaking) => Bump::Major,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Bump::None => "none",
            Bump::Patch => "patch",
            Bump::Minor => "minor",
            Bump::Major => "major",
        }
    }
}
