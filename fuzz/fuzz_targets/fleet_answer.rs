//! A fleet sync answer of arbitrary bytes (status 200) delivered to a worker that sent a
//! sync: never panics, counts exactly one of `fleet.syncs` / `fleet.sync_error`, and the
//! next request is still decided (forwarded or answered locally, never left paused).
#![no_main]

use crawlguard_testkit::FakeProxy;
use crawlguard_core::request::Step;
use libfuzzer_sys::fuzz_target;

const T0: u64 = 1_700_000_000_000_000_000;
const CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
                      Chrome/124.0.0.0 Safari/537.36";
const CONFIG: &str = r#"{
  "limits":[{"name":"h","class":"human","route":"*","rate_per_s":5,"burst":10,"key":"client_ip"},
            {"name":"g","class":"*","route":"*","rate_per_s":100,"burst":100,"key":"global"}],
  "store":{"slots":64,"hash_seed":4242},"verifier":{"enabled":false,"cache_slots":16},
  "fleet":{"enabled":true}}"#;

fuzz_target!(|body: &[u8]| {
    let mut p = FakeProxy::new(CONFIG, T0);
    p.get("/", CHROME, "192.0.2.1:1");
    p.get("/", CHROME, "192.0.2.2:1");
    p.tick();
    let Some(token) = p.host.callouts.last().map(|c| c.token) else {
        panic!("no sync sent");
    };
    p.worker.on_callout_response(&mut p.host, token, Some(b"200"), body);
    let answered = p.counter("crawlguard.fleet.syncs") + p.counter("crawlguard.fleet.sync_error");
    assert_eq!(answered, 1);
    let (ctx, step) = p.get("/", CHROME, "192.0.2.1:1");
    assert!(step == Step::Continue || p.reply_status(ctx).is_some());
});
