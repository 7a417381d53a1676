//! Why an import file is refused ([`ImportError`]): one line naming where (`FILE:LINE`,
//! `FILE: document 2: CronJob x`, `FILE: job x`) and what is wrong there, the parser's or
//! the model's error kept as the source.

/// An entry, or the file, refused: `cronrun import` writes nothing then.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Where in the file, and what is wrong there.
    #[error("{at}: {source}")]
    At { at: String, source: Box<ImportError> },
    /// A refusal that is its text alone: nothing below it caused it.
    #[error("{0}")]
    Refused(String),
    #[error("not YAML: {0}")]
    NotYaml(#[source] serde_yaml_ng::Error),
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("not a JSON object of job definitions: {0}")]
    NotDefinitions(#[source] serde_json::Error),
    /// A job that does not validate: the model's error says why.
    #[error(transparent)]
    Invalid(#[from] crate::Error),
    /// A setting line whose value is refused (`CRON_TZ` naming no zone).
    #[error("{name}: {source}")]
    Setting { name: String, source: Box<dyn std::error::Error + Send + Sync> },
}

impl ImportError {
    /// Puts an error at `at`, for `map_err`.
    pub fn at(at: impl Into<String>) -> impl Fn(ImportError) -> ImportError {
        let at = at.into();
        move |e| ImportError::At { at: at.clone(), source: Box::new(e) }
    }
}

impl From<String> for ImportError {
    fn from(why: String) -> Self {
        ImportError::Refused(why)
    }
}

impl From<&str> for ImportError {
    fn from(why: &str) -> Self {
        ImportError::Refused(why.to_string())
    }
}
