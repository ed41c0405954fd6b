//! Algorithm choice: decision files (the versioned JSON format of [`file`](mod@file), validated and compiled
//! into [`Decisions`]), the embedded default (`defaults.json`: thakur-rabenseifner-gropp 2005 §4
//! and §5.4 cutoffs; on ranks spread over several nodes of several ranks, the hierarchical
//! algorithms where the two-level simulator says they win,
//! `docs/measurements/2026-11-28-hier-exchanges-sim.md`), a file named by `FABCOLL_TUNING_FILE`
//! that replaces the default for the operations it covers, and the `FABCOLL_ALGO` override.
//! Per-call options and `FABCOLL_ALGO` win over the decisions; only registered algorithms whose
//! restrictions hold are chosen.

mod decisions;
pub mod file;
mod json;
pub mod model;

use std::sync::{Arc, OnceLock};

use fabcoll_collectives::registry;
use fabcoll_collectives::{CollArgs, Collective};
use fabcoll_fabric::settings;

pub use decisions::{Decisions, SUPPORTED_VERSIONS};
pub use file::FabricClass;

use crate::error::{Error, Result};

/// What the rules look at (see the [`file`](mod@file) module doc).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Features {
    /// Bytes of one block (average block for v-variants).
    pub msg: u64,
    /// Bytes of the whole result (p blocks).
    pub total: u64,
    pub p: u32,
    pub commutative: bool,
    /// The class of the communicator's fabric ([`FabricClass::Node`] unless set with
    /// [`Features::on`]).
    pub fabric: FabricClass,
    /// Whether every rank on a node has a CPU of its own (`true` unless set with
    /// [`Features::sharing_cpus`]): algorithms in which all ranks copy at once win only then.
    pub own_cpu: bool,
}

impl Features {
    /// The features of a call (`args.elem_size`-byte elements) on a node-local fabric; see
    /// [`Features::on`] for another class.
    pub fn of(args: &CollArgs) -> Result<Features> {
        let es = u64::from(args.elem_size);
        let p = u64::from(args.size);
        let (msg, total) = if args.coll.is_vector() {
            let total = args.total_count()?.saturating_mul(es);
            (total / p.max(1), total)
        } else {
            let msg = args.count.saturating_mul(es);
            (msg, msg.saturating_mul(p))
        };
        Ok(Features {
            msg,
            total,
            p: args.size,
            commutative: args.commutative,
            fabric: FabricClass::Node,
            own_cpu: true,
        })
    }

    /// These features on a fabric of class `fabric`.
    pub fn on(self, fabric: FabricClass) -> Features {
        Features { fabric, ..self }
    }

    /// These features where the ranks of a node share its CPUs (`sharing` = more ranks than CPUs).
    pub fn sharing_cpus(self, sharing: bool) -> Features {
        Features { own_cpu: !sharing, ..self }
    }
}

/// The decisions communicators start with: the file named by `FABCOLL_TUNING_FILE` (read and
/// validated once; its uncovered operations fall back to the embedded defaults), else the embedded
/// defaults. A bad file is an error naming the file and the rule, every time this is asked.
pub fn active() -> Result<Arc<Decisions>> {
    static A: OnceLock<std::result::Result<Arc<Decisions>, String>> = OnceLock::new();
    let knob = &settings::FABCOLL_TUNING_FILE;
    let r = A.get_or_init(|| match knob.get() {
        Ok(Some(path)) => Decisions::from_file(&path).map(Arc::new).map_err(|e| e.to_string()),
        Ok(None) => Decisions::embedded().map(|d| Arc::new(d.clone())).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    });
    r.clone().map_err(|msg| Error::InvalidArgument { coll: knob.name, msg })
}

/// `FABCOLL_ALGO=allreduce:ring,bcast:binomial` parsed (operation names checked).
pub fn parse_overrides(s: &str) -> Result<Vec<(Collective, String)>> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (op, name) = item.split_once(':').ok_or_else(|| Error::InvalidArgument {
            coll: settings::FABCOLL_ALGO.name,
            msg: format!("{item:?} is not <operation>:<algorithm>"),
        })?;
        let coll = Collective::from_name(op.trim()).ok_or_else(|| Error::InvalidArgument {
            coll: settings::FABCOLL_ALGO.name,
            msg: format!("unknown operation {op:?}"),
        })?;
        registry::find(coll, name.trim())?;
        out.push((coll, name.trim().to_owned()));
    }
    Ok(out)
}

