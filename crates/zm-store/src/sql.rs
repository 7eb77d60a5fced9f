//! A small dynamic-SQL builder: `$n` placeholders work on both backends.

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, AssertSqlSafe};

/// A bound value.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    I64(i64),
    Str(String),
}

/// SQL text with numbered placeholders and their values.
#[derive(Debug, Default, Clone)]
pub(crate) struct Sql {
    pub text: String,
    pub args: Vec<Arg>,
}

impl Sql {
    pub(crate) fn new(text: &str) -> Self {
        Sql {
            text: text.to_string(),
            args: Vec::new(),
        }
    }
    /// `template` with every `{name}` bound to the value `values` gives
    /// that name (each occurrence its own placeholder, so a statement binds
    /// exactly what it uses). Panics on a name `values` lacks: templates
    /// are constants of the code.
    pub(crate) fn template(template: &str, values: &[(&str, &Arg)]) -> Self {
        let mut sql = Sql::default();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let close = open + rest[open..].find('}').expect("a closed {name}");
            let name = &rest[open + 1..close];
            let value = values
                .iter()
                .find(|(n, _)| *n == name)
                .map_or_else(|| panic!("no value for {{{name}}}"), |(_, v)| (*v).clone());
            sql.push(&rest[..open]).bind(value);
            rest = &rest[close + 1..];
        }
        sql.push(rest);
        sql
    }
    pub(crate) fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }
    /// Append a placeholder bound to `arg`.
    pub(crate) fn bind(&mut self, arg: Arg) -> &mut Self {
        self.args.push(arg);
        let n = self.args.len();
        self.text.push_str(&format!("${n}"));
        self
    }
    pub(crate) fn bind_str(&mut self, s: impl Into<String>) -> &mut Self {
        self.bind(Arg::Str(s.into()))
    }
    pub(crate) fn bind_i64(&mut self, v: i64) -> &mut Self {
        self.bind(Arg::I64(v))
    }
    /// A parenthesised list of string placeholders, `($1, $2, …)`. An empty
    /// list becomes `(NULL)`: valid SQL on both backends, and `x IN (NULL)`
    /// matches no row (so does `x NOT IN (NULL)`: it is never true).
    pub(crate) fn bind_list<I: IntoIterator<Item = S>, S: Into<String>>(
        &mut self,
        items: I,
    ) -> &mut Self {
        self.text.push('(');
        let mut first = true;
        for s in items {
            if !first {
                self.text.push_str(", ");
            }
            first = false;
            self.bind_str(s);
        }
        if first {
            // `IN (NULL)`: an empty list matches nothing.
            self.text.push_str("NULL");
        }
        self.text.push(')');
        self
    }
    /// ` AND {column} NOT IN (…)` for a non-empty `items`; nothing for an
    /// empty one (whose `NOT IN (NULL)` would leave no row).
    pub(crate) fn and_not_in<I: IntoIterator<Item = S>, S: Into<String>>(
        &mut self,
        column: &str,
        items: I,
    ) -> &mut Self {
        let items: Vec<String> = items.into_iter().map(Into::into).collect();
        if !items.is_empty() {
            self.push(&format!(" AND {column} NOT IN "));
            self.bind_list(items);
        }
        self
    }
    pub(crate) fn query(&self) -> Query<'_, Any, AnyArguments> {
        let mut q = sqlx::query(AssertSqlSafe(self.text.clone()));
        for a in &self.args {
            q = match a {
                Arg::I64(v) => q.bind(*v),
                Arg::Str(v) => q.bind(v.clone()),
            };
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_binds_each_occurrence_in_order() {
        let (x, y) = (Arg::Str("x".into()), Arg::I64(7));
        let sql = Sql::template("a = {x} AND b = {y} OR c = {x}", &[("x", &x), ("y", &y)]);
        assert_eq!(sql.text, "a = $1 AND b = $2 OR c = $3");
        let args: Vec<String> = sql.args.iter().map(|a| format!("{a:?}")).collect();
        assert_eq!(args, ["Str(\"x\")", "I64(7)", "Str(\"x\")"]);
    }
}
