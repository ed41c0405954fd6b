//! Which CPUs a rank may run on, on which machine. The ranks of one machine decide together
//! whether they outnumber its CPUs (what sets the executor's wait policy, eager limit and the
//! decision rules' `own_cpu`); they must decide alike, and a process's own CPU set cannot tell:
//! a launcher that binds every rank to a core of its own (`srun --cpu-bind=cores`, `mpirun
//! --bind-to core`) leaves each a set of one, and ranks confined together to a few CPUs see the
//! same few. So every rank's [`Seat`] travels with its address (`super::exchange_with_node`), and
//! [`machine_share`] counts the ranks of a machine against the union of their CPU sets, the same
//! on every rank; [`some_node_crowded`] says whether any node of the job is crowded, the same
//! on every rank.

use std::collections::HashMap;

use super::{BootstrapError, NodeId, Result};

/// Where a rank runs: its machine and the CPUs it may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seat {
    /// The machine's identity ([`NodeId::host`]'s name): nodes emulated with `FABCOLL_NODE`
    /// share their machine's CPUs.
    pub machine: String,
    /// The process's CPU affinity as a bit mask: bit `i % 64` of word `i / 64` is CPU `i`.
    pub cpus: Vec<u64>,
    /// How many CPUs the process may use at once: `available_parallelism`, fewer than its set
    /// where a cgroup quota limits it.
    pub usable: u32,
}

/// The most mask words a seat may carry (4,096 CPUs).
const MAX_WORDS: usize = 64;

impl Seat {
    /// This process's seat: its machine, its affinity mask, its usable CPUs.
    pub fn of_this_process() -> Seat {
        let mut cpus = Vec::new();
        if let Ok(set) = rustix::thread::sched_getaffinity(None) {
            for i in (0..rustix::thread::CpuSet::MAX_CPU).filter(|&i| set.is_set(i)) {
                if cpus.len() <= i / 64 {
                    cpus.resize(i / 64 + 1, 0);
                }
                cpus[i / 64] |= 1 << (i % 64);
            }
        }
        let usable = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        Seat { machine: NodeId::host().name, cpus, usable }
    }

    /// CPUs in the mask.
    pub fn count(&self) -> u32 {
        self.cpus.iter().map(|w| w.count_ones()).sum()
    }

    /// `blob` prefixed with this seat: the machine's length as a little-endian `u32`, the
    /// machine, `usable` as a `u32`, the mask's word count as a `u32` and its words (`u64`).
    pub fn prefix(&self, blob: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.machine.len() + 8 * self.cpus.len() + blob.len());
        out.extend_from_slice(&(self.machine.len() as u32).to_le_bytes());
        out.extend_from_slice(self.machine.as_bytes());
        out.extend_from_slice(&self.usable.to_le_bytes());
        out.extend_from_slice(&(self.cpus.len() as u32).to_le_bytes());
        self.cpus.iter().for_each(|w| out.extend_from_slice(&w.to_le_bytes()));
        out.extend_from_slice(blob);
        out
    }

    /// The seat and the blob of a [`Seat::prefix`]ed blob; `rank` names the sender in errors.
    pub fn split(prefixed: &[u8], rank: u32) -> Result<(Seat, &[u8])> {
        let bad = |what: &str| BootstrapError::Protocol(format!("rank {rank}'s CPU set {what}"));
        let short = || bad("is cut short");
        let mut rest = prefixed;
        let len = take_u32(&mut rest).ok_or_else(short)?;
        let machine = take(&mut rest, len as usize).ok_or_else(short)?;
        let machine = String::from_utf8(machine.to_vec()).map_err(|_| bad("names its machine in bad UTF-8"))?;
        let usable = take_u32(&mut rest).ok_or_else(short)?;
        let words = take_u32(&mut rest).ok_or_else(short)?;
        if words as usize > MAX_WORDS {
            return Err(bad(&format!("has {words} words, more than {MAX_WORDS}")));
        }
        let mask = take(&mut rest, 8 * words as usize).ok_or_else(short)?;
        let cpus = mask.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).collect();
        Ok((Seat { machine, cpus, usable }, rest))
    }
}

