//! Signed agents (Web Bot Auth) end to end: Envoy with the filter, the real sidecar, and
//! each agent's key directory served over TLS on loopback by a Python server
//! (`integration/scripts/web_bot_auth.py`, which also makes the keys, the test CA and the
//! signatures with Python's `cryptography`: an implementation independent of crawlguard's).
//! The sidecar runs with the test-only `--allow-loopback-agent-directories` and trusts the
//! test CA (`agents.extra_ca_file`).
//!
//! Clients browse as Chrome over plain HTTP (so no browser check applies): unsigned, or
//! with a failed signature that proves nothing, a request is `human`; a verified one is
//! its agent's class, `ai_retriever`, keyed by its agent's bot id. Limits refill at
//! 0.001/s, so counts are exact.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crawlguard_integration::{
    client, get, ip, poll_until, repo_root, EnvoyOpts, Limit, Process, Reply, SidecarOpts, Stack,
    UA_CHROME,
};
use serde_json::{json, Value};

fn script() -> PathBuf {
    repo_root().join("integration/scripts/web_bot_auth.py")
}

fn python(args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new("python3")
        .arg(script())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 (and its cryptography package: scripts/setup.sh installs them)");
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    } else {
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().expect("python3 runs");
    assert!(out.status.success(), "web_bot_auth.py {args:?} failed");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// An ed25519 key made by the test: private `d`, public `x`, its RFC 7638 thumbprint.
#[derive(Clone)]
struct Key {
    d: String,
    x: String,
    keyid: String,
}

fn keygen() -> Key {
    let v: Value = serde_json::from_str(&python(&["keygen"], None)).expect("keygen JSON");
    let s = |k: &str| v[k].as_str().expect(k).to_string();
    Key {
        d: s("d"),
        x: s("x"),
        keyid: s("keyid"),
    }
}

fn jwks(keys: &[&Key]) -> String {
    let keys: Vec<Value> = keys
        .iter()
        .map(|k| json!({"kty": "OKP", "crv": "Ed25519", "x": k.x, "use": "sig", "kid": k.keyid}))
        .collect();
    json!({"keys": keys, "purpose": "ai"}).to_string()
}

/// A key directory server on loopback over TLS: `mode` `ok` (serving `jwks`), `big`,
/// `slow` or `redirect`; its origin is `https://localhost:<port>`.
async fn directory(certs: &Path, mode: &str, jwks: &str, extra: &[&str]) -> (Process, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks).expect("write jwks");
    let mut cmd = Command::new("python3");
    cmd.arg(script())
        .args(["serve", "--mode", mode, "--jwks"])
        .arg(&file)
        .arg("--cert")
        .arg(certs.join("cert.pem"))
        .arg("--key")
        .arg(certs.join("key.pem"))
        .args(extra);
    let p = Process::spawn("directory", dir, &mut cmd);
    let addr = p
        .wait_listening(Duration::from_secs(20))
        .await
        .expect("directory server listening");
    (p, format!("https://localhost:{}", addr.port()))
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// What to sign.
struct Sig<'a> {
    key: &'a Key,
    keyid: Option<&'a str>,
    agent_header: String,
    authority: String,
    path: &'a str,
    created: u64,
    expires: u64,
    nonce: Option<String>,
    tag: Option<&'a str>,
    /// The `Signature-Agent` dictionary member the covered `signature-agent` names
    /// (`None`: the whole field).
    agent_key: Option<&'a str>,
}

/// The signature headers (`signature-input`, `signature`, `signature-agent`) for `s`,
/// covering `@authority`, `@path` and `signature-agent`.
fn sign(s: &Sig<'_>) -> Headers {
    let spec = json!({
        "d": s.key.d,
        "keyid": s.keyid.unwrap_or(&s.key.keyid),
        "method": "GET",
        "authority": s.authority,
        "scheme": "http",
        "path": s.path,
        "headers": {"signature-agent": s.agent_header},
        "components": match s.agent_key {
            None => json!(["@authority", "@path", "signature-agent"]),
            Some(k) => json!(["@authority", "@path", ["signature-agent", k]]),
        },
        "created": s.created,
        "expires": s.expires,
        "nonce": s.nonce,
        "tag": s.tag,
    });
    let out: Value =
        serde_json::from_str(&python(&["sign"], Some(&spec.to_string()))).expect("sign JSON");
    vec![
        (
            "signature-input".into(),
            out["signature-input"].as_str().expect("input").into(),
        ),
        (
            "signature".into(),
            out["signature"].as_str().expect("signature").into(),
        ),
        ("signature-agent".into(), s.agent_header.clone()),
    ]
}

/// Signature headers, `(name, value)`.
type Headers = Vec<(String, String)>;

