//! Backend `local` (in progress; lands in the next commits).

use crate::error::{Error, Result};
use crate::{Config, Endpoint};

/// Opens a `local` endpoint.
pub fn open(_cfg: &Config) -> Result<Box<dyn Endpoint>> {
    Err(Error::Unsupported { backend: "local", what: "not yet implemented".into() })
}
