//! The User-Agent matcher's automaton: an Aho-Corasick automaton over ASCII-lowercased
//! bytes as a dense DFA ([`Dfa`]), so a User-Agent costs one table step per byte whatever the
//! catalog's size. [`crate::identity::classify`] compiles the catalog's and the human rule's
//! tokens into it and reads its hits.

/// What a token stands for: a catalog entry (the lowest index found wins) or flag bits
/// (all found are kept).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Out {
    /// A catalog entry's index.
    Entry(u32),
    /// Flag bits.
    Flags(u8),
}

/// `Dfa::entry` of a state that ends no entry token.
pub(crate) const NO_ENTRY: u32 = u32::MAX;

/// A transition table: `u16` entries while the state ids fit in 15 bits (every realistic
/// catalog), else `u32`. The top bit of an entry marks a target state where a token ends, so
/// the scan reads one table entry per byte.
#[derive(Debug, Clone)]
pub(crate) enum Trans {
    /// While the state ids fit in 15 bits.
    Small(Vec<u16>),
    /// Otherwise.
    Large(Vec<u32>),
}

/// An entry of a transition table: a state id and the "a token ends there" mark.
trait StateId: Copy {
    /// The target state.
    fn index(self) -> usize;
    /// Whether a token ends at the target state.
    fn marked(self) -> bool;
}

impl StateId for u16 {
    fn index(self) -> usize {
        usize::from(self & 0x7fff)
    }
    fn marked(self) -> bool {
        self & 0x8000 != 0
    }
}

impl StateId for u32 {
    fn index(self) -> usize {
        // State ids are indexes of a Vec, so they fit a usize.
        (self & 0x7fff_ffff) as usize
    }
    fn marked(self) -> bool {
        self & 0x8000_0000 != 0
    }
}

/// A match the scan reports: the state's outputs at one position.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hit {
    /// Index of the last byte of the match (the UA's length for the virtual end space).
    pub(crate) end: usize,
    /// Lowest entry index ending here, or [`NO_ENTRY`].
    pub(crate) entry: u32,
    /// Flag bits of the tokens ending here.
    pub(crate) flags: u8,
    /// Length of the longest token ending here that carries `len_flag`.
    pub(crate) len: u16,
}

/// An Aho-Corasick automaton over ASCII-lowercased bytes, as a dense DFA: `trans[state *
/// stride + class]` is the next state, where `class` is the byte's class (the distinct bytes
/// the tokens use, case folded, each have one; every other byte shares class 0).
#[derive(Debug, Clone)]
pub(crate) struct Dfa {
    /// Class of every byte (ASCII upper case folded onto lower case).
    pub(crate) classes: [u8; 256],
    /// Number of classes.
    pub(crate) stride: usize,
    pub(crate) trans: Trans,
    /// Per state: lowest entry index of a token ending here (or at a suffix of it).
    pub(crate) entry: Vec<u32>,
    /// Per state: flag bits of the tokens ending here (or at a suffix).
    pub(crate) flags: Vec<u8>,
    /// Per state: length of the longest token with the `len_flag` bit ending here.
    pub(crate) len: Vec<u16>,
}

