//! Backend `shm` (in progress; lands in the next commits).

use crate::error::{Error, Result};
use crate::{Config, Endpoint};

/// Opens a `shm` endpoint.
pub fn open(_cfg: &Config) -> Result<Box<dyn Endpoint>> {
    Err(Error::Unsupported { backend: "shm", what: "not yet implemented".into() })
}
