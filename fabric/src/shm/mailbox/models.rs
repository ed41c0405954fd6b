//! Loom models of the inbox protocol (`--cfg loom`): a sender thread and the owner exchange records
//! through a ring of four lines, so that wrap-around, the wrap marker, line clearing and head
//! publication all happen within three to five records. Length and payload words are loom cells (a
//! read not ordered after the write is a reported data race), except the first word of each line:
//! like the head, it is a loom atomic (a tag or marker, and payload in a record's later lines). The
//! planted-bug model runs the first model with each ordering weakened in turn and checks that loom
//! fails every one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;

use super::inbox::{Inbox, InboxMemory, Orderings, OwnerState, SenderState, CONSUMED, HEADER, LINE};
use super::tag;

const LINES: usize = 4;
const RING: usize = LINES * LINE;
/// Two lines: the owner publishes its head every other line.
const PUBLISH: u64 = 2 * LINE as u64;
const WORDS: usize = LINE / 8;

/// An inbox of loom objects: per line, its first word as an atomic and the other seven as cells.
struct LoomInbox {
    head: AtomicU64,
    first: Vec<AtomicU64>,
    rest: Vec<[UnsafeCell<u64>; WORDS - 1]>,
}

// SAFETY (test): the cells are handed between the two threads by the protocol under test, and loom
// reports every access to them that the protocol does not order.
unsafe impl Sync for LoomInbox {}

impl LoomInbox {
    fn new() -> LoomInbox {
        LoomInbox {
            head: AtomicU64::new(0),
            first: (0..LINES).map(|_| AtomicU64::new(0)).collect(),
            rest: (0..LINES).map(|_| std::array::from_fn(|_| UnsafeCell::new(0))).collect(),
        }
    }

    /// The sender stores only onto lines the owner has cleared (or never used).
    fn check_cleared(&self, line: usize) {
        let now = self.first[line].load(Ordering::Relaxed);
        assert_eq!(now, 0, "the sender overwrites line {line} ({now:#x}) before the owner cleared it");
    }

    /// The word at ring word index `w`: writes it (`Some`) or reads it.
    fn word(&self, w: usize, write: Option<u64>) -> u64 {
        let (line, k) = (w / WORDS, w % WORDS);
        match (k, write) {
            (0, Some(v)) => {
                self.check_cleared(line);
                self.first[line].store(v, Ordering::Relaxed);
                v
            }
            (0, None) => self.first[line].load(Ordering::Relaxed),
            // SAFETY (test): loom checks that the protocol orders this access.
            (_, Some(v)) => self.rest[line][k - 1].with_mut(|p| unsafe {
                *p = v;
                v
            }),
            // SAFETY (test): as above.
            (_, None) => self.rest[line][k - 1].with(|p| unsafe { *p }),
        }
    }

    /// Reads `n` payload bytes at ring offset `off` (the owner, after `find`).
    fn read_bytes(&self, off: usize, n: usize) -> Vec<u8> {
        let mut out: Vec<u8> = (0..n.div_ceil(8)).flat_map(|j| self.word(off / 8 + j, None).to_le_bytes()).collect();
        out.truncate(n);
        out
    }
}

impl InboxMemory for LoomInbox {
    fn load_head(&self, order: Ordering) -> u64 {
        self.head.load(order)
    }

    fn store_head(&self, head: u64, order: Ordering) {
        self.head.store(head, order)
    }

    fn load_line(&self, off: usize, order: Ordering) -> u64 {
        self.first[off / LINE].load(order)
    }

    fn store_line(&self, off: usize, word: u64, order: Ordering) {
        if word != 0 && word != CONSUMED {
            self.check_cleared(off / LINE);
        }
        self.first[off / LINE].store(word, order)
    }

    unsafe fn write_len(&self, off: usize, len: u64) {
        self.word(off / 8 + 1, Some(len));
    }

    unsafe fn read_len(&self, off: usize) -> u64 {
        self.word(off / 8 + 1, None)
    }

    unsafe fn write_bytes(&self, off: usize, src: *const u8, n: usize) {
        // SAFETY: the caller's promise: `src` is readable for `n` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(src, n) };
        for (j, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.word(off / 8 + j, Some(u64::from_le_bytes(w)));
        }
    }
}

