//! The capabilities of a routed endpoint: what both of its endpoints can honour.

use crate::endpoint::{Caps, Progress};

/// What both endpoints can honour: the smaller limits, the weaker guarantees. The backend and
/// provider are the network's (the class a job over several nodes belongs to); no load/store,
/// since only some peers could be mapped.
pub(super) fn joint_caps(node: &Caps, network: &Caps) -> Caps {
    Caps {
        backend: network.backend,
        provider: network.provider.clone(),
        inject_size: node.inject_size.min(network.inject_size),
        max_write: node.max_write.min(network.max_write),
        max_ctrl: node.max_ctrl.min(network.max_ctrl),
        imm_bits: node.imm_bits.min(network.imm_bits),
        writes_land_without_target_poll: node.writes_land_without_target_poll
            && network.writes_land_without_target_poll,
        ordered_writes: node.ordered_writes && network.ordered_writes,
        inline_completion: node.inline_completion.min(network.inline_completion),
        progress: if node.progress == Progress::Auto && network.progress == Progress::Auto {
            Progress::Auto
        } else {
            Progress::Manual
        },
        load_store: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(backend: &'static str, imm_bits: u32, inline: usize, progress: Progress, load_store: bool) -> Caps {
        Caps {
            backend,
            provider: backend.into(),
            inject_size: inline,
            max_write: 1 << 30,
            max_ctrl: if load_store { 4072 } else { 65536 },
            imm_bits,
            writes_land_without_target_poll: load_store,
            ordered_writes: true,
            inline_completion: inline,
            progress,
            load_store,
        }
    }

    #[test]
    fn joint_caps_are_what_both_honour() {
        let shm = caps("shm", 64, usize::MAX, Progress::Auto, true);
        let net = caps("tcp", 32, 4096, Progress::Manual, false);
        let j = joint_caps(&shm, &net);
        assert_eq!((j.backend, j.provider.as_str()), ("tcp", "tcp"), "the class of the network");
        assert_eq!((j.imm_bits, j.inline_completion, j.inject_size, j.max_ctrl), (32, 4096, 4096, 4072));
        assert_eq!((j.progress, j.load_store, j.writes_land_without_target_poll), (Progress::Manual, false, false));
        assert!(j.ordered_writes);
        let unordered = Caps { ordered_writes: false, ..net };
        assert!(!joint_caps(&shm, &unordered).ordered_writes);
    }
}
