//! `fabcoll.Error` (a `RuntimeError`): every failure of the library, and every bad argument the
//! binding finds, reaches Python as this exception with fabcoll's message.

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyErr;

pyo3::create_exception!(fabcoll, Error, PyRuntimeError, "A fabcoll failure or a bad argument, with its message.");

/// A `fabcoll.Error` with this message.
pub fn fail(msg: impl Into<String>) -> PyErr {
    Error::new_err(msg.into())
}

/// The library's error as a `fabcoll.Error`.
pub fn lib(e: fabcoll::Error) -> PyErr {
    Error::new_err(e.to_string())
}
