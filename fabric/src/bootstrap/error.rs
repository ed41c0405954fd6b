use std::time::Duration;

/// What can go wrong while bootstrapping.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("bootstrap I/O error ({context}): {source}")]
    Io { context: String, source: std::io::Error },
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout { what: String, after: Duration },
    #[error("store refused the connection: {0}")]
    Auth(String),
    #[error("store protocol error: {0}")]
    Protocol(String),
    #[error("bootstrap configuration: {0}")]
    Config(String),
}

impl BootstrapError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BootstrapError {
        let context = context.into();
        move |source| BootstrapError::Io { context, source }
    }
}