/// The overrides of `FABCOLL_ALGO` ([`settings`]), read once.
pub fn env_overrides() -> Result<&'static [(Collective, String)]> {
    static O: OnceLock<std::result::Result<Vec<(Collective, String)>, String>> = OnceLock::new();
    let knob = &settings::FABCOLL_ALGO;
    let r = O.get_or_init(|| match knob.get() {
        Ok(Some(s)) => parse_overrides(&s).map_err(|e| e.to_string()),
        Ok(None) => Ok(Vec::new()),
        Err(e) => Err(e.to_string()),
    });
    r.as_deref().map_err(|e| Error::InvalidArgument { coll: knob.name, msg: e.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_defaults_validate_and_cover_every_operation() {
        let d = Decisions::embedded().unwrap();
        assert!(d.file().rules.len() > 20);
        for coll in Collective::ALL {
            assert!(d.covers(coll), "no rule for {coll}");
        }
        let prov = d.file().provenance.as_ref().unwrap();
        assert_eq!(prov.tool, "embedded defaults (thakur-rabenseifner-gropp 2005 §4, §5.4)");
    }

    #[test]
    fn thakur_cutoffs() {
        let d = Decisions::embedded().unwrap();
        let pick = |coll: Collective, p: u32, count: u64, comm: bool| {
            let args = CollArgs::new(coll, 0, p, count).with_commutative(comm);
            let f = Features::of(&args).unwrap();
            assert_eq!(
                f,
                Features {
                    msg: count * 4,
                    total: count * 4 * u64::from(p),
                    p,
                    commutative: comm,
                    fabric: FabricClass::Node,
                    own_cpu: true
                }
            );
            d.choose(&args, &f).unwrap().0.name
        };
        assert_eq!(pick(Collective::Allreduce, 8, 256, true), "recursive_doubling");
        assert_eq!(pick(Collective::Allreduce, 8, 512, true), "recursive_doubling");
        assert_eq!(pick(Collective::Allreduce, 8, 513, true), "rabenseifner");
        assert_eq!(pick(Collective::Allreduce, 8, 1 << 14, true), "rabenseifner");
        assert_eq!(pick(Collective::Bcast, 4, 1 << 20, true), "binomial");
        assert_eq!(pick(Collective::Bcast, 4, 16, true), "binomial");
        assert_eq!(pick(Collective::Bcast, 3, 16, true), "linear");
        assert_eq!(pick(Collective::Bcast, 2, 16, true), "binomial");
        assert_eq!(pick(Collective::Bcast, 5, 16, true), "binomial");
        assert_eq!(pick(Collective::Bcast, 16, 3071, true), "binomial");
        assert_eq!(pick(Collective::Bcast, 16, 1 << 14, true), "scatter_recursive_doubling_allgather");
        // on networks the tree stays up to 512 KiB (its lg p messages against 2 lg p), then
        // scatter + recursive doubling at power-of-two p (16 cores, tcp, p = 16)
        assert_eq!(pick_on(Collective::Bcast, 16, 32 << 10, FabricClass::Network), "binomial");
        assert_eq!(pick_on(Collective::Bcast, 16, (512 << 10) - 4, FabricClass::Network), "binomial");
        assert_eq!(
            pick_on(Collective::Bcast, 16, 512 << 10, FabricClass::Network),
            "scatter_recursive_doubling_allgather"
        );
        assert_eq!(pick_on(Collective::Bcast, 12, 1 << 20, FabricClass::Network), "scatter_ring_allgather");
        assert_eq!(pick_on(Collective::Bcast, 4, 1 << 20, FabricClass::Network), "binomial");
        // ... unless the ranks share CPUs: then the tree's fewer bytes copied win at every size,
        // as do recursive doubling's for allgather and one send per block for alltoall
        let sharing = |coll, p: u32, bytes: u64, fabric| {
            let args = CollArgs::new(coll, 0, p, bytes / 4);
            d.choose(&args, &Features::of(&args).unwrap().on(fabric).sharing_cpus(true)).unwrap().0.name
        };
        for fabric in [FabricClass::Node, FabricClass::Network] {
            assert_eq!(sharing(Collective::Bcast, 16, 1 << 20, fabric), "binomial");
            assert_eq!(sharing(Collective::Bcast, 4, (2 << 20) - 4, fabric), "binomial");
            assert_eq!(sharing(Collective::Allgather, 8, 1 << 20, fabric), "recursive_doubling");
        }
        // ... and on a node of 4-8 ranks from 2 MiB, the root sends to every rank (no relay waits)
        for p in [4, 6, 8] {
            assert_eq!(sharing(Collective::Bcast, p, 2 << 20, FabricClass::Node), "linear");
        }
        assert_eq!(sharing(Collective::Bcast, 9, 16 << 20, FabricClass::Node), "binomial");
        assert_eq!(sharing(Collective::Bcast, 3, 16 << 20, FabricClass::Node), "binomial");
        assert_eq!(sharing(Collective::Bcast, 4, 16 << 20, FabricClass::Network), "binomial");
        assert_eq!(sharing(Collective::Allgather, 6, 1 << 20, FabricClass::Node), "ring");
        assert_eq!(sharing(Collective::Alltoall, 8, 64, FabricClass::Node), "simple");
        assert_eq!(sharing(Collective::Alltoall, 8, 256 << 10, FabricClass::Node), "simple");
        assert_eq!(sharing(Collective::Alltoall, 8, 64, FabricClass::Network), "bruck");
        assert_eq!(pick(Collective::Bcast, 16, 1 << 17, true), "scatter_ring_allgather");
        assert_eq!(pick(Collective::Bcast, 12, 1 << 14, true), "scatter_ring_allgather");
        assert_eq!(pick(Collective::Reduce, 8, 1 << 10, false), "binomial");
        assert_eq!(pick(Collective::Reduce, 8, 1 << 10, true), "rabenseifner");
        assert_eq!(pick(Collective::Allgather, 8, 16, true), "recursive_doubling");
        assert_eq!(pick(Collective::Allgather, 7, 16, true), "bruck");
        assert_eq!(pick(Collective::Allgather, 7, 1 << 20, true), "ring");
        assert_eq!(pick(Collective::Alltoall, 8, 16, true), "bruck");
        assert_eq!(pick(Collective::Alltoall, 4, 16, true), "simple");
        // on a node every large block goes at once (the pairwise steps stay for networks)
        assert_eq!(pick(Collective::Alltoall, 8, 1 << 20, true), "simple");
        assert_eq!(pick(Collective::Alltoall, 6, 1 << 16, true), "spreading_simple");
        assert_eq!(pick(Collective::Alltoall, 2, 1 << 20, true), "pairwise_xor");
        assert_eq!(pick_on(Collective::Alltoall, 8, 4 << 20, FabricClass::Network), "pairwise_xor");
        assert_eq!(pick_on(Collective::Alltoall, 6, 4 << 20, FabricClass::Network), "pairwise_ring");
        assert_eq!(pick(Collective::ReduceScatter, 4, 16, false), "recursive_doubling");
        assert_eq!(pick(Collective::ReduceScatterBlock, 4, 16, true), "recursive_halving");
        assert_eq!(pick(Collective::ReduceScatterBlock, 4, 1 << 20, true), "pairwise");
    }

    /// The embedded decisions' algorithm for `coll` at `p` ranks, `bytes` per block (f32), on `fabric`.
    fn pick_on(coll: Collective, p: u32, bytes: u64, fabric: FabricClass) -> &'static str {
        let d = Decisions::embedded().unwrap();
        let args = CollArgs::new(coll, 0, p, bytes / 4);
        d.choose(&args, &Features::of(&args).unwrap().on(fabric)).unwrap().0.name
    }

    #[test]
    fn network_fabrics_use_recursive_doubling_longer() {
        let pick = |p, bytes, fabric| pick_on(Collective::Allreduce, p, bytes, fabric);
        assert_eq!(pick(2, 512 << 10, FabricClass::Network), "recursive_doubling");
        assert_eq!(pick(2, 32 << 10, FabricClass::Node), "rabenseifner");
        assert_eq!(pick(2, 1 << 20, FabricClass::Network), "rabenseifner");
        assert_eq!(pick(2, 16 << 10, FabricClass::Node), "recursive_doubling");
        // p > 2: up to 32 KiB on network fabrics, thakur's 2 KiB on node-local ones.
        assert_eq!(pick(4, 32 << 10, FabricClass::Network), "recursive_doubling");
        assert_eq!(pick(3, 4 << 10, FabricClass::Network), "recursive_doubling");
        assert_eq!(pick(4, 64 << 10, FabricClass::Network), "rabenseifner");
        assert_eq!(pick(8, 64 << 10, FabricClass::Network), "rabenseifner");
        assert_eq!(pick(4, 4 << 10, FabricClass::Node), "rabenseifner");
    }

    /// shmem_cyclic where every rank of the node has a CPU of its own (16 cores) from 128 or
    /// 512 KiB, where they share from 16 KiB up (its contributions are reduced straight out of
    /// the senders' buffers), and never on networks.
    #[test]
    fn allreduce_on_a_node_of_own_cpus_reduces_in_cyclic_blocks() {
        let d = Decisions::embedded().unwrap();
        let pick = |p: u32, bytes: u64, fabric, sharing| {
            let args = CollArgs::new(Collective::Allreduce, 0, p, bytes / 4).with_commutative(true);
            d.choose(&args, &Features::of(&args).unwrap().on(fabric).sharing_cpus(sharing)).unwrap().0.name
        };
        assert_eq!(pick(8, 128 << 10, FabricClass::Node, false), "shmem_cyclic");
        assert_eq!(pick(8, (128 << 10) - 4, FabricClass::Node, false), "rabenseifner");
        assert_eq!(pick(16, 256 << 10, FabricClass::Node, false), "rabenseifner");
        assert_eq!(pick(16, 512 << 10, FabricClass::Node, false), "shmem_cyclic");
        assert_eq!(pick(32, 16 << 20, FabricClass::Node, false), "shmem_cyclic");
        assert_eq!(pick(8, 1 << 20, FabricClass::Node, true), "shmem_cyclic");
        // Ranks sharing the CPUs: recursive doubling up to 16 KiB, cyclic blocks above ...
        assert_eq!(pick(4, 16 << 10, FabricClass::Node, true), "recursive_doubling");
        assert_eq!(pick(3, 4 << 10, FabricClass::Node, true), "recursive_doubling");
        assert_eq!(pick(8, 32 << 10, FabricClass::Node, true), "shmem_cyclic");
        assert_eq!(pick(6, 64 << 10, FabricClass::Node, true), "shmem_cyclic");
        assert_eq!(pick(8, 128 << 10, FabricClass::Node, true), "shmem_cyclic");
        assert_eq!(pick(4, 4 << 20, FabricClass::Node, true), "shmem_cyclic");
        // ... at every p from 3.
        assert_eq!(pick(6, 4 << 20, FabricClass::Node, true), "shmem_cyclic");
        assert_eq!(pick(3, 128 << 10, FabricClass::Node, true), "shmem_cyclic");
        assert_eq!(pick(4, 16 << 10, FabricClass::Node, false), "rabenseifner");
        assert_eq!(pick(2, 32 << 10, FabricClass::Node, true), "rabenseifner");
        assert_eq!(pick(4, 1 << 20, FabricClass::Node, false), "rabenseifner");
        assert_eq!(pick(16, 1 << 20, FabricClass::Network, false), "rabenseifner");
        // Non-commutative: any op folds in rank order.
        let args = CollArgs::new(Collective::Allreduce, 0, 8, 1 << 18).with_commutative(false);
        assert_eq!(d.choose(&args, &Features::of(&args).unwrap()).unwrap().0.name, "shmem_cyclic");
    }

    /// Allgather on networks: recursive doubling at power-of-two p, up to 4 MiB total up to p = 8 and
    /// up to 1 MiB total at p = 9-16 (the ring's p - 1 dependent steps cost 2x at p = 16 over tcp
    /// below that, its smaller messages win above), the ring above.
    #[test]
    fn network_allgather_doubles_up_to_16_ranks() {
        let pick = |p, bytes| pick_on(Collective::Allgather, p, bytes, FabricClass::Network);
        assert_eq!(pick(16, 64 << 10), "recursive_doubling");
        assert_eq!(pick(16, 128 << 10), "ring");
        assert_eq!(pick(16, 256 << 10), "ring");
        assert_eq!(pick(8, 512 << 10), "recursive_doubling");
        assert_eq!(pick(8, 1 << 20), "ring");
        assert_eq!(pick(32, 64 << 10), "ring");
        assert_eq!(pick(12, 64 << 10), "ring");
        assert_eq!(pick_on(Collective::Allgather, 16, 64 << 10, FabricClass::Node), "ring");
    }

    #[test]
    fn network_fabrics_use_bruck_for_small_alltoall_at_p4_to_7() {
        let pick = |p, bytes, fabric| pick_on(Collective::Alltoall, p, bytes, fabric);
        assert_eq!(pick(4, 64, FabricClass::Network), "bruck");
        assert_eq!(pick(7, 2048, FabricClass::Network), "bruck");
        assert_eq!(pick(4, 4096, FabricClass::Network), "simple");
        assert_eq!(pick(3, 64, FabricClass::Network), "simple");
        assert_eq!(pick(4, 64, FabricClass::Node), "simple");
        assert_eq!(pick(8, 2048, FabricClass::Network), "simple");
    }

    #[test]
    fn vector_features_use_the_average_block() {
        let args = CollArgs::new(Collective::Allgatherv, 0, 4, 0).with_counts(vec![1u64, 2, 3, 6]);
        let f = Features::of(&args).unwrap();
        assert_eq!((f.msg, f.total), (12, 48));
    }

    #[test]
    fn bad_overrides_are_errors() {
        assert_eq!(parse_overrides("allreduce:ring, bcast:binomial").unwrap().len(), 2);
        assert!(parse_overrides("allreduce:nosuch").unwrap_err().to_string().contains("nosuch"));
        assert!(parse_overrides("allreduce").is_err());
        assert!(parse_overrides("nosuch:ring").is_err());
    }
}
