//! The traffic class of a request: what limits, Retry-After ranges, stats and the class
//! header sent upstream are keyed by.

use crawlguard_contract::catalog::BotClass;
use serde::{Deserialize, Serialize};

/// The traffic class of a request; limits, Retry-After ranges and stats are keyed by it.
///
/// Serialized in snake_case (`"search_crawler"`, ...), the spelling used in configuration,
/// stats names and the class header sent upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A search-engine crawler whose claim was verified: Googlebot, bingbot, ...
    SearchCrawler,
    /// Fetches a page because a user asked an AI assistant right now: ChatGPT-User, ...
    AiRetriever,
    /// Crawls for model training: GPTBot, ClaudeBot, CCBot, ...
    AiTrainer,
    /// SEO, monitoring and other declared bots.
    OtherBot,
    /// HTTP libraries and command-line tools, and requests with an empty or missing UA.
    Script,
    /// Everything else (browsers).
    Human,
    /// A crawler UA whose claim needs verification that has not (yet) succeeded.
    UnverifiedBot,
    /// A crawler UA whose claim was checked and failed (set by the verifier path).
    Spoofed,
    /// A browser User-Agent whose request is not what that browser sends: a browser check
    /// of the catalog (`browser_checks`, e.g. a current Chrome over TLS without fetch
    /// metadata) failed. Library clients that copy a browser's User-Agent land here.
    SuspectBrowser,
}

impl Class {
    /// How many classes there are: the length of every per-class table.
    pub const COUNT: usize = 9;

    /// Every class, in a fixed order (used to pre-define stats).
    pub const ALL: [Class; Class::COUNT] = [
        Class::SearchCrawler,
        Class::AiRetriever,
        Class::AiTrainer,
        Class::OtherBot,
        Class::Script,
        Class::Human,
        Class::UnverifiedBot,
        Class::Spoofed,
        Class::SuspectBrowser,
    ];

    /// The snake_case name, as used in config, stats and the class header.
    pub fn as_str(self) -> &'static str {
        match self {
            // The catalog's classes are spelled once, in the contract.
            Class::SearchCrawler => BotClass::SearchCrawler.as_str(),
            Class::AiRetriever => BotClass::AiRetriever.as_str(),
            Class::AiTrainer => BotClass::AiTrainer.as_str(),
            Class::OtherBot => BotClass::OtherBot.as_str(),
            Class::Script => BotClass::Script.as_str(),
            Class::Human => "human",
            Class::UnverifiedBot => "unverified_bot",
            Class::Spoofed => "spoofed",
            Class::SuspectBrowser => "suspect_browser",
        }
    }

    /// Position in [`Class::ALL`] (its declaration order), for per-class tables.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// True for the crawler classes (`search_crawler`, `ai_retriever`, `ai_trainer`): the
    /// ones a request only gets once its claim is verified, and whose degraded pages the
    /// soft-404 guard turns into 503s.
    pub const fn is_crawler(self) -> bool {
        matches!(
            self,
            Class::SearchCrawler | Class::AiRetriever | Class::AiTrainer
        )
    }

    /// True for the classes whose requests name no catalog bot (`human`, and
    /// `suspect_browser`: a human request a browser check failed), so a `bot` limit key
    /// never charges them.
    pub const fn names_no_bot(self) -> bool {
        matches!(self, Class::Human | Class::SuspectBrowser)
    }

    /// Parses a snake_case class name; `None` if unknown.
    pub fn parse(name: &str) -> Option<Class> {
        Class::ALL.iter().copied().find(|c| c.as_str() == name)
    }
}

impl From<BotClass> for Class {
    /// The class a catalog entry claims, as a request class.
    fn from(c: BotClass) -> Class {
        match c {
            BotClass::SearchCrawler => Class::SearchCrawler,
            BotClass::AiRetriever => Class::AiRetriever,
            BotClass::AiTrainer => Class::AiTrainer,
            BotClass::OtherBot => Class::OtherBot,
            BotClass::Script => Class::Script,
        }
    }
}

/// One `T` per class, indexed by [`Class`]: every class has its slot, so an index never
/// fails and no fallback is needed (the per-class tables of the configuration, the counters
/// and the command's reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PerClass<T>([T; Class::COUNT]);

impl<T> PerClass<T> {
    /// A table with `f(class)` for each class.
    pub fn from_fn(f: impl FnMut(Class) -> T) -> PerClass<T> {
        PerClass(Class::ALL.map(f))
    }

    /// Each class with its value, in [`Class::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Class, &T)> {
        Class::ALL.into_iter().zip(self.0.iter())
    }

    /// Each class with its value to change, in [`Class::ALL`] order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Class, &mut T)> {
        Class::ALL.into_iter().zip(self.0.iter_mut())
    }
}

impl<T: Default> Default for PerClass<T> {
    fn default() -> PerClass<T> {
        PerClass::from_fn(|_| T::default())
    }
}

impl<T> std::ops::Index<Class> for PerClass<T> {
    type Output = T;

    fn index(&self, class: Class) -> &T {
        // Self-produced: `class.index()` < Class::COUNT, the array's length.
        #[allow(clippy::indexing_slicing)]
        &self.0[class.index()]
    }
}

impl<T> std::ops::IndexMut<Class> for PerClass<T> {
    fn index_mut(&mut self, class: Class) -> &mut T {
        // Self-produced: `class.index()` < Class::COUNT, the array's length.
        #[allow(clippy::indexing_slicing)]
        &mut self.0[class.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_class_table_has_one_slot_per_class_in_order() {
        let mut t = PerClass::from_fn(|c| c.index() * 10);
        t[Class::Spoofed] += 1;
        assert_eq!(t[Class::SearchCrawler], 0);
        assert_eq!(t[Class::Spoofed], 71);
        let order: Vec<Class> = t.iter().map(|(c, _)| c).collect();
        assert_eq!(order, Class::ALL.to_vec());
        assert!(PerClass::<u8>::default().iter().all(|(_, v)| *v == 0));
    }

    #[test]
    fn class_index_is_the_position_in_all() {
        for (i, c) in Class::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
    }

    #[test]
    fn class_names_round_trip() {
        for c in Class::ALL {
            assert_eq!(Class::parse(c.as_str()), Some(c));
        }
        assert_eq!(Class::parse("suspicious"), None);
    }

    #[test]
    fn serde_spells_each_class_as_as_str_does() {
        for c in Class::ALL {
            let json = serde_json::to_string(&c).expect("serialises");
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Class>(&json).ok(), Some(c));
        }
    }

    #[test]
    fn catalog_classes_keep_their_names() {
        for c in [
            BotClass::SearchCrawler,
            BotClass::AiRetriever,
            BotClass::AiTrainer,
            BotClass::OtherBot,
            BotClass::Script,
        ] {
            assert_eq!(Class::from(c).as_str(), c.as_str());
            assert_eq!(Class::from(c).is_crawler(), c.is_crawler());
        }
    }
}
