//! What one limit key keeps in its slot ([`KeyState`]), and its slot layout.

use crate::identity::class::Class;
use crate::limits::bucket::{self, BucketState};
use crate::limits::cost::CostState;
use crate::limits::escalation::Compliance;
use crate::limits::in_flight::InFlight;
use crate::store::slot_table::{read_u64, write_u64, SlotValue};

/// What one limit key keeps: its bucket, what it was told (Retry-After compliance and
/// escalation, [`crate::limits::escalation`]), its places in flight
/// ([`crate::limits::in_flight`]) and a cost-based key's learned cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyState {
    /// The token bucket.
    pub bucket: BucketState,
    /// Retry-After compliance and escalation.
    pub compliance: Compliance,
    /// Requests in flight: of the key under a concurrency limit (`limits[].max_in_flight`),
    /// or of a client under a cost-based limit (`limits[].cost.max_in_flight`).
    pub places: InFlight,
    /// A cost-based key's learned cost.
    pub cost: CostState,
}

/// A key's state in a slot: `tat_ns`, `last_ns`, `told_until_ns`, `penalty_until_ns`,
/// `forget_at_ns` (8 each), `ignored` (2), `level` (1), the told class (1: 0 for none, else
/// its [`Class::index`] + 1), the places in flight's `current` (2), `previous` (2) and
/// `epoch_s` (4), and the cost state's `last_cost` (4), little-endian, after the table's
/// version and owner (65 bytes in all).
impl SlotValue for KeyState {
    const LEN: usize = 56;
    const VERSION: u8 = 6;

    fn encode(&self, out: &mut [u8]) {
        let c = &self.compliance;
        write_u64(out, 0, self.bucket.tat_ns);
        write_u64(out, 8, self.bucket.last_ns);
        write_u64(out, 16, c.told_until_ns);
        write_u64(out, 24, c.penalty_until_ns);
        write_u64(out, 32, c.forget_at_ns);
        if let Some(d) = out.get_mut(40..42) {
            d.copy_from_slice(&c.ignored.to_le_bytes());
        }
        if let Some(d) = out.get_mut(42) {
            *d = c.level;
        }
        if let Some(d) = out.get_mut(43) {
            // At most Class::ALL.len() (8): fits.
            *d = c.class.map_or(0, |k| k.index() as u8 + 1);
        }
        if let Some(d) = out.get_mut(44..46) {
            d.copy_from_slice(&self.places.current.to_le_bytes());
        }
        if let Some(d) = out.get_mut(46..48) {
            d.copy_from_slice(&self.places.previous.to_le_bytes());
        }
        if let Some(d) = out.get_mut(48..52) {
            d.copy_from_slice(&self.places.epoch_s.to_le_bytes());
        }
        if let Some(d) = out.get_mut(52..56) {
            d.copy_from_slice(&self.cost.last_cost.to_le_bytes());
        }
    }

    fn decode(b: &[u8]) -> Option<Self> {
        Some(KeyState {
            bucket: BucketState {
                tat_ns: read_u64(b, 0)?,
                last_ns: read_u64(b, 8)?,
            },
            compliance: Compliance {
                told_until_ns: read_u64(b, 16)?,
                penalty_until_ns: read_u64(b, 24)?,
                forget_at_ns: read_u64(b, 32)?,
                ignored: u16::from_le_bytes(b.get(40..42)?.try_into().ok()?),
                level: *b.get(42)?,
                class: match *b.get(43)? {
                    0 => None,
                    n => Some(*Class::ALL.get(usize::from(n) - 1)?),
                },
            },
            places: InFlight {
                current: u16::from_le_bytes(b.get(44..46)?.try_into().ok()?),
                previous: u16::from_le_bytes(b.get(46..48)?.try_into().ok()?),
                epoch_s: u32::from_le_bytes(b.get(48..52)?.try_into().ok()?),
            },
            cost: CostState {
                last_cost: u32::from_le_bytes(b.get(52..56)?.try_into().ok()?),
            },
        })
    }

    /// A key whose bucket is full again and that remembers nothing carries no information
    /// (rank 0); any other ranks 1, so a key never takes another key's active state.
    fn rank(&self, now_ns: u64) -> u8 {
        u8::from(
            !(bucket::is_full(self.bucket, now_ns)
                && self.compliance.is_idle(now_ns)
                && self.places.is_idle(now_ns)),
        )
    }

    fn free_at_ns(&self) -> u64 {
        self.bucket
            .tat_ns
            .max(self.compliance.idle_at_ns())
            .max(self.places.idle_at_ns())
    }

    /// A shared value keeps no Retry-After compliance (a penalty belongs to one client,
    /// [`crate::limits::escalation`]) and no places in flight ([`InFlight::shared`]).
    fn shared(&self) -> Self {
        KeyState {
            bucket: self.bucket,
            compliance: Compliance::default(),
            places: self.places.shared(),
            cost: self.cost,
        }
    }
}