type LoomRing = Inbox<LoomInbox, RING, PUBLISH>;

/// A message: its tag and a payload that tells it apart from every other.
fn message(k: u32, len: usize) -> (u64, Vec<u8>) {
    (tag(0, k), (0..len).map(|i| (k as usize * 64 + i + 1) as u8).collect())
}

/// Runs one model: the sender stores `messages` in order (waiting while the ring is full); the owner
/// takes them in the order `take` gives (indices into `messages`), checks each payload and that it
/// is gone once consumed, and at the end that the head met the sender's tail.
fn exchange(orderings: Orderings, messages: &'static [(u32, usize)], take: &'static [usize]) {
    loom::model(move || {
        let inbox: Arc<LoomRing> = Arc::new(Inbox::with_orderings(LoomInbox::new(), orderings));
        let sender = {
            let inbox = inbox.clone();
            loom::thread::spawn(move || {
                let mut st = SenderState::default();
                for &(k, len) in messages {
                    let (t, payload) = message(k, len);
                    // SAFETY (test): a readable payload whose record fits the ring.
                    while !unsafe { inbox.send(&mut st, t, payload.as_ptr(), payload.len()) } {
                        loom::thread::yield_now();
                    }
                }
                st.tail
            })
        };
        let mut st = OwnerState::default();
        for &i in take {
            let (k, len) = messages[i];
            let (t, payload) = message(k, len);
            let rec = loop {
                match inbox.find(&st, t, u64::MAX).expect("no malformed record") {
                    Some(rec) => break rec,
                    None => loom::thread::yield_now(),
                }
            };
            assert_eq!(rec.len, len, "message {k}'s length");
            assert_eq!(inbox.memory().read_bytes(rec.off + HEADER, len), payload, "message {k}");
            inbox.consume(&mut st, rec.pos);
            assert!(inbox.find(&st, t, u64::MAX).unwrap().is_none(), "message {k} found again after it was consumed");
        }
        let tail = sender.join().unwrap();
        assert_eq!(st.head, tail, "the owner's head stops short of the sender's tail");
    });
}

/// Two lines, one line, then two lines that do not fit before the ring's end (a wrap marker, and
/// the first record's lines reused once the owner published past them), taken out of order.
const ACROSS_A_WRAP: &[(u32, usize)] = &[(0, 60), (1, 8), (2, 60)];
const SECOND_FIRST: &[usize] = &[1, 0, 2];

fn across_a_wrap(orderings: Orderings) {
    exchange(orderings, ACROSS_A_WRAP, SECOND_FIRST);
}

#[test]
fn loom_records_arrive_once_in_any_order_across_a_wrap() {
    across_a_wrap(Orderings::PROTOCOL);
}

/// Five one-line records through four lines, in order: the fifth waits for the head the owner
/// publishes after the second line (not after the first), and the ring wraps without a marker.
#[test]
fn loom_the_sender_waits_for_the_published_head() {
    exchange(Orderings::PROTOCOL, &[(0, 8), (1, 48), (2, 1), (3, 8), (4, 40)], &[0, 1, 2, 3, 4]);
}

/// The protocol with each of its orderings weakened in turn: bugs loom must find in the wrap model.
const PLANTED: &[(&str, Orderings)] = &[
    ("tag stored Relaxed", Orderings { tag_store: Ordering::Relaxed, ..Orderings::PROTOCOL }),
    ("tag loaded Relaxed", Orderings { tag_load: Ordering::Relaxed, ..Orderings::PROTOCOL }),
    ("head published Relaxed", Orderings { head_store: Ordering::Relaxed, ..Orderings::PROTOCOL }),
    ("head loaded Relaxed", Orderings { head_load: Ordering::Relaxed, ..Orderings::PROTOCOL }),
    ("lines cleared after the head is published", Orderings { clear_before_publish: false, ..Orderings::PROTOCOL }),
];

#[test]
fn loom_catches_every_planted_bug() {
    for &(bug, orderings) in PLANTED {
        let caught = catch_unwind(AssertUnwindSafe(|| across_a_wrap(orderings))).is_err();
        assert!(caught, "loom did not catch the planted bug: {bug}");
    }
}
