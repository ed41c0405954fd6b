//! Symbolic element values of the verifier: an element is (index, set of contributing ranks), with
//! the rank sets interned so that an element is 8 bytes and combining two is a cached lookup.
//!
//! Set id 0 is "undefined" (never written); ids ≥ [`POISON`] are bad values created by a faulty
//! combination, each carrying the reason that was recorded where it was created.

use std::collections::HashMap;

/// Largest job the verifier accepts (rank sets are fixed 256-bit sets).
pub(crate) const MAX_RANKS: usize = 256;
const WORDS: usize = MAX_RANKS / 64;

/// A set of ranks.
pub(crate) type Bits = [u64; WORDS];

/// Set id of an element that was never written.
pub(crate) const UNDEF: u32 = 0;
/// Set ids from here on are poison values (index into [`Sets::poison`] after subtracting).
pub(crate) const POISON: u32 = 1 << 31;

/// One symbolic element: element `idx` of the contributions of the ranks in set `set`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Val {
    pub idx: u32,
    pub set: u32,
}

impl Val {
    pub const UNDEF: Val = Val { idx: 0, set: UNDEF };
}

pub(crate) fn bit(bits: &mut Bits, r: usize) {
    bits[r / 64] |= 1 << (r % 64);
}

pub(crate) fn or(a: &mut Bits, b: &Bits) {
    for (x, y) in a.iter_mut().zip(b) {
        *x |= y;
    }
}

pub(crate) fn full(p: usize) -> Bits {
    let mut b = [0; WORDS];
    for r in 0..p {
        bit(&mut b, r);
    }
    b
}

/// `{0..3, 5, 7..9}` (half-open runs, like regions).
pub(crate) fn fmt_bits(bits: &Bits) -> String {
    let has = |r: usize| bits[r / 64] >> (r % 64) & 1 == 1;
    let mut runs = Vec::new();
    let mut r = 0;
    while r < MAX_RANKS {
        if has(r) {
            let lo = r;
            while r < MAX_RANKS && has(r) {
                r += 1;
            }
            runs.push(if r - lo == 1 { format!("{lo}") } else { format!("{lo}..{r}") });
        } else {
            r += 1;
        }
    }
    format!("{{{}}}", runs.join(", "))
}

struct Info {
    bits: Bits,
    /// Lowest rank and one past the highest.
    lo: u16,
    hi: u16,
    /// Whether the set is exactly `lo..hi`.
    contiguous: bool,
}

/// What went wrong in a combination (formatted only if it reaches a result).
#[derive(Copy, Clone, Debug)]
pub(crate) enum Fault {
    Undefined,
    IndexMismatch,
    DoubleContribution,
    NonAdjacent,
}

/// Where and how a poison value was made: `where_` says by which step (formatted lazily by the
/// caller's closure text), `first ⊕ second` the operands.
pub(crate) struct PoisonInfo {
    pub origin: String,
    pub fault: Fault,
    pub first: Val,
    pub second: Val,
}

/// The interned rank sets of one verification run, and the origins of poison values.
pub(crate) struct Sets {
    infos: Vec<Info>,
    ids: HashMap<Bits, u32>,
    unions: HashMap<(u32, u32), u32>,
    poison: Vec<PoisonInfo>,
}

impl Sets {
    pub fn new() -> Sets {
        let empty = Info { bits: [0; WORDS], lo: 0, hi: 0, contiguous: true };
        Sets { infos: vec![empty], ids: HashMap::new(), unions: HashMap::new(), poison: Vec::new() }
    }

    pub fn intern(&mut self, bits: Bits) -> u32 {
        if let Some(&id) = self.ids.get(&bits) {
            return id;
        }
        let count: u32 = bits.iter().map(|w| w.count_ones()).sum();
        let lo = (0..MAX_RANKS).find(|&r| bits[r / 64] >> (r % 64) & 1 == 1).unwrap_or(0);
        let hi = (0..MAX_RANKS).rev().find(|&r| bits[r / 64] >> (r % 64) & 1 == 1).map_or(0, |r| r + 1);
        let contiguous = hi - lo == count as usize;
        let id = self.infos.len() as u32;
        self.infos.push(Info { bits, lo: lo as u16, hi: hi as u16, contiguous });
        self.ids.insert(bits, id);
        id
    }