/// The first `n` bytes of `rest`, which moves past them; `None` if it is shorter.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, tail) = rest.split_at_checked(n)?;
    *rest = tail;
    Some(head)
}

/// A little-endian `u32` taken off the front of `rest`.
fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    take(rest, 4).map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
}

/// The ranks seated on `machine` and the CPUs they share: the union of their masks, or fewer
/// where every one of them is held below its mask by a quota (then the largest quota). Every
/// rank of the machine computes the same from the same seats.
pub fn machine_share(seats: &[Seat], machine: &str) -> (usize, usize) {
    let here: Vec<&Seat> = seats.iter().filter(|s| s.machine == machine).collect();
    (here.len(), shared_cpus(&here))
}

/// Whether some node of the job holds more ranks than the CPUs its machine gives them
/// ([`machine_share`]; `cpus`, where given, counts for every machine, as `FABCOLL_LOCAL_CPUS`
/// does). `nodes[r]` is rank r's node: nodes emulated on one machine (`FABCOLL_NODE`) count their
/// own ranks, as the launcher's count per node does for the engine. The decision rules' `own_cpu`
/// reads this: every rank computes it from the same seats, so ranks on machines that differ choose
/// the same algorithm.
pub fn some_node_crowded(nodes: &[NodeId], seats: &[Seat], cpus: Option<usize>) -> bool {
    let mut by_machine: Vec<&Seat> = seats.iter().collect();
    by_machine.sort_by(|a, b| a.machine.cmp(&b.machine));
    let shares: HashMap<&str, usize> =
        by_machine.chunk_by(|a, b| a.machine == b.machine).map(|m| (m[0].machine.as_str(), shared_cpus(m))).collect();
    let mut by_node: Vec<usize> = (0..nodes.len().min(seats.len())).collect();
    by_node.sort_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name));
    by_node.chunk_by(|&a, &b| nodes[a].name == nodes[b].name).any(|here| {
        let machine = seats[here[0]].machine.as_str();
        here.len() > cpus.unwrap_or_else(|| shares.get(machine).copied().unwrap_or(1))
    })
}

