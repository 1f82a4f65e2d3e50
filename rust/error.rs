//! The one error type of the Rust core. Each variant maps onto one class of
//! `fastnnef.exceptions` (see `python/mod.rs`); messages say what was wrong and how to fix it.

use std::path::PathBuf;

/// Everything the Rust core can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A caller passed a value the core cannot use (bad encoding tag, dtype mismatch, bad label).
    #[error("{0}")]
    InvalidArgument(String),
    /// A tensor exceeds a `.dat` format limit (payload over 4 GiB, rank over 8, dim over u32).
    #[error("{0}")]
    TensorTooLarge(String),
    /// A value does not fit the requested dtype (bf16 -> f16 overflow).
    #[error("{0}")]
    DtypeOverflow(String),
    /// The tensor cannot be quantized with the requested scheme.
    #[error("{0}")]
    ImpossibleQuantization(String),
    /// A `.dat` byte stream is malformed.
    #[error("{0}")]
    DatFormat(String),
    /// An OS-level failure while writing or reading an artefact, with the path involved.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint is malformed or does not match the model (missing, extra, wrong shape or dtype).
    #[error("{0}")]
    Checkpoint(String),
    /// tract failed to load, optimize or run an artefact; the message holds tract's chain.
    #[error("{0}")]
    Tract(String),
}

/// Shorthand used across the core.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An IO error with the action and path it happened on.
    pub fn io(action: &str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { context: format!("{action} {}", path.into().display()), source }
    }
}
