//! Reading CSV by column name with errors that name the file, line, column and value.

use std::collections::HashMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::RunError;

/// A file's header: where each column is.
#[derive(Debug)]
pub(crate) struct Header {
    path: PathBuf,
    index: HashMap<String, usize>,
}

impl Header {
    /// The header of `path`, which must hold every column of `required`.
    pub(crate) fn new(
        path: &Path,
        header: &csv::StringRecord,
        required: &[&'static str],
    ) -> Result<Self, RunError> {
        let index: HashMap<String, usize> = header
            .iter()
            .enumerate()
            .map(|(i, h)| (h.to_string(), i))
            .collect();
        if let Some(column) = required.iter().find(|c| !index.contains_key(**c)) {
            return Err(RunError::MissingColumn {
                path: path.to_path_buf(),
                column,
            });
        }
        Ok(Header {
            path: path.to_path_buf(),
            index,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn line<'a>(&'a self, rec: &'a csv::StringRecord) -> Line<'a> {
        Line {
            header: self,
            rec,
            line: rec.position().map_or(0, csv::Position::line),
        }
    }
}

/// One record, read field by field.
#[derive(Debug)]
pub(crate) struct Line<'a> {
    header: &'a Header,
    rec: &'a csv::StringRecord,
    pub(crate) line: u64,
}

impl Line<'_> {
    /// The field's text; empty when the column is absent.
    pub(crate) fn text(&self, column: &str) -> &str {
        self.header
            .index
            .get(column)
            .and_then(|&i| self.rec.get(i))
            .unwrap_or("")
    }

    pub(crate) fn error(&self, column: &'static str, problem: impl Into<String>) -> RunError {
        RunError::Field {
            path: self.header.path.clone(),
            line: self.line,
            column,
            problem: problem.into(),
        }
    }

    /// A value that must be there.
    pub(crate) fn req<T: FromStr>(&self, column: &'static str) -> Result<T, RunError>
    where
        T::Err: Display,
    {
        self.opt(column)?
            .ok_or_else(|| self.error(column, "empty, a value is required"))
    }

    /// A value that may be empty.
    pub(crate) fn opt<T: FromStr>(&self, column: &'static str) -> Result<Option<T>, RunError>
    where
        T::Err: Display,
    {
        let s = self.text(column);
        if s.is_empty() {
            return Ok(None);
        }
        s.parse()
            .map(Some)
            .map_err(|e| self.error(column, format!("`{s}`: {e}")))
    }

    /// An optional number that must be finite and positive (or ≥ 0 with `zero_ok`).
    pub(crate) fn positive(
        &self,
        column: &'static str,
        zero_ok: bool,
    ) -> Result<Option<f64>, RunError> {
        let v: Option<f64> = self.opt(column)?;
        match v {
            Some(x) if !x.is_finite() || x < 0.0 || (x == 0.0 && !zero_ok) => Err(self.error(
                column,
                format!(
                    "`{}`: must be finite and {}",
                    self.text(column),
                    if zero_ok { "≥ 0" } else { "> 0" }
                ),
            )),
            v => Ok(v),
        }
    }
}

/// An empty string for `None`, the value's text otherwise.
pub(crate) fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or(String::new(), ToString::to_string)
}
