//! fabcoll for Python: the native module `fabcoll._native` of the `fabcoll` package
//! (`python/fabcoll/`, built with maturin). It offers one communicator type whose collectives
//! take any C-contiguous buffer-protocol object (numpy arrays, bytearray, memoryview, torch CPU
//! tensors through `.numpy()`) without copying, blocking or as a `Request`, and the
//! `fabcoll.Error` exception. It calls the public API of the `fabcoll` crate only; the
//! `torch.distributed` backend is Python on top (`fabcoll/torch.py`), whose calls hand their
//! tensors over as they are (`tensor`).

mod buffer;
mod call;
mod comm;
mod error;
mod request;
mod tensor;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<comm::Communicator>()?;
    m.add_class::<request::Request>()?;
    m.add("Error", m.py().get_type::<error::Error>())?;
    m.add("DATATYPES", buffer::NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>())?;
    Ok(())
}
