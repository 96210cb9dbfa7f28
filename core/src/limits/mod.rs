//! The limit decision ([`decision`]: which limits and keys a request charges, what is
//! given back) over the [`limiter`]'s buckets: token-bucket math ([`bucket`]), Retry-After
//! compliance and escalation ([`escalation`]), learned costs ([`cost`]), requests in flight
//! ([`in_flight`]) and per-worker token leases ([`lease`]).

pub mod bucket;
pub mod bucket_key;
pub mod cost;
pub mod decision;
pub mod escalation;
pub mod in_flight;
pub mod lease;
pub mod limiter;
