//! torch tensors as call buffers, for the `torch.distributed` backend (`fabcoll/torch.py`): a
//! CPU tensor's memory is read off the tensor itself (`data_ptr`, `numel`, `dtype`) instead of
//! through a numpy view of it, and the tensor is held until the call has finished.
//!
//! Why not `.numpy()`: every torch call paid for a detached tensor, a numpy array and a buffer
//! export before fabcoll saw an address; with more ranks than cores each rank's per-call Python
//! work sits on the critical path of its peers too (`docs/measurements/2026-11-30-torch-calls.md`).
//! torch's own dtypes name the datatype, bfloat16 and bool included, which numpy has no format for.

use fabcoll::Datatype;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::error::fail;

/// What the binding needs of the `torch` module, looked up once.
struct Torch {
    tensor: Py<PyType>,
    /// torch's dtype objects (singletons) and the datatype each moves as.
    dtypes: Vec<(Py<PyAny>, Datatype)>,
}

static TORCH: PyOnceLock<Torch> = PyOnceLock::new();

/// torch's dtype names and fabcoll's datatypes; bool moves as bytes, the unsigned wider types
/// only exist in recent torch versions.
const DTYPES: [(&str, Datatype); 15] = [
    ("float16", Datatype::F16),
    ("bfloat16", Datatype::BF16),
    ("float32", Datatype::F32),
    ("float64", Datatype::F64),
    ("int8", Datatype::I8),
    ("int16", Datatype::I16),
    ("int32", Datatype::I32),
    ("int64", Datatype::I64),
    ("uint8", Datatype::U8),
    ("bool", Datatype::U8),
    ("uint16", Datatype::U16),
    ("uint32", Datatype::U32),
    ("uint64", Datatype::U64),
    ("complex64", Datatype::C64),
    ("complex128", Datatype::C128),
];

fn torch(py: Python<'_>) -> PyResult<&'static Torch> {
    TORCH.get_or_try_init(py, || {
        let m = py.import("torch")?;
        let tensor = m.getattr("Tensor")?.cast_into::<PyType>()?.unbind();
        let mut dtypes = Vec::new();
        for (name, dt) in DTYPES {
            if let Ok(d) = m.getattr(name) {
                dtypes.push((d.unbind(), dt));
            }
        }
        Ok(Torch { tensor, dtypes })
    })
}

/// A CPU tensor lent to a call: its bytes' address and length and its datatype, read when the call
/// starts, and the tensor itself, which keeps its storage alive until this value drops.
pub struct Tensor {
    _obj: Py<PyAny>,
    pub addr: usize,
    pub bytes: usize,
    pub dt: Datatype,
    pub what: &'static str,
}

impl Tensor {
    /// Reads `obj`, which must be a dense, contiguous torch tensor in CPU memory of a datatype
    /// fabcoll moves. `what` names the argument in errors.
    pub fn get(obj: &Bound<'_, PyAny>, what: &'static str) -> PyResult<Tensor> {
        let py = obj.py();
        let torch = torch(py)?;
        if !obj.is_instance(torch.tensor.bind(py))? {
            let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            return Err(fail(format!("fabcoll backend: {what} is a {ty}, not a tensor")));
        }
        if !obj.getattr(intern!(py, "is_cpu"))?.is_truthy()? {
            let device = obj.getattr(intern!(py, "device"))?;
            return Err(fail(format!("fabcoll backend: {what} is on {device}; this backend moves CPU tensors only")));
        }
        let sparse = obj.getattr(intern!(py, "is_sparse"))?.is_truthy()?;
        if sparse || !obj.call_method0(intern!(py, "is_contiguous"))?.is_truthy()? {
            return Err(fail(format!(
                "fabcoll backend: {what} is not a dense contiguous tensor (call .contiguous() first)"
            )));
        }
        let dtype = obj.getattr(intern!(py, "dtype"))?;
        let Some(&(_, dt)) = torch.dtypes.iter().find(|(d, _)| d.is(&dtype)) else {
            return Err(fail(format!(
                "fabcoll backend: {what} has dtype {dtype}, which fabcoll does not reduce or move"
            )));
        };
        let addr: usize = obj.call_method0(intern!(py, "data_ptr"))?.extract()?;
        let numel: usize = obj.call_method0(intern!(py, "numel"))?.extract()?;
        Ok(Tensor { _obj: obj.clone().unbind(), addr, bytes: numel * dt.size(), dt, what })
    }
}