impl Dfa {
    /// Compiles `tokens`. Tokens are lowercased (ASCII only; other bytes must match exactly);
    /// a token that is empty or only whitespace is dropped (it would match every UA). For
    /// tokens carrying `len_flag`, each state records the longest one's length (to find where
    /// an anchor starts).
    // Indexing here is over this function's own arrays: `classes` (256) by a byte, the
    // states it pushed (< children.len()) and classes it assigned (< stride). Config tokens
    // only decide the automaton's shape, never an index.
    #[allow(clippy::indexing_slicing)]
    pub(crate) fn new<'a>(tokens: impl IntoIterator<Item = (Out, &'a str)>, len_flag: u8) -> Dfa {
        let tokens: Vec<(Out, Vec<u8>)> = tokens
            .into_iter()
            .filter(|(_, t)| !t.trim().is_empty())
            .map(|(o, t)| (o, t.as_bytes().to_ascii_lowercase()))
            .collect();
        // Byte classes: 0 for bytes no token uses.
        let mut classes = [0u8; 256];
        let mut stride = 1usize;
        for (_, t) in &tokens {
            for &b in t {
                if classes[usize::from(b)] == 0 && stride < 256 {
                    classes[usize::from(b)] = stride as u8;
                    stride += 1;
                }
            }
        }
        for upper in b'A'..=b'Z' {
            classes[usize::from(upper)] = classes[usize::from(upper.to_ascii_lowercase())];
        }
        // The trie, with sparse children while building.
        let mut children: Vec<Vec<(u8, usize)>> = vec![Vec::new()];
        let mut entry = vec![NO_ENTRY];
        let mut flags = vec![0u8];
        let mut len = vec![0u16];
        for (out, t) in &tokens {
            let mut s = 0usize;
            for &b in t {
                let c = classes[usize::from(b)];
                s = match children[s].iter().find(|(k, _)| *k == c) {
                    Some(&(_, next)) => next,
                    None => {
                        let next = children.len();
                        children.push(Vec::new());
                        entry.push(NO_ENTRY);
                        flags.push(0);
                        len.push(0);
                        children[s].push((c, next));
                        next
                    }
                };
            }
            match *out {
                Out::Entry(e) => entry[s] = entry[s].min(e),
                Out::Flags(f) => {
                    flags[s] |= f;
                    if f & len_flag != 0 {
                        len[s] = len[s].max(u16::try_from(t.len()).unwrap_or(u16::MAX));
                    }
                }
            }
        }
        // Breadth-first: failure links, dense transitions, outputs merged along the links.
        let states = children.len();
        let mut trans = vec![0u32; states * stride];
        let mut fail = vec![0usize; states];
        let mut queue = std::collections::VecDeque::new();
        for &(c, next) in &children[0] {
            trans[usize::from(c)] = next as u32;
            queue.push_back(next);
        }
        while let Some(s) = queue.pop_front() {
            let f = fail[s];
            entry[s] = entry[s].min(entry[f]);
            flags[s] |= flags[f];
            len[s] = len[s].max(len[f]);
            for c in 0..stride {
                trans[s * stride + c] = trans[f * stride + c];
            }
            for &(c, next) in &children[s] {
                fail[next] = trans[f * stride + usize::from(c)] as usize;
                trans[s * stride + usize::from(c)] = next as u32;
                queue.push_back(next);
            }
        }
        // Mark every transition into a state where a token ends.
        let ends = |t: u32| {
            let t = t as usize;
            entry.get(t).is_some_and(|&e| e != NO_ENTRY) || flags.get(t).is_some_and(|&f| f != 0)
        };
        let trans = match states <= 0x7fff {
            true => Trans::Small(
                trans
                    .iter()
                    .map(|&t| t as u16 | if ends(t) { 0x8000 } else { 0 })
                    .collect(),
            ),
            false => Trans::Large(
                trans
                    .iter()
                    .map(|&t| t | if ends(t) { 0x8000_0000 } else { 0 })
                    .collect(),
            ),
        };
        Dfa {
            classes,
            stride,
            trans,
            entry,
            flags,
            len,
        }
    }

    /// Runs `hay` (and one space after it, with `end_space`) through the automaton and calls
    /// `visit` at every position where a token ends; stops when `visit` returns true.
    pub(crate) fn scan(&self, hay: &[u8], end_space: bool, visit: impl FnMut(Hit) -> bool) {
        match &self.trans {
            Trans::Small(t) => self.scan_with(t, hay, end_space, visit),
            Trans::Large(t) => self.scan_with(t, hay, end_space, visit),
        }
    }

    fn scan_with<T: StateId>(
        &self,
        trans: &[T],
        hay: &[u8],
        end_space: bool,
        mut visit: impl FnMut(Hit) -> bool,
    ) {
        let next = |s: usize, b: u8| {
            // A byte always indexes the 256 classes (the check compiles away).
            let c = usize::from(self.classes.get(usize::from(b)).copied().unwrap_or(0));
            trans.get(s * self.stride + c).copied()
        };
        let mut s = 0usize;
        for (end, &b) in hay.iter().enumerate() {
            let Some(t) = next(s, b) else {
                s = 0;
                continue;
            };
            s = t.index();
            if t.marked() && visit(self.hit(s, end)) {
                return;
            }
        }
        if end_space {
            if let Some(t) = next(s, b' ').filter(|t| t.marked()) {
                visit(self.hit(t.index(), hay.len()));
            }
        }
    }

    /// The outputs of state `s`, reached at `end`.
    fn hit(&self, s: usize, end: usize) -> Hit {
        Hit {
            end,
            entry: self.entry.get(s).copied().unwrap_or(NO_ENTRY),
            flags: self.flags.get(s).copied().unwrap_or(0),
            len: self.len.get(s).copied().unwrap_or(0),
        }
    }
}
