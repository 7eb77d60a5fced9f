//! A key that comes twice in one JSON object. RFC 8259 §4 leaves the
//! meaning of such text open: `serde_json` keeps the last value, while a
//! filter or log in front of the server may have read the first. Every
//! body the server reads as JSON (REST, OAuth) is refused with the
//! repeated key's path instead, so what was checked is what is used.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

use crate::error::ToolError;

/// Why a repeated key is refused, as its field error says it.
pub const REPEATED_KEY_REASON: &str = "appears more than once in one object; send it once";

/// The path (as field errors write it: `a.b[0].c`) of the first key that
/// comes twice in one object of `json`, or `None`. Text that is not JSON
/// is `None` too: the caller's own parser says why.
pub fn repeated_key(json: &[u8]) -> Option<String> {
    let found = RefCell::new(None);
    let path = RefCell::new(String::new());
    let mut de = serde_json::Deserializer::from_slice(json);
    let _ = Walk {
        path: &path,
        found: &found,
    }
    .deserialize(&mut de);
    found.into_inner()
}

/// `validation_failed` naming the first repeated key of `json`, if any.
pub fn refuse_repeated_keys(json: &[u8]) -> Result<(), ToolError> {
    match repeated_key(json) {
        Some(path) => Err(super::field_error(&path, REPEATED_KEY_REASON)),
        None => Ok(()),
    }
}

/// Walks a value, keeping the path to it, and stops at the first repeat.
/// The path is one buffer, grown by a segment on the way down and cut back
/// on the way up: a copy per element would cost the path's length times
/// the elements (a long key over a long array: quadratic).
struct Walk<'a> {
    path: &'a RefCell<String>,
    found: &'a RefCell<Option<String>>,
}

impl Walk<'_> {
    fn child(&self) -> Walk<'_> {
        Walk {
            path: self.path,
            found: self.found,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        use std::fmt::Write as _;
        let mut i = 0usize;
        loop {
            let len = self.path.borrow().len();
            let _ = write!(self.path.borrow_mut(), "[{i}]");
            let next = seq.next_element_seed(self.child());
            self.path.borrow_mut().truncate(len);
            if next?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let len = self.path.borrow().len();
            {
                let mut path = self.path.borrow_mut();
                if len > 0 {
                    path.push('.');
                }
                path.push_str(&key);
            }
            if !seen.insert(key) {
                *self.found.borrow_mut() = Some(self.path.borrow().clone());
                return Err(A::Error::custom("repeated key"));
            }
            let value = map.next_value_seed(self.child());
            self.path.borrow_mut().truncate(len);
            value?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_key_repeated_in_one_object() {
        assert_eq!(repeated_key(br#"{"a":1,"b":2}"#), None);
        assert_eq!(repeated_key(br#"{"a":1,"a":2}"#).as_deref(), Some("a"));
        // Escapes decode first: the same key, written twice differently.
        assert_eq!(
            repeated_key(br#"{"scope":"x","\u0073cope":"y"}"#).as_deref(),
            Some("scope")
        );
        assert_eq!(
            repeated_key(br#"{"links":[{"dst":"m"},{"dst":"m","type":"x","type":"y"}]}"#)
                .as_deref(),
            Some("links[1].type")
        );
        // The same key in two objects is not a repeat.
        assert_eq!(repeated_key(br#"{"a":{"k":1},"b":{"k":2}}"#), None);
        // Not JSON: the caller's parser answers.
        assert_eq!(repeated_key(b"{\"a\":"), None);
        let e = refuse_repeated_keys(br#"{"content":"x","content":"y"}"#).unwrap_err();
        assert_eq!(e.code, crate::ErrorCode::ValidationFailed);
        assert_eq!(
            e.details.unwrap()["fields"][0]["path"],
            serde_json::json!("content")
        );
    }
}
