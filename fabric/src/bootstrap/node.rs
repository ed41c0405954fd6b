//! Which node a rank runs on. A rank's [`NodeId`] is `FABCOLL_NODE` when set (launchers and tests
//! emulate nodes with it), else its host name and boot id (`/proc/sys/kernel/random/boot_id`: two
//! machines that share a host name, as containers often do, still differ). Ranks with equal
//! identities share a node.
//!
//! Identities travel with the fabric addresses: [`exchange_with_node`] prefixes each rank's blob
//! with its identity and its [`Seat`], so that learning the placement costs no store round trip
//! of its own.

use std::time::Duration;

use super::{exchange, BootstrapError, Result, Seat, Store};
use crate::settings;

/// A rank's node identity (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeId {
    /// The identity: equal names, same node.
    pub name: String,
    /// Whether `FABCOLL_NODE` gave it (else it is the host's own).
    pub explicit: bool,
}

/// Reads a one-line `/proc` file, trimmed; empty if it cannot be read.
fn proc_line(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_owned()).unwrap_or_default()
}

impl NodeId {
    /// This process's identity: `FABCOLL_NODE`, else [`NodeId::host`].
    pub fn of_this_process() -> Result<NodeId> {
        match settings::FABCOLL_NODE.get().map_err(|e| BootstrapError::Config(e.to_string()))? {
            Some(name) => Ok(NodeId { name, explicit: true }),
            None => Ok(NodeId::host()),
        }
    }

    /// This machine's identity: host name and boot id.
    pub fn host() -> NodeId {
        let mut host = proc_line("/proc/sys/kernel/hostname");
        if host.is_empty() {
            host = std::env::var("HOSTNAME").unwrap_or_default();
        }
        let boot = proc_line("/proc/sys/kernel/random/boot_id");
        NodeId { name: format!("{host}/{boot}"), explicit: false }
    }

    /// `blob` prefixed with this identity: a flag byte (1 = explicit), the name's length as a
    /// little-endian `u32`, the name, then `blob`.
    pub fn prefix(&self, blob: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(5 + self.name.len() + blob.len());
        out.push(u8::from(self.explicit));
        out.extend_from_slice(&(self.name.len() as u32).to_le_bytes());
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(blob);
        out
    }

    /// The identity and the blob of a [`NodeId::prefix`]ed blob; `rank` names the sender in errors.
    pub fn split(prefixed: &[u8], rank: u32) -> Result<(NodeId, &[u8])> {
        let bad = |what: &str| BootstrapError::Protocol(format!("rank {rank}'s node identity {what}"));
        let (&flag, rest) = prefixed.split_first().ok_or_else(|| bad("is missing"))?;
        let explicit = match flag {
            0 => false,
            1 => true,
            f => return Err(bad(&format!("has the flag {f}, not 0 or 1"))),
        };
        let (len, rest) = rest.split_at_checked(4).ok_or_else(|| bad("is cut short"))?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (name, blob) = rest.split_at_checked(len).ok_or_else(|| bad("is cut short"))?;
        let name = String::from_utf8(name.to_vec()).map_err(|_| bad("is not UTF-8"))?;
        Ok((NodeId { name, explicit }, blob))
    }
}

/// [`exchange`] of `blob` with this rank's identity `node` and its [`Seat`] `seat`: every rank's
/// identity, seat and blob, by rank, in one round of the store.
pub fn exchange_with_node(
    store: &dyn Store,
    name: &str,
    rank: u32,
    size: u32,
    (node, seat): (&NodeId, &Seat),
    blob: &[u8],
    timeout: Duration,
) -> Result<Vec<Placed>> {
    let all = exchange(store, name, rank, size, &node.prefix(&seat.prefix(blob)), timeout)?;
    let mut placed = Vec::with_capacity(all.len());
    for (r, b) in all.iter().enumerate() {
        let (node, b) = NodeId::split(b, r as u32)?;
        let (seat, blob) = Seat::split(b, r as u32)?;
        placed.push(Placed { node, seat, blob: blob.to_vec() });
    }
    Ok(placed)
}

/// One rank's part of [`exchange_with_node`].
#[derive(Clone, Debug)]
pub struct Placed {
    pub node: NodeId,
    pub seat: Seat,
    pub blob: Vec<u8>,
}

/// Whether every rank's identity equals `node` (one round of the store under `name`, with this
/// rank's `seat`, as [`exchange_with_node`]): what
/// picks the default fabric when the launcher does not say how many ranks share this node.
pub fn all_on_one_node(
    store: &dyn Store,
    name: &str,
    rank: u32,
    size: u32,
    (node, seat): (&NodeId, &Seat),
    timeout: Duration,
) -> Result<bool> {
    let placed = exchange_with_node(store, name, rank, size, (node, seat), &[], timeout)?;
    Ok(placed.iter().all(|p| p.node.name == node.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_travels_in_front_of_its_blob() {
        for (name, explicit) in [("node1", true), ("host/3f2a", false), ("", false)] {
            let id = NodeId { name: name.into(), explicit };
            let prefixed = id.prefix(b"addr\0bytes");
            let (back, blob) = NodeId::split(&prefixed, 3).unwrap();
            assert_eq!((back, blob), (id, &b"addr\0bytes"[..]));
        }
    }

    #[test]
    fn a_malformed_identity_is_an_error_naming_the_rank() {
        let id = NodeId { name: "node0".into(), explicit: true }.prefix(b"x");
        for (bad, why) in
            [(&[][..], "is missing"), (&id[..3], "cut short"), (&id[..6], "cut short"), (&[7][..], "flag 7")]
        {
            let e = NodeId::split(bad, 5).unwrap_err().to_string();
            assert!(e.contains("rank 5's node identity") && e.contains(why), "{e}");
        }
    }

    #[test]
    fn one_node_only_when_every_rank_names_ours() {
        for (names, want) in [(["n0", "n0", "n0"], true), (["n0", "n1", "n0"], false)] {
            let dir = std::env::temp_dir().join(format!("fabcoll-one-node-{}-{want}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let store = super::super::FileStore::new(&dir).unwrap();
            let seen: Vec<bool> = std::thread::scope(|sc| {
                let ranks: Vec<_> = (0..3)
                    .map(|r| {
                        let (store, id) = (&store, NodeId { name: names[r].into(), explicit: true });
                        let seat = Seat::of_this_process();
                        sc.spawn(move || {
                            all_on_one_node(store, "t/node", r as u32, 3, (&id, &seat), Duration::from_secs(20))
                        })
                    })
                    .collect();
                ranks.into_iter().map(|t| t.join().unwrap().unwrap()).collect()
            });
            // Rank 1 alone is elsewhere: nobody may think the job is on one node.
            assert_eq!(seen, vec![want; 3], "{names:?}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn the_host_identity_names_host_and_boot() {
        let h = NodeId::host();
        assert!(!h.explicit && h.name.contains('/'), "{h:?}");
        assert_eq!(h, NodeId::host());
    }
}
