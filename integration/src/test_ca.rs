//! A throwaway CA and server certificate for `127.0.0.1` / `localhost` ([`TestCa::generate`]):
//! a Redis TLS port, and Envoy's TLS edge (`envoy/envoy-tls.yaml`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A server certificate for `127.0.0.1` / `localhost` and the throwaway CA that signed it
/// (PEM files), for a Redis TLS port or Envoy's TLS listener; a client trusts it with
/// `SSL_CERT_FILE=<ca>` (a browser: the CA imported into its profile).
#[derive(Debug, Clone)]
pub struct TestCa {
    /// The CA certificate.
    pub ca: PathBuf,
    /// The server certificate.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

impl TestCa {
    /// Makes a CA and a server certificate in `dir` with the `openssl` command (Debian
    /// `openssl`, installed by `scripts/setup.sh`).
    pub fn generate(dir: &Path) -> TestCa {
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .unwrap_or_else(|e| {
                    panic!("openssl is required for the TLS tests (run scripts/setup.sh): {e}")
                });
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
             basicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature\n\
             extendedKeyUsage=serverAuth\n",
        )
        .expect("write server.ext");
        let ec = "ec_paramgen_curve:prime256v1";
        run(&[
            "req",
            "-x509",
            "-nodes",
            "-days",
            "2",
            "-newkey",
            "ec",
            "-pkeyopt",
            ec,
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=crawlguard test CA",
        ]);
        run(&[
            "req",
            "-nodes",
            "-newkey",
            "ec",
            "-pkeyopt",
            ec,
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.pem",
            "-extfile",
            "server.ext",
        ]);
        TestCa {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        }
    }
}
