//! Counters keyed by a bounded set of values, for the questions an operator asks first:
//! which limit said no (`crawlguard.limit.<limit>.{limited,shadow_limited}`, one pair per
//! configured limit), what each known bot got (`crawlguard.bot.<bot>.{requests,rejected}`,
//! one pair per bot id of the built-in catalog and one for every other id, `other`), and how
//! long each route was shed at each level (`crawlguard.shed.<route>.duration_ms.<level>`).
//!
//! Nothing here is keyed by a client address or any value a client chooses: a bot id
//! outside the catalog (a configured `bots[]` entry) counts as `other`, so the number of
//! counters is fixed by the configuration.

use super::{bump, Id};
use crate::config::Config;

/// The bot id the per-bot counters use for every id outside the built-in catalog.
pub const OTHER_BOT: &str = "other";

/// Per-bot counter suffixes (`crawlguard.bot.<bot>.<suffix>`): requests decided with the
/// bot id (any class), and those crawlguard rejected (its limits' 429/503 or a shed 503,
/// enforce mode).
pub const BOT_COUNTERS: [&str; 2] = ["requests", "rejected"];

/// One bot id's counters, in [`BOT_COUNTERS`] order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BotIds([Id; 2]);

/// The per-limit, per-bot and shed-time counters' host ids.
#[derive(Debug, Clone, Default)]
pub struct PerKey {
    /// Per configured limit (by index): `limited`, `shadow_limited`.
    limit: Vec<[Id; 2]>,
    /// Per built-in bot id, sorted by id (binary search: no allocation per request).
    bots: Vec<(&'static str, BotIds)>,
    /// Every other bot id.
    other_bot: BotIds,
    /// Per route, per shed level 1..=`shedding.order.len()` (index level - 1).
    shed_ms: Vec<Vec<Id>>,
}

impl PerKey {
    /// Defines the counters for `cfg` through `define` (name -> host id): the limits', the
    /// bots' (sorted by id, `other` last) and, with shedding on, the routes' shed times.
    pub fn define(cfg: &Config, define: &mut dyn FnMut(&str) -> Id) -> PerKey {
        let limit = cfg
            .limits
            .iter()
            .map(|l| {
                ["limited", "shadow_limited"]
                    .map(|d| define(&format!("crawlguard.limit.{}.{d}", l.name)))
            })
            .collect();
        let mut ids: Vec<&'static str> = crate::identity::catalog::builtin_bot_ids().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut bot =
            |id: &str| BotIds(BOT_COUNTERS.map(|c| define(&format!("crawlguard.bot.{id}.{c}"))));
        let bots = ids.into_iter().map(|id| (id, bot(id))).collect();
        let other_bot = bot(OTHER_BOT);
        let shed_ms = if cfg.shedding.enabled {
            (0..=cfg.routes.len())
                .map(|i| {
                    let route = cfg.route_name(i);
                    (1..=cfg.shedding.order.len())
                        .map(|l| define(&format!("crawlguard.shed.{route}.duration_ms.{l}")))
                        .collect()
                })
                .collect()
        } else {
            Vec::new()
        };
        PerKey {
            limit,
            bots,
            other_bot,
            shed_ms,
        }
    }

    /// The counters of bot id `bot` (`None`: the request names no bot, nothing to count).
    pub fn bot(&self, bot: Option<&str>) -> Option<BotIds> {
        let bot = bot?;
        Some(
            self.bots
                .binary_search_by(|(id, _)| (*id).cmp(bot))
                .ok()
                .and_then(|i| self.bots.get(i))
                .map_or(self.other_bot, |(_, ids)| *ids),
        )
    }

    /// Counts a request of bot `ids`, and (`rejected`) crawlguard's rejection of it.
    pub fn record_bot(ids: Option<BotIds>, rejected: bool, inc: &mut dyn FnMut(u32)) {
        let Some(BotIds([requests, rejections])) = ids else {
            return;
        };
        bump(requests, inc);
        if rejected {
            bump(rejections, inc);
        }
    }

    /// Counts a rejection by limit `limit` (its index in `cfg.limits`; `shadow`: counted,
    /// not enforced).
    pub fn record_limit(&self, limit: usize, shadow: bool, inc: &mut dyn FnMut(u32)) {
        let ids = self.limit.get(limit).copied().unwrap_or_default();
        bump(ids.get(usize::from(shadow)).copied().flatten(), inc);
    }

    /// The counter of `ms` spent shed at `level` on route `route` (`None` at level 0, or
    /// with shedding off).
    pub fn shed_ms(&self, route: usize, level: u8) -> Id {
        let idx = usize::from(level).checked_sub(1)?;
        self.shed_ms.get(route)?.get(idx).copied().flatten()
    }
}