    pub fn single(&mut self, r: u32) -> u32 {
        self.range(r, r + 1)
    }

    /// The set of ranks `lo..hi` (must be non-empty).
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        let mut b = [0; WORDS];
        for r in lo..hi {
            bit(&mut b, r as usize);
        }
        self.intern(b)
    }

    pub fn bits(&self, id: u32) -> &Bits {
        &self.infos[id as usize].bits
    }

    /// Registers a poison value.
    pub fn poison(&mut self, info: PoisonInfo) -> u32 {
        self.poison.push(info);
        POISON + (self.poison.len() - 1) as u32
    }

    fn reason(&self, info: &PoisonInfo) -> String {
        let (first, second) = (info.first, info.second);
        let why = match info.fault {
            Fault::Undefined => format!("combines {} with {}", self.describe(first), self.describe(second)),
            Fault::IndexMismatch => format!("combines index {} with index {}", first.idx, second.idx),
            Fault::DoubleContribution => {
                let (a, b) = (self.bits(first.set), self.bits(second.set));
                let mut both = *a;
                for (x, y) in both.iter_mut().zip(b) {
                    *x &= y;
                }
                format!(
                    "double contribution of ranks {}: ranks {} combined with ranks {}",
                    fmt_bits(&both),
                    fmt_bits(a),
                    fmt_bits(b)
                )
            }
            Fault::NonAdjacent => format!(
                "non-adjacent combination ranks {} ⊕ ranks {}: a non-commutative op may only combine adjacent \
                 rank ranges, lower ranks first",
                fmt_bits(self.bits(first.set)),
                fmt_bits(self.bits(second.set))
            ),
        };
        format!("{}: {why}", info.origin)
    }

    fn union(&mut self, a: u32, b: u32) -> u32 {
        let key = if a < b { (a, b) } else { (b, a) };
        if let Some(&u) = self.unions.get(&key) {
            return u;
        }
        let mut bits = self.infos[a as usize].bits;
        or(&mut bits, &self.infos[b as usize].bits);
        let u = self.intern(bits);
        self.unions.insert(key, u);
        u
    }

    /// Human-readable value: "index 4 from ranks {0..3}", "undefined (never written)", or the
    /// reason of a poison value.
    pub fn describe(&self, v: Val) -> String {
        if v.set == UNDEF {
            "undefined (never written)".into()
        } else if v.set >= POISON {
            format!("a bad value ({})", self.reason(&self.poison[(v.set - POISON) as usize]))
        } else {
            format!("index {} from ranks {}", v.idx, fmt_bits(self.bits(v.set)))
        }
    }

    /// `first ⊕ second` (first = lower ranks for a non-commutative op). A poison operand is
    /// propagated; other faults are returned, and the caller turns them into a poison value.
    pub fn combine(&mut self, first: Val, second: Val, commutative: bool) -> Result<Val, Fault> {
        if first.set >= POISON {
            return Ok(first);
        }
        if second.set >= POISON {
            return Ok(second);
        }
        if first.set == UNDEF || second.set == UNDEF {
            return Err(Fault::Undefined);
        }
        if first.idx != second.idx {
            return Err(Fault::IndexMismatch);
        }
        let (a, b) = (&self.infos[first.set as usize], &self.infos[second.set as usize]);
        if commutative {
            if a.bits.iter().zip(&b.bits).any(|(x, y)| x & y != 0) {
                return Err(Fault::DoubleContribution);
            }
        } else if !(a.contiguous && b.contiguous && a.hi == b.lo) {
            return Err(Fault::NonAdjacent);
        }
        Ok(Val { idx: first.idx, set: self.union(first.set, second.set) })
    }
}