/// The CPUs that the ranks of one machine share (see [`machine_share`]).
fn shared_cpus(here: &[&Seat]) -> usize {
    let words = here.iter().map(|s| s.cpus.len()).max().unwrap_or(0);
    let union: u32 = (0..words)
        .map(|i| here.iter().fold(0u64, |acc, s| acc | s.cpus.get(i).copied().unwrap_or(0)).count_ones())
        .sum();
    // A mask that could not be read is empty: then a rank's usable count is all there is.
    let union = union.max(here.iter().map(|s| s.usable).max().unwrap_or(1));
    let quota = here.iter().all(|s| s.usable < s.count()).then(|| here.iter().map(|s| s.usable).max().unwrap_or(1));
    let cpus = quota.map_or(union, |q| union.min(q));
    cpus.max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(machine: &str, cpus: &[usize], usable: u32) -> Seat {
        let mut mask = vec![0u64; cpus.iter().max().map_or(0, |&c| c / 64 + 1)];
        cpus.iter().for_each(|&c| mask[c / 64] |= 1 << (c % 64));
        Seat { machine: machine.into(), cpus: mask, usable }
    }

    #[test]
    fn a_seat_travels_in_front_of_its_blob() {
        for s in [seat("host/3f2a", &[0, 1], 2), seat("", &[], 1), seat("m", &[5, 64, 200], 3)] {
            let prefixed = s.prefix(b"addr\0bytes");
            let (back, blob) = Seat::split(&prefixed, 3).unwrap();
            assert_eq!((back, blob), (s, &b"addr\0bytes"[..]));
        }
        let me = Seat::of_this_process();
        assert!(me.count() >= 1 && me.usable >= 1, "{me:?}");
        assert_eq!(me.machine, NodeId::host().name);
    }

    #[test]
    fn a_malformed_seat_is_an_error_naming_the_rank() {
        let good = seat("m", &[0, 1], 2).prefix(b"x");
        let mut huge = seat("m", &[], 1).prefix(b"");
        huge[9..13].copy_from_slice(&1000u32.to_le_bytes());
        let mut not_utf8 = good.clone();
        not_utf8[4] = 0xff;
        for (bad, why) in [
            (&[][..], "cut short"),
            (&good[..3], "cut short"),
            (&good[..6], "cut short"),
            (&good[..14], "cut short"),
            (&huge[..], "1000 words"),
            (&not_utf8[..], "UTF-8"),
        ] {
            let e = Seat::split(bad, 5).unwrap_err().to_string();
            assert!(e.contains("rank 5's CPU set") && e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn a_machines_ranks_count_against_the_union_of_their_cpus() {
        let m = "host/boot";
        // Unpinned on a 2-CPU machine: 4 ranks share 2.
        assert_eq!(machine_share(&vec![seat(m, &[0, 1], 2); 4], m), (4, 2));
        // Bound a core each (srun --cpu-bind=cores): 16 ranks, 16 CPUs.
        let bound: Vec<Seat> = (0..16).map(|c| seat(m, &[c], 1)).collect();
        assert_eq!(machine_share(&bound, m), (16, 16));
        // Confined together to 2 of 16 CPUs.
        assert_eq!(machine_share(&vec![seat(m, &[4, 5], 2); 4], m), (4, 2));
        // A cgroup quota of 2 CPUs on a 64-CPU machine.
        let all: Vec<usize> = (0..64).collect();
        assert_eq!(machine_share(&vec![seat(m, &all, 2); 4], m), (4, 2));
        // Ranks of other machines do not count.
        let mixed = [seat(m, &[0], 1), seat("other/boot", &[0], 1), seat(m, &[1], 1)];
        assert_eq!(machine_share(&mixed, m), (2, 2));
        assert_eq!(machine_share(&mixed, "other/boot"), (1, 1));
        // Masks that could not be read: the usable counts.
        assert_eq!(machine_share(&vec![seat(m, &[], 4); 2], m), (2, 4));
    }

    #[test]
    fn one_crowded_node_makes_the_whole_job_share_cpus() {
        let node = |n: &str| NodeId { name: n.into(), explicit: false };
        let on = |names: &[&str]| names.iter().map(|n| node(n)).collect::<Vec<_>>();
        // Two ranks on each of two 2-CPU machines, interleaved: nobody crowded.
        let calm: Vec<Seat> = (0..4).map(|r| seat(["a", "b"][r % 2], &[0, 1], 2)).collect();
        let calm_nodes = on(&["a", "b", "a", "b"]);
        assert!(!some_node_crowded(&calm_nodes, &calm, None));
        // A third rank on machine b: b is crowded, and every rank says so.
        let mut crowded = calm.clone();
        crowded.push(seat("b", &[0, 1], 2));
        let crowded_nodes = on(&["a", "b", "a", "b", "b"]);
        assert!(some_node_crowded(&crowded_nodes, &crowded, None));
        // FABCOLL_LOCAL_CPUS counts for every machine.
        assert!(!some_node_crowded(&crowded_nodes, &crowded, Some(3)));
        assert!(some_node_crowded(&calm_nodes, &calm, Some(1)));
        // Ranks bound a core each on a 16-CPU machine and 4 ranks on a 2-CPU one.
        let mut mixed: Vec<Seat> = (0..16).map(|c| seat("big", &[c], 1)).collect();
        let mut mixed_nodes = vec![node("big"); 16];
        assert!(!some_node_crowded(&mixed_nodes, &mixed, None));
        mixed.extend((0..4).map(|_| seat("small", &[0, 1], 2)));
        mixed_nodes.extend(on(&["small"; 4]));
        assert!(some_node_crowded(&mixed_nodes, &mixed, None));
        // Two nodes emulated on one 2-CPU machine, two ranks each: each node's two ranks count
        // against the machine's two CPUs (the launcher's count per node, as the engine takes it).
        let one_machine = vec![seat("m", &[0, 1], 2); 4];
        assert!(!some_node_crowded(&on(&["n0", "n0", "n1", "n1"]), &one_machine, None));
        assert!(some_node_crowded(&on(&["n0", "n0", "n0", "n1"]), &one_machine, None));
    }
}
