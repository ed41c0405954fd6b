//! The executor's internal maps (keys are small integers the executor makes itself): hashed by
//! the fabric layer's FxHash-style [`fabcoll_fabric::keymap::KeyHasher`], one hasher for both
//! layers.

pub(crate) use fabcoll_fabric::keymap::{KeyMap as FastMap, KeySet as FastSet};
