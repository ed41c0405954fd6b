//! [`RoutedEndpoint`]: the [`Endpoint`] contract over a node-local and a network endpoint, one
//! route per peer (see the module doc of `routes`).
//!
//! Completions of both are merged, the node-local ones with their peers translated to global
//! ranks. Neither backend can wake up on the other's events (shm sleeps on a futex, tcp in
//! `ppoll`), so a blocking [`wait`](Endpoint::wait) polls both while it spins and yields, then
//! blocks in each in turn for half of the policy's longest sleep: a completion on the other
//! route waits at most that half before it is seen.

use std::time::Duration;

use super::caps::joint_caps;
use super::mr::RoutedMr;
use super::table::{Route, RouteTable};
use crate::endpoint::{Caps, Completion, Endpoint, Mapping, Pieces, RouteCounters};
use crate::error::{Error, Result};
use crate::mr::{Access, LocalRange, Mr, RemoteMr, RemoteRange};
use crate::wait::{Backoff, Step, WaitPolicy};

/// One endpoint over two: peers on this node through `node`, the others through `network`.
pub struct RoutedEndpoint {
    node: Box<dyn Endpoint>,
    network: Box<dyn Endpoint>,
    table: RouteTable,
    caps: Caps,
    wait: WaitPolicy,
    counters: RouteCounters,
    /// Which endpoint `poll` asks first (alternates, so neither starves the other).
    node_first: bool,
    /// An error of the second endpoint polled in a call whose first one had completions: it is
    /// reported by the next `poll`, so those completions are not lost.
    deferred: Option<Error>,
}

impl RoutedEndpoint {
    /// Routes over `node` (connected among the ranks of this node: local rank i is global rank
    /// `node_members[i]`) and `network` (connected among all ranks); `wait` is how
    /// [`Endpoint::wait`] waits on both.
    pub fn new(
        node: Box<dyn Endpoint>,
        network: Box<dyn Endpoint>,
        node_members: Vec<usize>,
        wait: WaitPolicy,
    ) -> Result<RoutedEndpoint> {
        let table = RouteTable::new(network.rank(), network.size(), node_members)?;
        if (node.rank(), node.size()) != (table.local_rank(), table.local_size()) {
            return Err(Error::invalid(format!(
                "node-local endpoint is rank {} of {}, but rank {} is local rank {} of {} on its node",
                node.rank(),
                node.size(),
                table.rank(),
                table.local_rank(),
                table.local_size()
            )));
        }
        let caps = joint_caps(node.caps(), network.caps());
        Ok(RoutedEndpoint {
            node,
            network,
            table,
            caps,
            wait,
            counters: RouteCounters::default(),
            node_first: true,
            deferred: None,
        })
    }

    /// The route table.
    pub fn table(&self) -> &RouteTable {
        &self.table
    }

    /// The endpoint of `route` and the peer's rank there.
    fn via(&mut self, route: Route) -> (&mut dyn Endpoint, usize) {
        match route {
            Route::Node(p) => (&mut *self.node, p),
            Route::Network(p) => (&mut *self.network, p),
        }
    }

    fn count(&mut self, route: Route, bytes: usize) {
        let c = match route {
            Route::Node(_) => &mut self.counters.node,
            Route::Network(_) => &mut self.counters.network,
        };
        c.msgs += 1;
        c.bytes += bytes as u64;
    }

