//! Crawler verification seam: the verifier sidecar's verdict re-classes a claimed bot.
//!
//! The callout itself (`GET /v1/verify?ip=..&bot=..` on the `crawlguard_verifier` cluster,
//! see DESIGN.md "Verifier contract") and the shared verdict cache come with the verifier
//! issue; until then every `verify: true` claim stays [`Class::UnverifiedBot`].

use crate::classify::{Class, Classification};

/// The verifier's answer about one (IP, bot id) claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BotVerdict {
    /// FCrDNS or published IP ranges confirm the claim.
    Verified,
    /// The claim was checked and failed.
    Spoofed,
    /// Could not decide now (DNS timeout, no method, verifier error).
    Unknown,
}

/// The class a request gets once its claim has `verdict`: the bot's own class when verified,
/// `spoofed` when the claim failed, `unverified_bot` otherwise. Requests without a claim to
/// verify keep their class.
pub fn reclass(c: &Classification<'_>, verdict: BotVerdict) -> Class {
    match c.bot {
        Some(bot) if bot.verify => match verdict {
            BotVerdict::Verified => bot.class,
            BotVerdict::Spoofed => Class::Spoofed,
            BotVerdict::Unknown => Class::UnverifiedBot,
        },
        _ => c.class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::BotEntry;

    #[test]
    fn verdicts_reclass_only_claims_that_need_verification() {
        let g = BotEntry {
            id: "googlebot".into(),
            ua_contains: vec!["googlebot".into()],
            class: Class::SearchCrawler,
            verify: true,
        };
        let claim = Classification {
            bot: Some(&g),
            class: Class::UnverifiedBot,
        };
        assert_eq!(reclass(&claim, BotVerdict::Verified), Class::SearchCrawler);
        assert_eq!(reclass(&claim, BotVerdict::Spoofed), Class::Spoofed);
        assert_eq!(reclass(&claim, BotVerdict::Unknown), Class::UnverifiedBot);
        let human = Classification {
            bot: None,
            class: Class::Human,
        };
        assert_eq!(reclass(&human, BotVerdict::Spoofed), Class::Human);
    }
}
