//! User-Agent classification on arbitrary bytes (up to 64 KiB and more): never panics, and the
//! result is the same in any ASCII case and consistent with the matched catalog entry.
#![no_main]

use crawlguard_core::identity::catalog::builtin_catalog;
use crawlguard_core::identity::class::Class;
use crawlguard_core::identity::classify::Classifier;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn builtin() -> &'static Classifier {
    static C: OnceLock<Classifier> = OnceLock::new();
    C.get_or_init(|| Classifier::new(builtin_catalog()))
}

fuzz_target!(|ua: &[u8]| {
    let c = builtin();
    let r = c.classify(Some(ua));
    match r.bot {
        Some(e) => assert_eq!(
            r.class,
            if e.verify {
                Class::UnverifiedBot
            } else {
                e.class
            }
        ),
        None if ua.iter().all(u8::is_ascii_whitespace) => assert_eq!(r.class, Class::Script),
        None => assert_eq!(r.class, Class::Human),
    }
    let up = c.classify(Some(&ua.to_ascii_uppercase()));
    assert_eq!(up.bot.map(|b| &b.id), r.bot.map(|b| &b.id));
    assert_eq!(up.class, r.class);
});
