//! zm-mcp: see ARCHITECTURE.md. Its surface arrives with its own issue; it depends only on zm-contracts (and zm-store) and holds no SQL.
