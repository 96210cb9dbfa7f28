//! Real clients of a TLS edge (`envoy/envoy-tls.yaml`), each its own process: headless
//! Chromium and Firefox ESR (Debian packages `chromium`, `firefox-esr`, installed by
//! `scripts/setup.sh`) trusting a throwaway CA, and the HTTP libraries scrapers use behind a
//! browser's User-Agent: curl (OpenSSL), Python's `http.client` (OpenSSL, no ALPN) and Go's
//! `net/http`. Also the ASN database the edge's geoip filter reads ([`asn_db`]).
//!
//! Every run has a deadline and is killed past it, so a hung browser fails its test instead
//! of hanging the suite.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::paths::repo_root;
use crate::process::temp_dir;

/// How long one browser or library run may take (a cold browser start on a loaded 2-core
/// machine takes a few seconds).
const RUN_DEADLINE: Duration = Duration::from_secs(90);

/// Runs `cmd` to completion or kills it at [`RUN_DEADLINE`] (then `Err` with what it
/// printed).
pub fn run_with_deadline(cmd: &mut Command) -> Result<Output, String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > RUN_DEADLINE => {
                let _ = child.kill();
                let out = child.wait_with_output().map_err(|e| e.to_string())?;
                return Err(format!(
                    "{cmd:?} still running after {RUN_DEADLINE:?}; stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    }
    child.wait_with_output().map_err(|e| e.to_string())
}

/// The Python of `.venv/` (where `scripts/setup.sh` installs mmdb-writer).
fn venv_python() -> PathBuf {
    let py = repo_root().join(".venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup.sh",
        py.display()
    );
    py
}

/// Writes a MaxMind-format ASN database into `dir` (`integration/scripts/asn-mmdb.py`):
/// each `(cidr, asn, organisation)` network, e.g. `("127.16.0.0/12", 16509, "AMAZON-02")`.
pub fn asn_db(dir: &Path, networks: &[(&str, u32, &str)]) -> PathBuf {
    let out = dir.join("asn.mmdb");
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("integration/scripts/asn-mmdb.py"))
        .arg(&out);
    for (cidr, asn, org) in networks {
        cmd.arg(format!("{cidr}={asn}:{org}"));
    }
    let o = run_with_deadline(&mut cmd).unwrap_or_else(|e| panic!("asn-mmdb.py: {e}"));
    assert!(
        o.status.success(),
        "asn-mmdb.py (mmdb-writer from scripts/setup.sh): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// An NSS certificate database in `dir` trusting `ca` for TLS servers (`certutil`, Debian
/// `libnss3-tools`): what Chromium (`$HOME/.pki/nssdb`) and Firefox (the profile) read.
fn nss_db_trusting(dir: &Path, ca: &Path) {
    std::fs::create_dir_all(dir).expect("nss db dir");
    let db = format!("sql:{}", dir.display());
    for args in [
        vec!["-N", "-d", &db, "--empty-password"],
        vec![
            "-A",
            "-d",
            &db,
            "-n",
            "crawlguard-test-ca",
            "-t",
            "CT,,",
            "-i",
            ca.to_str().expect("utf-8 path"),
        ],
    ] {
        let o = run_with_deadline(Command::new("certutil").args(&args))
            .unwrap_or_else(|e| panic!("certutil (libnss3-tools, scripts/setup.sh): {e}"));
        assert!(
            o.status.success(),
            "certutil {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The major version of the installed Chromium (`chromium --version`).
pub fn chromium_major() -> u32 {
    static MAJOR: OnceLock<u32> = OnceLock::new();
    *MAJOR.get_or_init(|| {
        let o = run_with_deadline(Command::new("chromium").arg("--version"))
            .unwrap_or_else(|e| panic!("chromium (scripts/setup.sh installs it): {e}"));
        let text = String::from_utf8_lossy(&o.stdout);
        text.split_whitespace()
            .find_map(|w| w.split('.').next()?.parse().ok())
            .unwrap_or_else(|| panic!("chromium --version: {text:?}"))
    })
}

/// The User-Agent the installed Chromium sends as a desktop browser on Linux (headless
/// Chromium names itself `HeadlessChrome`, which crawlguard classes `script`, like every
/// automation browser; a person's Chrome sends this).
pub fn chrome_user_agent() -> String {
    format!(
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
         Chrome/{}.0.0.0 Safari/537.36",
        chromium_major()
    )
}

/// Headless Chromium with its own profile, trusting the test CA.
pub struct Chromium {
    home: tempfile::TempDir,
}

impl Chromium {
    /// A fresh profile whose NSS database trusts `ca`.
    pub fn new(ca: &Path) -> Chromium {
        let home = temp_dir("chromium");
        nss_db_trusting(&home.path().join(".pki/nssdb"), ca);
        Chromium { home }
    }

    /// Loads `url` (and its subresources) as a desktop Chrome would, HTTP/2 unless
    /// `http2` is false (`--disable-http2`: then it offers only http/1.1 in ALPN); returns
    /// the page's DOM once loaded.
    pub fn load(&self, url: &str, http2: bool) -> Result<String, String> {
        let mut cmd = Command::new("chromium");
        cmd.env("HOME", self.home.path()).args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ]);
        cmd.arg(format!(
            "--user-data-dir={}",
            self.home.path().join("profile").display()
        ))
        .arg(format!("--user-agent={}", chrome_user_agent()));
        if !http2 {
            cmd.arg("--disable-http2");
        }
        cmd.args(["--dump-dom", url]);
        let o = run_with_deadline(&mut cmd)?;
        if !o.status.success() {
            return Err(format!(
                "chromium exited {}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }
}

/// Headless Firefox ESR with its own profile, trusting the test CA.
pub struct Firefox {
    profile: tempfile::TempDir,
}

impl Firefox {
    /// A fresh profile whose certificate database trusts `ca`; HTTP/2 off when `http2` is
    /// false (`network.http.http2.enabled`). Background services that would call out to the
    /// Internet (updates, telemetry, captive-portal probes) are switched off.
    pub fn new(ca: &Path, http2: bool) -> Firefox {
        let profile = temp_dir("firefox");
        nss_db_trusting(profile.path(), ca);
        let prefs = [
            ("app.update.enabled", "false"),
            ("browser.shell.checkDefaultBrowser", "false"),
            ("datareporting.policy.dataSubmissionEnabled", "false"),
            ("toolkit.telemetry.enabled", "false"),
            ("network.captive-portal-service.enabled", "false"),
            ("network.connectivity-service.enabled", "false"),
            (
                "network.http.http2.enabled",
                if http2 { "true" } else { "false" },
            ),
        ];
        let user_js: String = prefs
            .iter()
            .map(|(k, v)| format!("user_pref(\"{k}\", {v});\n"))
            .collect();
        std::fs::write(profile.path().join("user.js"), user_js).expect("write user.js");
        Firefox { profile }
    }

    /// Loads `url` (and its subresources) until the page's load event (`--screenshot`).
    pub fn load(&self, url: &str) -> Result<(), String> {
        let shot = self.profile.path().join("page.png");
        let mut cmd = Command::new("firefox-esr");
        // Root in a container: Firefox's sandboxes need user namespaces it cannot get here.
        for v in [
            "MOZ_DISABLE_CONTENT_SANDBOX",
            "MOZ_DISABLE_GMP_SANDBOX",
            "MOZ_DISABLE_RDD_SANDBOX",
            "MOZ_DISABLE_SOCKET_PROCESS_SANDBOX",
            "MOZ_DISABLE_UTILITY_SANDBOX",
        ] {
            cmd.env(v, "1");
        }
        cmd.env("HOME", self.profile.path())
            .args(["--headless", "--no-remote", "--profile"])
            .arg(self.profile.path())
            .arg("--screenshot")
            .arg(&shot)
            .arg(url);
        let o = run_with_deadline(&mut cmd)?;
        if !o.status.success() || !shot.exists() {
            return Err(format!(
                "firefox-esr exited {} (screenshot written: {}): {}",
                o.status,
                shot.exists(),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        let _ = std::fs::remove_file(&shot);
        Ok(())
    }
}

/// `curl` (Debian's, on OpenSSL) fetching `url` over HTTP/2 from `source` (a loopback
/// address to bind) with `headers`, trusting `ca`; returns the status.
pub fn curl(url: &str, ca: &Path, source: &str, headers: &[(&str, &str)]) -> u16 {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--http2"])
        .arg("--cacert")
        .arg(ca)
        .args(["--interface", source]);
    for (k, v) in headers {
        cmd.arg("-H").arg(format!("{k}: {v}"));
    }
    let o = run_with_deadline(cmd.arg(url)).unwrap_or_else(|e| panic!("curl: {e}"));
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("curl: {}", String::from_utf8_lossy(&o.stderr)))
}

/// Python's `http.client` (OpenSSL, no ALPN: HTTP/1.1) fetching `url` from `source` with
/// `headers`, trusting `ca`; returns the status.
pub fn python_get(url: &str, ca: &Path, source: &str, headers: &[(&str, &str)]) -> u16 {
    let script = "import http.client, json, ssl, sys, urllib.parse\n\
        u = urllib.parse.urlsplit(sys.argv[1])\n\
        c = http.client.HTTPSConnection(u.hostname, u.port, source_address=(sys.argv[3], 0),\n\
            context=ssl.create_default_context(cafile=sys.argv[2]))\n\
        p = (u.path or '/') + ('?' + u.query if u.query else '')\n\
        c.request('GET', p, headers=json.loads(sys.argv[4]))\n\
        print(c.getresponse().status)\n";
    let headers: serde_json::Map<String, serde_json::Value> = headers
        .iter()
        .map(|(k, v)| ((*k).to_string(), serde_json::Value::from(*v)))
        .collect();
    let o = run_with_deadline(
        Command::new("python3")
            .args(["-c", script, url])
            .arg(ca)
            .arg(source)
            .arg(serde_json::Value::Object(headers).to_string()),
    )
    .unwrap_or_else(|e| panic!("python3: {e}"));
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("python3: {}", String::from_utf8_lossy(&o.stderr)))
}

/// Go's `net/http` (`integration/go/library_client.go`, built once per test process with
/// Debian's `golang-go` into `target/go-client/`) fetching `url` over HTTP/2 from
/// `source` with `headers`, trusting `ca`; returns the status.
pub fn go_get(url: &str, ca: &Path, source: &str, headers: &[(&str, &str)]) -> u16 {
    let mut cmd = Command::new(go_client());
    cmd.arg(url).arg(ca).arg(source);
    for (k, v) in headers {
        cmd.arg(format!("{k}: {v}"));
    }
    let o = run_with_deadline(&mut cmd).unwrap_or_else(|e| panic!("go client: {e}"));
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("go client: {}", String::from_utf8_lossy(&o.stderr)))
}

/// The Go client, built on first use (offline: standard library only; the build cache in
/// `target/go-client/cache` makes later builds take about a second).
fn go_client() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = repo_root().join("target/go-client");
        let bin = dir.join(format!("library-client-{}", std::process::id()));
        let o = run_with_deadline(
            Command::new("go")
                .env("GOCACHE", dir.join("cache"))
                .env("GOPATH", dir.join("gopath"))
                .env("GO111MODULE", "off")
                .env("GOFLAGS", "")
                .env("GOTOOLCHAIN", "local")
                .arg("build")
                .arg("-o")
                .arg(&bin)
                .arg(repo_root().join("integration/go/library_client.go")),
        )
        .unwrap_or_else(|e| panic!("go build (golang-go, scripts/setup.sh): {e}"));
        assert!(
            o.status.success(),
            "go build: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        bin
    })
}

/// Runs `integration/scripts/scraper.py` with `config` (see the script): many source
/// addresses, one keep-alive connection each, Python's handshake. Returns its JSON report.
pub fn scrape(config: &serde_json::Value) -> serde_json::Value {
    let dir = temp_dir("scraper");
    let path = dir.path().join("config.json");
    std::fs::write(&path, config.to_string()).expect("write scraper config");
    let o = run_with_deadline(
        Command::new("python3")
            .arg(repo_root().join("integration/scripts/scraper.py"))
            .arg(&path),
    )
    .unwrap_or_else(|e| panic!("scraper.py: {e}"));
    assert!(
        o.status.success(),
        "scraper.py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "scraper.py output: {e}: {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}