/// A fresh nonce.
fn nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("n{}-{}", now_s(), N.fetch_add(1, Ordering::Relaxed))
}

/// The test's world: certificates, the agents' keys and directory servers, the stack.
struct World {
    stack: Stack,
    _certs: tempfile::TempDir,
    servers: Vec<Process>,
    /// Origins of the `ok` directories, and the failing ones.
    agent: String,
    agent2: String,
    big: String,
    slow: String,
    redirect: String,
    key: Key,
    key2: Key,
    cache_dir: tempfile::TempDir,
}

/// `agent_burst`: the per-agent bucket (`bot` key) of `ai_retriever`.
async fn world(mode: &str, max_age_s: u32, agent_burst: u32) -> World {
    let certs = tempfile::tempdir().expect("tempdir");
    python(&["certs", certs.path().to_str().expect("path")], None);
    let (key, key2) = (keygen(), keygen());
    let ma = max_age_s.to_string();
    let (s1, agent) = directory(certs.path(), "ok", &jwks(&[&key]), &["--max-age", &ma]).await;
    let (s2, agent2) = directory(certs.path(), "ok", &jwks(&[&key2]), &[]).await;
    let (s3, big) = directory(certs.path(), "big", "", &[]).await;
    let (s4, slow) = directory(certs.path(), "slow", "", &[]).await;
    let redirect_to = format!("{agent}/.well-known/http-message-signatures-directory");
    let redirect_to = redirect_to.replace("localhost", "127.0.0.1");
    let (s5, redirect) = directory(
        certs.path(),
        "redirect",
        "",
        &["--redirect-to", &redirect_to],
    )
    .await;
    let origins = [&agent, &agent2, &big, &slow, &redirect];
    let sidecar_toml = format!(
        "[agents]\norigins = {origins:?}\nextra_ca_file = {:?}\nfetch_timeout_ms = 1000\n\
         max_directory_bytes = 8192\nmin_ttl_s = 1\nretry_after_failure_s = 1\n",
        certs.path().join("ca.pem").display().to_string(),
    );
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let ids = [
        "test-agent",
        "test-agent-2",
        "big-agent",
        "slow-agent",
        "redirect-agent",
    ];
    let agents: Vec<Value> = origins
        .iter()
        .zip(ids)
        .map(|(o, id)| json!({"id": id, "origin": o, "class": "ai_retriever"}))
        .collect();
    let filter = json!({
        "signed_agents": {"mode": mode, "agents": agents},
        "verifier": {"timeout_ms": 4000},
        "limits": [
            Limit::per_ip("everyone", 1000),
            Limit::per_ip("agent_per_bot", agent_burst)
                .class("ai_retriever")
                .key("bot"),
        ],
    });
    let stack = Stack::start_without_dns(
        EnvoyOpts::with_config(filter),
        SidecarOpts {
            nameservers: vec!["127.0.0.1:9".parse().expect("addr")],
            config_toml: Some(sidecar_toml),
            args: vec!["--allow-loopback-agent-directories".into()],
            cache_dir: Some(cache_dir.path().to_path_buf()),
            ..SidecarOpts::default()
        },
    )
    .await;
    World {
        stack,
        _certs: certs,
        servers: vec![s1, s2, s3, s4, s5],
        agent,
        agent2,
        big,
        slow,
        redirect,
        key,
        key2,
        cache_dir,
    }
}

impl World {
    fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.stack.envoy.main_port())
    }

    /// A good signature of `key` for agent `origin` on `path`.
    fn good<'a>(&self, key: &'a Key, origin: &str, path: &'a str) -> Sig<'a> {
        let now = now_s();
        Sig {
            key,
            keyid: None,
            agent_header: format!("\"{origin}\""),
            authority: self.authority(),
            path,
            created: now,
            expires: now + 60,
            nonce: Some(nonce()),
            tag: Some("web-bot-auth"),
            agent_key: None,
        }
    }

    /// GET `path` from 127.0.0.`from` as Chrome with `headers`.
    async fn send(&self, from: u8, path: &str, headers: &[(String, String)]) -> Reply {
        let extra: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        get(
            &client(ip(from)),
            &self.stack.envoy.url(path),
            UA_CHROME,
            &extra,
        )
        .await
    }
}

