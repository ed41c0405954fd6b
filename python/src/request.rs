//! `fabcoll._native.Request`: a nonblocking collective in flight, holding the exports of its
//! buffers, or its tensors (so they stay where they are), until it has finished. `wait()` releases
//! the GIL; the library's progress thread moves the collective meanwhile (`FABCOLL_PROGRESS`), so
//! Python code that computes between the start and the wait overlaps with it.

use std::sync::{Mutex, MutexGuard};

use fabcoll::RawRequest;
use pyo3::prelude::*;

use crate::buffer::Source;
use crate::error::fail;

/// The call and the buffers it was lent. Fields drop in order: the call (which waits when
/// unfinished) before the buffers' exports.
struct Pending {
    raw: RawRequest,
    _held: Vec<Source>,
}

enum State {
    Running(Pending),
    /// A `wait()` in another thread has taken the call.
    Waiting,
    /// Finished: `Ok`, or the library's message.
    Done(Result<(), String>),
}

/// A nonblocking collective: `wait()` finishes it, `test()` says whether it has finished. Both
/// raise `fabcoll.Error` when it failed, every time they are called after.
#[pyclass(module = "fabcoll._native", frozen)]
pub struct Request {
    state: Mutex<State>,
    algorithm: &'static str,
}

impl Request {
    pub fn new(raw: RawRequest, held: Vec<Source>) -> Request {
        let algorithm = raw.algorithm();
        Request { state: Mutex::new(State::Running(Pending { raw, _held: held })), algorithm }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn outcome(r: &Result<(), String>) -> PyResult<()> {
    r.clone().map_err(fail)
}

#[pymethods]
impl Request {
    /// Waits until the collective has finished, with the GIL released.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        loop {
            let taken = {
                let mut s = self.lock();
                match std::mem::replace(&mut *s, State::Waiting) {
                    State::Running(p) => Some(p),
                    State::Done(r) => {
                        *s = State::Done(r.clone());
                        return outcome(&r);
                    }
                    State::Waiting => None,
                }
            };
            match taken {
                Some(mut p) => {
                    let r = py.detach(|| p.raw.wait()).map_err(|e| e.to_string());
                    drop(p);
                    *self.lock() = State::Done(r.clone());
                    return outcome(&r);
                }
                // Another thread waits: let it finish.
                None => py.detach(|| std::thread::sleep(std::time::Duration::from_micros(50))),
            }
        }
    }

    /// Whether the collective has finished (moves it once; never blocks).
    fn test(&self) -> PyResult<bool> {
        let mut s = self.lock();
        let r = match &mut *s {
            State::Running(p) => match p.raw.test() {
                None => return Ok(false),
                Some(r) => r.map_err(|e| e.to_string()),
            },
            State::Waiting => return Ok(false),
            State::Done(r) => return outcome(r).map(|()| true),
        };
        *s = State::Done(r.clone());
        outcome(&r).map(|()| true)
    }

    /// The algorithm the collective runs.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.algorithm
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        // An abandoned request still owns its buffers' exports: finish it without the GIL first.
        let state = std::mem::replace(self.state.get_mut().unwrap_or_else(|e| e.into_inner()), State::Waiting);
        if let State::Running(mut p) = state {
            Python::attach(|py| {
                let _ = py.detach(|| p.raw.wait());
                drop(p);
            });
        }
    }
}
