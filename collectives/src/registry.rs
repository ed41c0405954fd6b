//! The algorithm registry: one table of (operation, name, restrictions, parameters, cost,
//! constructor) that selection, forcing by name, the docs and the test matrix all iterate.
//!
//! Adding an algorithm = one file under `src/<op>/` and one row in that op's `ALGORITHMS` slice.

use crate::args::{CollArgs, Collective, SEGMENT};
use crate::cost::Cost;
use crate::error::{Error, Result};
use crate::schedule::{check_bounds, Schedule};

/// Conditions an algorithm needs. The registry refuses the algorithm where one does not hold.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Restrictions {
    /// p must be a power of two.
    pub pow2: bool,
    /// The reduction op must be commutative.
    pub commutative: bool,
    /// MPI_IN_PLACE is not supported (the caller must copy instead).
    pub no_in_place: bool,
    /// Every block must have the same count (regular calls only; refuses v-variants with
    /// unequal counts).
    pub uniform_counts: bool,
    /// Needs a [`Topology`](crate::topology::Topology) that splits the ranks in two levels: at
    /// least two nodes, and at least one node with two or more ranks (hierarchical algorithms;
    /// without one, selection never considers them).
    pub two_level: bool,
    /// With `two_level`: every node must hold the same number of ranks.
    pub equal_nodes: bool,
}

impl Restrictions {
    pub const NONE: Restrictions = Restrictions {
        pow2: false,
        commutative: false,
        no_in_place: false,
        uniform_counts: false,
        two_level: false,
        equal_nodes: false,
    };
    pub const POW2: Restrictions = Restrictions { pow2: true, ..Restrictions::NONE };
    pub const COMMUTATIVE: Restrictions = Restrictions { commutative: true, ..Restrictions::NONE };
    pub const TWO_LEVEL: Restrictions = Restrictions { two_level: true, ..Restrictions::NONE };

    /// Why these restrictions exclude `args`, or `None` if they hold.
    pub fn violated(&self, args: &CollArgs) -> Option<String> {
        if self.pow2 && !args.size.is_power_of_two() {
            return Some(format!("needs a power-of-two number of ranks, got {}", args.size));
        }
        if self.commutative && args.coll.is_reduction() && !args.commutative {
            return Some("needs a commutative reduction op".into());
        }
        if self.no_in_place && args.in_place {
            return Some("does not support in-place operation".into());
        }
        if self.uniform_counts {
            if let Some(c) = &args.counts {
                if c.windows(2).any(|w| w[0] != w[1]) {
                    return Some("needs equal counts for every rank".into());
                }
            }
        }
        if self.two_level {
            if let Some(why) = crate::topology::two_level_violation(args.topology.as_deref(), args.size) {
                return Some(why);
            }
        }
        if self.equal_nodes {
            match args.topology.as_deref() {
                Some(t) if t.per_node().is_some() => {}
                Some(t) => return Some(format!("needs the same number of ranks on every node (placement {t})")),
                None => return Some("needs a topology with the same number of ranks on every node".into()),
            }
        }
        None
    }
}

/// A parameter an algorithm takes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: &'static str,
    pub default: u64,
    pub min: u64,
    pub max: u64,
    pub doc: &'static str,
}

/// One row of the registry.
#[derive(Copy, Clone, Debug)]
pub struct Algorithm {
    pub coll: Collective,
    /// Name used to force it (`FABCOLL_ALGO=allreduce:ring`).
    pub name: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    pub restrictions: Restrictions,
    /// Algorithm-specific parameters (the generic [`SEGMENT`] parameter is accepted by all).
    pub params: &'static [ParamSpec],
    /// The α–β–γ terms of the paper's formula for these arguments.
    pub cost: fn(&CollArgs) -> Cost,
    /// Builds this rank's schedule. Called only after arguments, restrictions and parameters were
    /// checked and defaults filled in.
    pub build: fn(&CollArgs) -> Result<Schedule>,
}

/// The segment parameter every algorithm accepts.
pub const SEGMENT_SPEC: ParamSpec = ParamSpec {
    name: SEGMENT,
    default: 0,
    min: 0,
    max: u64::MAX,
    doc: "pipeline segment size in elements (0 = no segmentation)",
};

