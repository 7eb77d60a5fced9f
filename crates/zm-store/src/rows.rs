//! Typed reads of rows. Every column is read through [`col`], every
//! stored enum through [`enum_col`], every stored id through [`id_col`]: a
//! value this build cannot read — a NULL where none belongs, an unknown
//! kind or visibility, unparseable JSON — is a corrupt row, logged with its
//! id and answered with `internal`, never silently turned into a default.

use sqlx::any::AnyRow;
use sqlx::{Any, Decode, Row, Type};
use zm_contracts::{EntityId, MemoryId, ToolError, UserId, WireEnum};

/// A closed vocabulary the store keeps in a column but the contract does
/// not carry (roles, token kinds, rule states): the same [`WireEnum`]
/// conversions as the contract's enums, so it is read through
/// [`enum_col`] / [`parse_stored`] and written with `as_str()`.
macro_rules! stored_enum {
    ($(#[$meta:meta])* $vis:vis $name:ident { $($(#[$vmeta:meta])* $variant:ident = $wire:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];
            /// The stored name.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire,)* }
            }
            /// Parse a stored name.
            pub fn parse(s: &str) -> Option<$name> {
                match s { $($wire => Some($name::$variant),)* _ => None }
            }
        }

        impl zm_contracts::WireEnum for $name {
            const VOCABULARY: &'static str = stringify!($name);
            fn wire_name(self) -> &'static str {
                self.as_str()
            }
            fn from_wire_name(s: &str) -> Option<Self> {
                Self::parse(s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use stored_enum;

/// A row struct decoded from a query result.
pub(crate) trait FromAnyRow: Sized {
    fn from_row(row: &AnyRow) -> Result<Self, ToolError>;

    /// Decode every row of a result.
    fn from_rows(rows: &[AnyRow]) -> Result<Vec<Self>, ToolError> {
        rows.iter().map(Self::from_row).collect()
    }
}

fn row_id(row: &AnyRow) -> String {
    row.try_get::<String, _>("id")
        .unwrap_or_else(|_| "?".to_string())
}

/// A row that breaks an invariant the schema cannot state: logged with
/// its id, answered `internal`.
pub(crate) fn corrupt_row(row: &AnyRow, what: &str) -> ToolError {
    tracing::error!(target: "zm_store", row = %row_id(row), "corrupt row: {what}");
    ToolError::internal()
}

/// One column of a row, in its Rust type.
pub(crate) fn col<'r, T>(row: &'r AnyRow, name: &str) -> Result<T, ToolError>
where
    T: Decode<'r, Any> + Type<Any>,
{
    row.try_get::<T, _>(name).map_err(|e| {
        tracing::error!(target: "zm_store", row = %row_id(row), column = name, error = %e, "unreadable column");
        ToolError::internal()
    })
}

/// A 0/1 integer column as a flag.
pub(crate) fn flag_col(row: &AnyRow, name: &str) -> Result<bool, ToolError> {
    col::<i64>(row, name).map(|v| v != 0)
}

/// A stored enum (its wire name) as its Rust type.
pub(crate) fn enum_col<T: WireEnum>(row: &AnyRow, name: &str) -> Result<T, ToolError> {
    let raw: String = col(row, name)?;
    parse_stored(&raw, name, &row_id(row))
}

/// Parse a stored wire name; an unknown one is a corrupt row.
pub(crate) fn parse_stored<T: WireEnum>(raw: &str, column: &str, id: &str) -> Result<T, ToolError> {
    T::from_wire_name(raw).ok_or_else(|| {
        tracing::error!(
            target: "zm_store",
            row = %id,
            column,
            value = raw,
            vocabulary = T::VOCABULARY,
            "corrupt row: a stored value this build does not know"
        );
        ToolError::internal()
    })
}

/// A JSON text column as a value; text that does not parse is a corrupt row.
pub(crate) fn json_col<T: serde::de::DeserializeOwned>(
    row: &AnyRow,
    name: &str,
) -> Result<T, ToolError> {
    let raw: String = col(row, name)?;
    serde_json::from_str(&raw).map_err(|e| {
        tracing::error!(target: "zm_store", row = %row_id(row), column = name, error = %e, "corrupt row: unparseable JSON");
        ToolError::internal()
    })
}

/// A typed id the store wrote itself: canonical, so it is wrapped as is.
pub(crate) trait StoredId: Sized {
    fn from_stored(raw: String) -> Self;
}

impl StoredId for MemoryId {
    fn from_stored(raw: String) -> Self {
        MemoryId::from_trusted(raw)
    }
}

impl StoredId for EntityId {
    fn from_stored(raw: String) -> Self {
        EntityId::from_trusted(raw)
    }
}

impl StoredId for UserId {
    fn from_stored(raw: String) -> Self {
        UserId::from_trusted(raw)
    }
}

/// An id column as its typed id.
pub(crate) fn id_col<T: StoredId>(row: &AnyRow, name: &str) -> Result<T, ToolError> {
    col::<String>(row, name).map(T::from_stored)
}

/// A nullable id column as its typed id.
pub(crate) fn opt_id_col<T: StoredId>(row: &AnyRow, name: &str) -> Result<Option<T>, ToolError> {
    col::<Option<String>>(row, name).map(|v| v.map(T::from_stored))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zm_contracts::{ErrorCode, MemoryKind};

    #[test]
    fn an_unknown_stored_value_is_internal_not_a_default() {
        let ok: MemoryKind = parse_stored("decision", "kind", "mem_x").unwrap();
        assert_eq!(ok, MemoryKind::Decision);
        let err = parse_stored::<MemoryKind>("rumour", "kind", "mem_x").unwrap_err();
        assert_eq!(err.code, ErrorCode::Internal);
    }
}