#[tokio::test]
async fn a_signed_agent_is_classed_as_itself_and_limited_per_agent() {
    let w = world("enforce", 60, 3).await;
    // Three addresses, one agent: its bucket (burst 3) is the agent's, not the address's.
    let mut classes = Vec::new();
    for (i, from) in [2u8, 3, 4, 5].into_iter().enumerate() {
        let path = format!("/page/{i}");
        let r = w
            .send(from, &path, &sign(&w.good(&w.key, &w.agent, &path)))
            .await;
        classes.push((r.status, r.upstream_class().unwrap_or("").to_string()));
    }
    assert_eq!(
        classes,
        vec![
            (200, "ai_retriever".to_string()),
            (200, "ai_retriever".to_string()),
            (200, "ai_retriever".to_string()),
            (429, String::new()),
        ]
    );
    // Another agent has its own bucket; an unsigned browser stays human.
    let r = w
        .send(6, "/other", &sign(&w.good(&w.key2, &w.agent2, "/other")))
        .await;
    assert_eq!((r.status, r.upstream_class()), (200, Some("ai_retriever")));
    let r = w.send(7, "/plain", &[]).await;
    assert_eq!((r.status, r.upstream_class()), (200, Some("human")));
    w.stack
        .envoy
        .assert_counters(&[
            ("crawlguard.signature.verified", 5),
            ("crawlguard.class.ai_retriever.allowed", 4),
            ("crawlguard.class.ai_retriever.limited", 1),
            ("crawlguard.class.human.allowed", 1),
        ])
        .await;
    // One directory fetch per agent; every signature verified by the sidecar.
    let m = |s: &str| s.to_string();
    assert_eq!(
        w.stack
            .sidecar
            .metric(&m(
                "crawlguard_sidecar_signatures_total{result=\"verified\"}"
            ))
            .await,
        5.0
    );
    let fetches = format!(
        "crawlguard_sidecar_agent_directory_fetches_total{{agent=\"{}\",result=\"ok\"}}",
        w.agent
    );
    assert_eq!(w.stack.sidecar.metric(&fetches).await, 1.0);
    w.stack.envoy.assert_log_clean();
}

/// The counters `crawlguard.signature.<name>` that are not zero, by name.
async fn signature_counters(w: &World) -> std::collections::BTreeMap<String, u64> {
    w.stack
        .envoy
        .nonzero_counters("crawlguard.signature.")
        .await
}