impl Algorithm {
    /// Checks `args` against this algorithm (validity, restrictions, parameter names and ranges)
    /// and returns them with parameter defaults filled in.
    pub fn prepare(&self, args: &CollArgs) -> Result<CollArgs> {
        if args.coll != self.coll {
            return Err(Error::InvalidArgument {
                coll: args.coll,
                msg: format!("algorithm {}:{} is for {}", self.coll, self.name, self.coll),
            });
        }
        args.validate()?;
        let mut out = args.clone();
        // MPI: only the root of a gather or reduce passes MPI_IN_PLACE; the other ranks' flag has no
        // meaning (their input is in their send buffer), so the same call can be made on every rank.
        if out.in_place
            && matches!(out.coll, Collective::Gather | Collective::Gatherv | Collective::Reduce)
            && out.rank != out.root
        {
            out.in_place = false;
        }
        if let Some(reason) = self.restrictions.violated(&out) {
            return Err(Error::Restriction { coll: self.coll, alg: self.name, reason });
        }
        for (name, value) in args.params.iter() {
            let spec =
                self.params.iter().chain([&SEGMENT_SPEC]).find(|s| s.name == name).ok_or_else(|| Error::Parameter {
                    coll: self.coll,
                    alg: self.name,
                    param: name.to_owned(),
                    msg: format!(
                        "unknown (accepted: {})",
                        self.params.iter().chain([&SEGMENT_SPEC]).map(|s| s.name).collect::<Vec<_>>().join(", ")
                    ),
                })?;
            if value < spec.min || value > spec.max {
                return Err(Error::Parameter {
                    coll: self.coll,
                    alg: self.name,
                    param: name.to_owned(),
                    msg: format!("{value} outside {}..={}", spec.min, spec.max),
                });
            }
        }
        for spec in self.params {
            if out.params.get(spec.name).is_none() {
                out.params.set(spec.name, spec.default);
            }
        }
        Ok(out)
    }

    /// Builds this rank's schedule: checks the arguments, builds, applies in-place and segmenting,
    /// and checks that every region stays inside its buffer.
    pub fn schedule(&self, args: &CollArgs) -> Result<Schedule> {
        let args = self.prepare(args)?;
        let mut s = (self.build)(&args)?;
        // The passes below index deps; a malformed schedule must be an error, not a panic.
        if let Some((id, k, _)) = s.iter().find(|(id, _, deps)| deps.iter().any(|d| d >= id)) {
            return Err(Error::Verify(format!(
                "{}:{} built step {id} ({k}) with a dep on a later step",
                self.coll, self.name
            )));
        }
        if args.in_place {
            match args.in_place_offset()? {
                Some(off) => s = s.in_place(off),
                None => {
                    return Err(Error::InvalidArgument {
                        coll: args.coll,
                        msg: "in-place is not defined for this operation on this rank".into(),
                    })
                }
            }
        }
        if let Some(seg) = args.params.get(SEGMENT) {
            s = s.pipeline(seg);
        }
        let send_len = if args.in_place { 0 } else { args.send_len()? };
        check_bounds(&s, send_len, args.recv_len()?)?;
        Ok(s)
    }

    /// The paper's cost terms for these arguments (after checking them).
    pub fn cost_of(&self, args: &CollArgs) -> Result<Cost> {
        let args = self.prepare(args)?;
        Ok((self.cost)(&args))
    }
}

/// Every algorithm of every operation.
pub fn all() -> impl Iterator<Item = &'static Algorithm> {
    [
        crate::barrier::ALGORITHMS,
        crate::bcast::ALGORITHMS,
        crate::reduce::ALGORITHMS,
        crate::allreduce::ALGORITHMS,
        crate::gather::ALGORITHMS,
        crate::scatter::ALGORITHMS,
        crate::allgather::ALGORITHMS,
        crate::alltoall::ALGORITHMS,
        crate::reduce_scatter::ALGORITHMS,
        crate::scan::ALGORITHMS,
    ]
    .into_iter()
    .flatten()
}

/// The algorithms of one operation.
pub fn for_op(coll: Collective) -> impl Iterator<Item = &'static Algorithm> {
    all().filter(move |a| a.coll == coll)
}

/// Looks an algorithm up by operation and name.
pub fn find(coll: Collective, name: &str) -> Result<&'static Algorithm> {
    for_op(coll).find(|a| a.name == name).ok_or_else(|| Error::UnknownAlgorithm {
        coll,
        name: name.to_owned(),
        known: for_op(coll).map(|a| a.name).collect::<Vec<_>>().join(", "),
    })
}

/// The algorithms of `args.coll` whose restrictions hold for `args`.
pub fn eligible(args: &CollArgs) -> impl Iterator<Item = &'static Algorithm> + '_ {
    for_op(args.coll).filter(move |a| a.restrictions.violated(args).is_none())
}
