//! Who the client is: its address ([`client_ip`]), the User-Agent's class and claim
//! ([`classify`] over the [`catalog`], giving a [`class`]), and the claim's verification
//! ([`verification`]: [`published_ranges`], the [`verdict_cache`], callouts in
//! [`verifier_flights`], the sidecar's answers read by [`verifier_answer`]).

pub mod browser_checks;
pub mod catalog;
pub mod class;
pub mod classify;
pub mod client_ip;
pub mod published_ranges;
pub mod ua_automaton;
pub mod verdict_cache;
pub mod verification;
pub mod verifier_answer;
pub mod verifier_callouts;
pub mod verifier_flights;
