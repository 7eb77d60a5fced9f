//! Resource URIs: `zm://memory/{id}` and `zm://rules`.

use crate::ids::{IdError, MemoryId};

/// The URI template of one memory.
pub const MEMORY_TEMPLATE: &str = "zm://memory/{id}";
/// The prefix of a memory URI.
pub const MEMORY_PREFIX: &str = "zm://memory/";
/// The caller's standing rules.
pub const RULES_URI: &str = "zm://rules";

/// A parsed resource URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceUri {
    Memory(MemoryId),
    Rules,
}

/// Why a URI was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    #[error("not a zero-memory resource URI: {0}")]
    Unknown(String),
    #[error("not a memory id: {0}")]
    NotAMemoryId(String, #[source] IdError),
}

/// `zm://memory/<id>`.
pub fn memory_uri(id: &MemoryId) -> String {
    format!("{MEMORY_PREFIX}{id}")
}

impl ResourceUri {
    pub fn parse(uri: &str) -> Result<ResourceUri, UriError> {
        if uri == RULES_URI {
            return Ok(ResourceUri::Rules);
        }
        if let Some(rest) = uri.strip_prefix(MEMORY_PREFIX) {
            return MemoryId::parse(rest)
                .map(ResourceUri::Memory)
                .map_err(|e| UriError::NotAMemoryId(rest.to_string(), e));
        }
        Err(UriError::Unknown(uri.to_string()))
    }

    pub fn to_uri(&self) -> String {
        match self {
            ResourceUri::Memory(id) => memory_uri(id),
            ResourceUri::Rules => RULES_URI.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_parse() {
        let id = MemoryId::generate();
        let uri = memory_uri(&id);
        assert_eq!(
            ResourceUri::parse(&uri).unwrap(),
            ResourceUri::Memory(id.clone())
        );
        assert_eq!(ResourceUri::Memory(id).to_uri(), uri);
        assert_eq!(
            ResourceUri::parse("zm://rules").unwrap(),
            ResourceUri::Rules
        );
        assert!(matches!(
            ResourceUri::parse("zm://memory/ent_0123456789abcdef.0123456789"),
            Err(UriError::NotAMemoryId(..))
        ));
        assert!(matches!(
            ResourceUri::parse("zm://other"),
            Err(UriError::Unknown(_))
        ));
    }
}
