//! Bounded single-producer single-consumer ring (Lamport, cache-padded head/tail) that lives in
//! shared memory; push/pop fill/read a slot in place. Model-checked with loom (`--cfg loom`).
//!
//! Protocol: the producer owns `tail` and the slot at `tail % N` while `tail - head < N`; it fills
//! the slot, then publishes with `tail.store(t + 1, Release)`. The consumer owns the slot at
//! `head % N` while `head < tail` (Acquire load of `tail` sees the filled slot), reads it, then frees
//! it with `head.store(h + 1, Release)` (the producer's Acquire load of `head` orders its next
//! overwrite after our read). Indices are u64 and never wrap in practice (2^64 messages).
//! Layout is `repr(C)` with zeroed memory = empty queue, so a fresh memfd page is a valid queue.

#[cfg(loom)]
use loom::cell::UnsafeCell;
#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// `std::cell::UnsafeCell` with loom's closure API, so one source serves both builds.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    #[cfg(test)]
    pub(crate) fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// The ring: `N` slots of `T`.
#[repr(C)]
pub(crate) struct Spsc<T, const N: usize> {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
    slots: [UnsafeCell<T>; N],
}

// SAFETY: slots are handed between exactly one producer and one consumer by the head/tail protocol
// in the module doc; T is plain data moved by copy.
unsafe impl<T: Send, const N: usize> Sync for Spsc<T, N> {}

impl<T, const N: usize> Spsc<T, N> {
    /// Heap constructor (tests, loom); in shared memory the zeroed page is the queue.
    #[cfg(any(test, loom))]
    pub(crate) fn new(init: impl Fn() -> T) -> Self {
        Spsc {
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            slots: std::array::from_fn(|_| UnsafeCell::new(init())),
        }
    }

    /// Producer: free slots right now (at least this many pushes will succeed).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn free(&self) -> usize {
        self.free_seen(&mut 0)
    }

    /// Producer: fill the next slot in place with `fill` and publish it; false if full.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn push(&self, fill: impl FnOnce(&mut T)) -> bool {
        self.push_seen(&mut 0, fill)
    }

    /// `Spsc::free` (test builds) with the producer's last view of `head` (`seen`, kept in its private
    /// memory; 0 at first): the shared `head` — a line the consumer writes on every pop — is read
    /// only when `seen` says the ring may be full. A stale `seen` is never above `head`, so it only
    /// underestimates the free slots.
    pub(crate) fn free_seen(&self, seen: &mut u64) -> usize {
        let t = self.tail.load(Ordering::Relaxed);
        if t.wrapping_sub(*seen) >= N as u64 {
            *seen = self.head.load(Ordering::Acquire);
        }
        N - (t.wrapping_sub(*seen) as usize).min(N)
    }

    /// `Spsc::push` (test builds) with the producer's view of `head` (see [`Spsc::free_seen`]).
    pub(crate) fn push_seen(&self, seen: &mut u64, fill: impl FnOnce(&mut T)) -> bool {
        let t = self.tail.load(Ordering::Relaxed);
        if t.wrapping_sub(*seen) >= N as u64 {
            // Acquire: the consumer's reads of the slots it freed happen before our overwrite.
            *seen = self.head.load(Ordering::Acquire);
            if t.wrapping_sub(*seen) >= N as u64 {
                return false;
            }
        }
        // SAFETY: the slot at t % N is owned by the producer until `tail` passes it (module doc).
        self.slots[(t % N as u64) as usize].with_mut(|p| fill(unsafe { &mut *p }));
        self.tail.store(t.wrapping_add(1), Ordering::Release);
        true
    }

    /// Consumer: read the oldest slot in place with `read` and free it; false if empty.
    pub(crate) fn pop(&self, read: impl FnOnce(&T)) -> bool {
        let h = self.head.load(Ordering::Relaxed);
        let t = self.tail.load(Ordering::Acquire);
        if h == t {
            return false;
        }
        // SAFETY: the slot at h % N was published by the producer (Acquire on tail) and is owned
        // by the consumer until `head` passes it.
        self.slots[(h % N as u64) as usize].with(|p| read(unsafe { &*p }));
        self.head.store(h.wrapping_add(1), Ordering::Release);
        true
    }

    /// Consumer: anything to pop?
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) == self.tail.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_full() {
        let q: Spsc<u64, 4> = Spsc::new(|| 0);
        for i in 0..4 {
            assert!(q.push(|s| *s = i));
        }
        assert!(!q.push(|s| *s = 99));
        assert_eq!(q.free(), 0);
        for i in 0..4 {
            let mut got = None;
            assert!(q.pop(|s| got = Some(*s)));
            assert_eq!(got, Some(i));
        }
        assert!(!q.pop(|_| {}));
        assert!(q.is_empty());
    }

    #[test]
    fn threads_stress() {
        let q = std::sync::Arc::new(Spsc::<[u64; 8], 8>::new(|| [0; 8]));
        let n = 200_000u64;
        let qp = q.clone();
        let prod = std::thread::spawn(move || {
            for i in 0..n {
                while !qp.push(|s| *s = [i; 8]) {
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0;
        while next < n {
            let mut ok = true;
            if q.pop(|s| ok = s.iter().all(|&x| x == next)) {
                assert!(ok, "torn or out-of-order slot at {next}");
                next += 1;
            } else {
                std::thread::yield_now();
            }
        }
        prod.join().unwrap();
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use loom::sync::Arc;

    /// Every interleaving of a producer pushing 3 two-word messages through a 2-slot ring and a
    /// consumer popping them: FIFO, no torn slot, no slot reused before it is read.
    #[test]
    fn loom_spsc_fifo() {
        loom::model(|| {
            let q = Arc::new(Spsc::<[u64; 2], 2>::new(|| [0; 2]));
            let qp = q.clone();
            let prod = loom::thread::spawn(move || {
                let mut seen = 0;
                for i in 1..=3u64 {
                    while !qp.push_seen(&mut seen, |s| *s = [i, i * 10]) {
                        loom::thread::yield_now();
                    }
                }
            });
            let mut next = 1u64;
            while next <= 3 {
                let mut got = [0; 2];
                if q.pop(|s| got = *s) {
                    assert_eq!(got, [next, next * 10]);
                    next += 1;
                } else {
                    loom::thread::yield_now();
                }
            }
            prod.join().unwrap();
            assert!(q.is_empty());
        });
    }
}
