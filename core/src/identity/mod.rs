//! Who the client is: its address ([`client_ip`]), the User-Agent's class and claim
//! ([`classify`] over the [`catalog`], giving a [`class`]), and the claim's verification
//! ([`verification`]: [`published_ranges`], the [`verdict_cache`], callouts in
//! [`verifier_flights`], the sidecar's answers read by [`verifier_answer`]); a signed agent's
//! Web Bot Auth signature ([`signed_agents`], [`signature_callouts`], replays refused by
//! the [`nonce_store`]).

pub mod browser_checks;
pub mod catalog;
pub mod class;
pub mod classify;
pub mod client_ip;
pub mod local_verdicts;
pub mod nonce_store;
pub mod published_ranges;
pub mod signature_callouts;
pub mod signature_checks;
pub mod signature_event;
pub mod signed_agents;
pub mod ua_automaton;
pub mod verdict_cache;
pub mod verification;
pub mod verifier_answer;
pub mod verifier_callouts;
pub mod verifier_flights;
