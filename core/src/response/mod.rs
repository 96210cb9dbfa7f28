//! What the filter answers: our local rejection ([`rejection`]: status, Retry-After,
//! headers, body) and the origin's responses on the way back ([`rewrite`]).

pub mod rejection;
pub mod rewrite;
