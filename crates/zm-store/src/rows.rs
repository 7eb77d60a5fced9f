//! Typed reads of rows. Every column is read through [`col`], every
//! stored enum through [`enum_col`]: a value this build cannot read — a
//! NULL where none belongs, an unknown kind or visibility — is a corrupt
//! row, logged with its id and answered with `internal`, never silently
//! turned into a default.

use sqlx::any::AnyRow;
use sqlx::{Any, Decode, Row, Type};
use zm_contracts::{ToolError, WireEnum};

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
