//! zm-store: persistence and the memory operations behind every tool.

pub mod fts;
pub mod guard;
pub mod hint;
pub mod similarity;