    /// A node-local endpoint's error with its local ranks turned into global ones.
    fn globalise(&self, e: Error) -> Error {
        match e {
            Error::Peer { peer, msg } => match self.table.global_of_local(peer) {
                Ok(g) => Error::Peer { peer: g, msg },
                Err(_) => Error::Peer { peer, msg: format!("{msg} (node-local rank)") },
            },
            Error::InvalidKey { peer, key } => {
                Error::InvalidKey { peer: self.table.global_of_local(peer).unwrap_or(peer), key }
            }
            e => e,
        }
    }
    /// `(route, the source registration there, the destination descriptor there)` of a write (of a
    /// read: the destination registration and the source descriptor).
    /// `(route, the source registration there, the destination descriptor there)` of a write.
    fn write_target<'a>(
        &self,
        peer: usize,
        src: &LocalRange<'a>,
        dst: &RemoteRange,
    ) -> Result<(Route, &'a Mr, RemoteMr)> {
        let routed = RoutedMr::of(src.mr)?;
        let (route, mr) = self.read_source(peer, dst)?;
        let local = if matches!(route, Route::Node(_)) { routed.node() } else { routed.network() };
        Ok((route, local, mr))
    }

    /// The route to `peer` and the part of its registration `range` names that the route's
    /// endpoint knows.
    fn read_source(&self, peer: usize, range: &RemoteRange) -> Result<(Route, RemoteMr)> {
        let route = self.table.route(peer)?;
        Ok(match route {
            Route::Node(_) => {
                let mr = range.mr.node_part().ok_or_else(|| {
                    Error::invalid(format!(
                        "rank {peer}'s registration (key {:#x}) has no node-local key: it was not made by a \
                         routed endpoint",
                        range.mr.key
                    ))
                })?;
                (route, mr)
            }
            Route::Network(_) => (route, range.mr.network_part()),
        })
    }

    /// The result of a transfer of `len` bytes over `route`: counted when it went through, its
    /// error in global ranks when the node-local endpoint made it.
    fn counted(&mut self, route: Route, len: usize, r: Result<()>) -> Result<()> {
        match r {
            Ok(()) => {
                self.count(route, len);
                Ok(())
            }
            Err(e) if matches!(route, Route::Node(_)) => Err(self.globalise(e)),
            Err(e) => Err(e),
        }
    }

    /// Polls the node-local endpoint, translating the peers of what it appends.
    fn poll_node(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let before = out.len();
        let r = self.node.poll(out);
        self.translate(out, before)?;
        r.map_err(|e| self.globalise(e))
    }

    /// Node-local completions `out[from..]` with global peers.
    fn translate(&self, out: &mut [Completion], from: usize) -> Result<()> {
        for c in &mut out[from..] {
            match c {
                Completion::WriteArrived { peer, .. } | Completion::Ctrl { peer, .. } => {
                    *peer = self.table.global_of_local(*peer)?;
                }
                Completion::WriteDone { .. } | Completion::WriteError { .. } => {}
            }
        }
        Ok(())
    }

    /// One endpoint's `wait` for at most `d`: its timeout is no error here.
    fn block_in(&mut self, node: bool, out: &mut Vec<Completion>, d: Duration) -> Result<usize> {
        let before = out.len();
        let r = if node { self.node.wait(out, Some(d)) } else { self.network.wait(out, Some(d)) };
        if node {
            self.translate(out, before)?;
        }
        match r {
            Ok(n) => Ok(n),
            Err(Error::Timeout { .. }) => Ok(0),
            Err(e) if node => Err(self.globalise(e)),
            Err(e) => Err(e),
        }
    }
}

impl Endpoint for RoutedEndpoint {
    fn rank(&self) -> usize {
        self.table.rank()
    }

    fn size(&self) -> usize {
        self.table.size()
    }

    fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The network endpoint's address (both endpoints were connected before they were joined).
    fn address(&self) -> Result<Vec<u8>> {
        self.network.address()
    }

    fn insert_peers(&mut self, _blobs: &[Vec<u8>]) -> Result<()> {
        Err(Error::invalid("a routed endpoint is made of connected endpoints: insert their peers before joining them"))
    }

    unsafe fn register(&mut self, ptr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        // SAFETY: the caller's guarantee for `[ptr, ptr+len)` covers both registrations.
        let node = unsafe { self.node.register(ptr, len, access)? };
        // SAFETY: as above.
        let network = unsafe { self.network.register(ptr, len, access)? };
        RoutedMr::join(node, network)
    }

    fn alloc(&mut self, len: usize, access: Access) -> Result<Mr> {
        let node = self.node.alloc(len, access)?;
        // SAFETY: `node` owns the memory; `RoutedMr` drops the network registration before it.
        let network = unsafe { self.network.register(node.as_ptr(), node.len(), access)? };
        RoutedMr::join(node, network)
    }

    fn write(&mut self, peer: usize, src: LocalRange<'_>, dst: RemoteRange, imm: Option<u64>, ctx: u64) -> Result<()> {
        let (route, mr, dmr) = self.write_target(peer, &src, &dst)?;
        let (ep, p) = self.via(route);
        let r = ep.write(p, LocalRange { mr, ..src }, RemoteRange { mr: dmr, ..dst }, imm, ctx);
        self.counted(route, src.len, r)
    }

    fn read(&mut self, peer: usize, src: RemoteRange, dst: LocalRange<'_>) -> Result<()> {
        let (route, mr, smr) = self.write_target(peer, &dst, &src)?;
        let (ep, p) = self.via(route);
        let r = ep.read(p, RemoteRange { mr: smr, ..src }, LocalRange { mr, ..dst });
        self.counted(route, dst.len, r)
    }

    fn read_with(&mut self, peer: usize, src: RemoteRange, piece: usize, f: Pieces<'_>) -> Result<()> {
        let (route, smr) = self.read_source(peer, &src)?;
        let (ep, p) = self.via(route);
        let r = ep.read_with(p, RemoteRange { mr: smr, ..src }, piece, f);
        self.counted(route, src.len, r)
    }

    fn reads_from(&self, peer: usize) -> bool {
        match self.table.route(peer) {
            Ok(Route::Node(p)) => self.node.reads_from(p),
            Ok(Route::Network(p)) => self.network.reads_from(p),
            Err(_) => false,
        }
    }

