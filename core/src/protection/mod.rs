//! Protecting the origin: its windowed health per route ([`origin_health`], with the
//! [`top_clients`] that carry the evidence) and the shed level it sets ([`shedding`]).

pub mod origin_health;
pub mod shedder;
pub mod shedding;
pub mod top_clients;
