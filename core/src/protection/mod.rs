//! Protecting the origin: its windowed health per route ([`origin_health`], with the
//! [`top_clients`] that carry the evidence), the shed level it sets ([`shedding`]) and the
//! time spent at each level ([`shed_clock`]).

pub mod origin_health;
pub mod shed_clock;
pub mod shedder;
pub mod shedding;
pub mod top_clients;