    fn write_settled(
        &mut self,
        peer: usize,
        src: LocalRange<'_>,
        dst: RemoteRange,
        imm: Option<u64>,
        ctx: u64,
    ) -> Result<bool> {
        let (route, mr, dmr) = self.write_target(peer, &src, &dst)?;
        let (ep, p) = self.via(route);
        let r = ep.write_settled(p, LocalRange { mr, ..src }, RemoteRange { mr: dmr, ..dst }, imm, ctx);
        match r {
            Ok(settled) => {
                self.count(route, src.len);
                Ok(settled)
            }
            Err(e) if matches!(route, Route::Node(_)) => Err(self.globalise(e)),
            Err(e) => Err(e),
        }
    }

    fn send_ctrl(&mut self, peer: usize, tag: u64, data: &[u8]) -> Result<()> {
        let route = self.table.route(peer)?;
        let (ep, p) = self.via(route);
        let r = ep.send_ctrl(p, tag, data);
        self.counted(route, data.len(), r)
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        self.node_first = !self.node_first;
        let first = if self.node_first { self.poll_node(out)? } else { self.network.poll(out)? };
        let second = if self.node_first { self.network.poll(out) } else { self.poll_node(out) };
        match second {
            Ok(n) => Ok(first + n),
            Err(e) if first > 0 => {
                self.deferred = Some(e);
                Ok(first)
            }
            Err(e) => Err(e),
        }
    }

    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Option<Duration>) -> Result<usize> {
        let mut backoff = Backoff::new(self.wait, timeout);
        loop {
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            match backoff.step() {
                Step::Spin | Step::Yielded => {}
                Step::Block(d) => {
                    let half = d / 2;
                    let node_first = self.node_first;
                    let n = self.block_in(node_first, out, half)?;
                    if n > 0 {
                        return Ok(n);
                    }
                    let n = self.block_in(!node_first, out, half)?;
                    if n > 0 {
                        return Ok(n);
                    }
                }
                Step::TimedOut => {
                    return Err(Error::Timeout {
                        after: timeout.unwrap_or_default(),
                        what: format!("a completion on rank {} (node-local or network route)", self.table.rank()),
                    })
                }
            }
        }
    }

    fn map_remote(&mut self, peer: usize, mr: &RemoteMr) -> Result<Mapping> {
        match self.table.route(peer)? {
            Route::Node(p) => {
                let node = mr.node_part().ok_or_else(|| {
                    Error::invalid(format!("rank {peer}'s registration has no node-local key to map"))
                })?;
                self.node.map_remote(p, &node).map_err(|e| self.globalise(e))
            }
            Route::Network(_) => Err(Error::Unsupported {
                backend: self.caps.backend,
                what: format!("direct load/store of rank {peer}'s memory: it is on another node"),
            }),
        }
    }

    fn hint_reused(&mut self, mr: &Mr) {
        if let Ok(routed) = RoutedMr::of(mr) {
            self.node.hint_reused(routed.node());
            self.network.hint_reused(routed.network());
        }
    }

    fn writes_by_syscall(&self, peer: usize, mr: &Mr) -> bool {
        let Ok(routed) = RoutedMr::of(mr) else { return false };
        match self.table.route(peer) {
            Ok(Route::Node(p)) => self.node.writes_by_syscall(p, routed.node()),
            Ok(Route::Network(p)) => self.network.writes_by_syscall(p, routed.network()),
            Err(_) => false,
        }
    }

    fn writes_into_by_syscall(&self, peer: usize, mr: &RemoteMr) -> bool {
        match self.table.route(peer) {
            Ok(Route::Node(p)) => mr.node_part().is_some_and(|m| self.node.writes_into_by_syscall(p, &m)),
            Ok(Route::Network(p)) => self.network.writes_into_by_syscall(p, &mr.network_part()),
            Err(_) => false,
        }
    }

    fn write_segment(&self, peer: usize) -> usize {
        let seg = match self.table.route(peer) {
            Ok(Route::Node(p)) => self.node.write_segment(p),
            Ok(Route::Network(p)) => self.network.write_segment(p),
            Err(_) => self.caps.max_write,
        };
        seg.min(self.caps.max_write)
    }

    fn connected(&mut self) -> Result<()> {
        self.node.connected().map_err(|e| self.globalise(e))?;
        self.network.connected()
    }

    fn never_yield(&mut self) {
        self.wait.yields = 0;
        self.node.never_yield();
        self.network.never_yield();
    }

    fn set_idle(&self, idle: bool) {
        self.node.set_idle(idle);
        self.network.set_idle(idle);
    }

    fn peer_busy_elsewhere(&self, peer: usize) -> bool {
        match self.table.route(peer) {
            Ok(Route::Node(p)) => self.node.peer_busy_elsewhere(p),
            Ok(Route::Network(p)) => self.network.peer_busy_elsewhere(p),
            Err(_) => false,
        }
    }

    fn peer_gone(&self, peer: usize) -> Option<String> {
        match self.table.route(peer).ok()? {
            Route::Node(p) => self.node.peer_gone(p),
            Route::Network(p) => self.network.peer_gone(p),
        }
    }

    fn route_counters(&self) -> Option<RouteCounters> {
        Some(self.counters)
    }
}