#[tokio::test]
async fn every_failure_is_refused_with_its_reason() {
    let w = world("enforce", 60, 1000).await;
    let now = now_s();
    let good = |path: &'static str| w.good(&w.key, &w.agent, path);
    let stranger = keygen();
    // (case, signature headers, class the origin sees); the reasons are counted below.
    let tampered = Sig {
        path: "/t/1",
        ..good("/t/1")
    };
    let cases: Vec<(&str, Headers, &str)> = vec![
        (
            "expired",
            sign(&Sig {
                created: now - 400,
                expires: now - 300,
                ..good("/e")
            }),
            "spoofed",
        ),
        (
            "created in the future",
            sign(&Sig {
                created: now + 300,
                expires: now + 360,
                ..good("/f")
            }),
            "spoofed",
        ),
        (
            "wrong authority",
            sign(&Sig {
                authority: "www.example.com".into(),
                ..good("/a")
            }),
            "spoofed",
        ),
        (
            "unknown keyid",
            sign(&Sig {
                key: &stranger,
                ..good("/k")
            }),
            "spoofed",
        ),
        // Signed for /t/1, sent to /t/2: the covered @path was changed on the way.
        ("tampered covered component", sign(&tampered), "spoofed"),
        (
            "missing tag",
            sign(&Sig {
                tag: None,
                ..good("/m")
            }),
            "human",
        ),
        // Signature-Agent names an origin nobody allows and the known agent; the signature,
        // by a key of the sender's own, covers the first: the sidecar judges that one
        // (unknown_agent), which proves nothing of the agent the filter matched.
        (
            "another agent's member",
            sign(&Sig {
                key: &stranger,
                agent_header: format!("a=\"https://attacker.example\", b=\"{}\"", w.agent),
                agent_key: Some("a"),
                ..good("/g")
            }),
            "spoofed",
        ),
    ];
    let mut results = Vec::new();
    for (i, (case, headers, _)) in cases.iter().enumerate() {
        let path = if *case == "tampered covered component" {
            "/t/2"
        } else {
            "/x"
        };
        let r = w.send(10 + i as u8, path, headers).await;
        results.push((
            *case,
            r.status,
            r.upstream_class().unwrap_or("").to_string(),
        ));
    }
    let want: Vec<(&str, u16, String)> = cases
        .iter()
        .map(|(c, _, class)| (*c, 200, class.to_string()))
        .collect();
    assert_eq!(results, want);

    // A replayed nonce: the first use verifies, the same signature again is refused.
    let once = sign(&good("/r"));
    let first = w.send(20, "/r", &once).await;
    let again = w.send(21, "/r", &once).await;
    assert_eq!(
        [first.upstream_class(), again.upstream_class()],
        [Some("ai_retriever"), Some("spoofed")]
    );

    // Directories that cannot be had: too big, too slow, redirecting to another origin.
    // No keys: the sidecar answers 503 and the request gets verifier.on_error.
    for (i, origin) in [&w.big, &w.slow, &w.redirect].into_iter().enumerate() {
        let r = w
            .send(30 + i as u8, "/d", &sign(&w.good(&w.key, origin, "/d")))
            .await;
        assert_eq!(
            (origin.as_str(), r.status, r.upstream_class()),
            (origin.as_str(), 200, Some("unverified_bot"))
        );
    }
    let expected: std::collections::BTreeMap<String, u64> = [
        ("expired", 1),
        ("created_in_future", 1),
        ("bad_signature", 2),
        ("unknown_key", 1),
        ("missing_tag", 1),
        ("verified", 1),
        ("replayed", 1),
        ("agent_mismatch", 1),
        ("error", 3),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(signature_counters(&w).await, expected);
    for (origin, result) in [
        (&w.big, "too_large"),
        (&w.slow, "timeout"),
        (&w.redirect, "redirect"),
    ] {
        let series = format!(
            "crawlguard_sidecar_agent_directory_fetches_total{{agent=\"{origin}\",result=\"{result}\"}}"
        );
        assert_eq!(w.stack.sidecar.metric(&series).await, 1.0, "{series}");
    }
    w.stack.envoy.assert_log_clean();
}

#[tokio::test]
async fn the_last_keys_stay_in_use_when_the_directory_or_the_sidecar_is_down() {
    // The directory may be cached for 1 s only.
    let mut w = world("enforce", 1, 1000).await;
    let r = w
        .send(2, "/1", &sign(&w.good(&w.key, &w.agent, "/1")))
        .await;
    assert_eq!(r.upstream_class(), Some("ai_retriever"));
    // The directory server goes away; once the copy is past its lifetime, the refetch
    // fails and the keys in use stand in (stale-if-error).
    w.servers.remove(0).kill();
    let stale = format!(
        "crawlguard_sidecar_agent_directory_stale_total{{agent=\"{}\"}}",
        w.agent
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // Every request keeps its class while the directory is unreachable.
        let r = w
            .send(3, "/p", &sign(&w.good(&w.key, &w.agent, "/p")))
            .await;
        assert_eq!(r.upstream_class(), Some("ai_retriever"));
        if w.stack.sidecar.metric(&stale).await >= 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a stale directory never stood in:\n{}",
            w.stack.sidecar.log()
        );
        // The poll's pace, not a synchronisation: the copy's lifetime is 1 s.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A new sidecar, the directory still down: the copy on disk is used.
    assert!(
        w.cache_dir
            .path()
            .join("agents")
            .read_dir()
            .expect("cache dir")
            .count()
            >= 1
    );
    w.stack.sidecar.restart().await;
    let r = w
        .send(4, "/2", &sign(&w.good(&w.key, &w.agent, "/2")))
        .await;
    assert_eq!(
        r.upstream_class(),
        Some("ai_retriever"),
        "{}",
        w.stack.sidecar.log()
    );
    // The sidecar down: no verdict without it, verifier.on_error, no 5xx, no hang.
    w.stack.sidecar.kill();
    let r = w
        .send(5, "/3", &sign(&w.good(&w.key, &w.agent, "/3")))
        .await;
    assert_eq!(
        (r.status, r.upstream_class()),
        (200, Some("unverified_bot"))
    );
    w.stack.envoy.assert_log_clean();
}

#[tokio::test]
async fn shadow_mode_counts_what_enforcing_would_change() {
    let w = world("shadow", 60, 1000).await;
    let ok = sign(&w.good(&w.key, &w.agent, "/s"));
    let r = w.send(2, "/s", &ok).await;
    assert_eq!((r.status, r.upstream_class()), (200, Some("human")));
    let bad = sign(&Sig {
        authority: "www.example.com".into(),
        ..w.good(&w.key, &w.agent, "/b")
    });
    let r = w.send(3, "/b", &bad).await;
    assert_eq!((r.status, r.upstream_class()), (200, Some("human")));
    // The checks ran without the requests waiting for them: their counts come when they
    // are answered.
    let expected: std::collections::BTreeMap<String, u64> = [
        ("verified".to_string(), 1),
        ("bad_signature".to_string(), 1),
    ]
    .into_iter()
    .collect();
    let got = poll_until(Duration::from_secs(10), || async {
        let c = signature_counters(&w).await;
        (c == expected).then_some(c)
    })
    .await;
    assert_eq!(got, Some(expected));
    w.stack.envoy.assert_log_clean();
}
