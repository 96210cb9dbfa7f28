//! [`CounterBuffer`]: counter increments kept in a worker's memory until the root tick
//! hands them to Envoy ([`super::STATS_FLUSH_MS`]).

/// Counter increments kept in VM memory until the next flush: one entry per counter id
/// touched since the last flush (at most the number of defined counters, so memory is
/// bounded by configuration), found by a linear scan (a request touches one to three).
/// Draining keeps the capacity, so a warm buffer allocates nothing per request.
#[derive(Debug, Default)]
pub struct CounterBuffer {
    pending: Vec<(u32, u64)>,
}

impl CounterBuffer {
    /// Adds `n` to counter `id` (saturating).
    pub fn add(&mut self, id: u32, n: u64) {
        match self.pending.iter_mut().find(|(i, _)| *i == id) {
            Some((_, v)) => *v = v.saturating_add(n),
            None => self.pending.push((id, n)),
        }
    }

    /// What counter `id` has pending (0 when nothing).
    pub fn pending(&self, id: u32) -> u64 {
        self.pending
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(0, |(_, v)| *v)
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Hands every pending `(id, n)` with `n > 0` to `out` (the host's counter add), in
    /// first-touched order, and empties the buffer.
    pub fn flush(&mut self, out: &mut dyn FnMut(u32, u64)) {
        for (id, n) in self.pending.drain(..) {
            if n > 0 {
                out(id, n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn buffered_counts_reach_the_host_only_at_a_flush_and_add_up_exactly() {
        let mut b = CounterBuffer::default();
        let mut host: HashMap<u32, u64> = HashMap::new();
        for _ in 0..1000 {
            b.add(7, 1);
        }
        b.add(9, 5);
        b.add(7, 2);
        // Nothing reached the host yet: counters lag until the flush.
        assert!(host.is_empty());
        assert_eq!(b.pending(7), 1002);
        let mut calls = 0;
        b.flush(&mut |id, n| {
            calls += 1;
            *host.entry(id).or_default() += n;
        });
        // One host call per counter touched, not per event.
        assert_eq!(calls, 2);
        assert_eq!(host.get(&7), Some(&1002));
        assert_eq!(host.get(&9), Some(&5));
        assert!(b.is_empty());
        // Nothing pending: a flush makes no call; a warm buffer keeps its capacity.
        let cap = b.pending.capacity();
        b.flush(&mut |_, _| calls += 1);
        assert_eq!(calls, 2);
        b.add(7, 1);
        assert_eq!(b.pending.capacity(), cap);
        b.add(8, u64::MAX);
        b.add(8, 1);
        assert_eq!(b.pending(8), u64::MAX);
    }
}
