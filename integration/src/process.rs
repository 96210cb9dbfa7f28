//! [`Process`]: the one child-process handle every service of the harness uses (Envoy, the
//! test upstream, dnsmasq, the verifier sidecar).
//!
//! - Its stdout and stderr go to `<name>.log` in a temporary directory the handle owns (with
//!   whatever else the service needs there: its configuration, data files); [`Process::log`]
//!   reads it.
//! - Readiness is awaited by polling something observable, never by a fixed sleep: an HTTP
//!   endpoint, a DNS answer, a log line ([`Process::wait_ready`], [`Process::wait_listening`]).
//! - It is killed (SIGKILL) and reaped when the handle drops, also when a test panics; a
//!   handle dropped during a panic first prints the last lines of the log. The child also
//!   gets SIGKILL when the thread that started it ends (Linux `PR_SET_PDEATHSIG`), so a test
//!   process that is itself killed (Ctrl-C, a CI timeout) leaves nothing behind.

use std::fs::File;
use std::future::Future;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often readiness and other conditions are polled.
pub const POLL: Duration = Duration::from_millis(20);
/// How many log lines a handle dropped during a panic prints.
const LOG_TAIL_LINES: usize = 60;

/// A fresh temporary directory `crawlguard-<name>-XXXX` (removed when dropped).
pub fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("crawlguard-{name}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("create a temp dir for {name}: {e}"))
}

/// Why a process did not become ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// It exited first.
    Exited(ExitStatus),
    /// It was still running, not ready, when the time was up.
    TimedOut(Duration),
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReady::Exited(status) => write!(f, "exited before it was ready ({status})"),
            NotReady::TimedOut(t) => write!(f, "was not ready after {t:?}"),
        }
    }
}

/// A running child process with its log and temporary directory; killed and reaped on drop.
pub struct Process {
    name: &'static str,
    child: Mutex<Option<Child>>,
    log: PathBuf,
    // Dropped after `Drop::drop` has killed the process and printed the log tail.
    dir: tempfile::TempDir,
}

impl Process {
    /// Spawns `cmd` with stdin closed and stdout + stderr appended to `<dir>/<name>.log`
    /// (unbuffered on our side: [`Process::log`] sees every line the process has written).
    /// The process owns `dir` from now on.
    pub fn spawn(name: &'static str, dir: tempfile::TempDir, cmd: &mut Command) -> Process {
        let log = dir.path().join(format!("{name}.log"));
        let out = File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let err = out.try_clone().expect("dup the log file descriptor");
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let parent = std::process::id();
        // SAFETY: the closure runs in the child between fork and exec and only makes
        // async-signal-safe system calls (prctl, getppid, kill on itself).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have gone between fork and prctl.
                if libc::getppid() as u32 != parent {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({:?}): {e}", cmd.get_program()));
        Process {
            name,
            child: Mutex::new(Some(child)),
            log,
            dir,
        }
    }

    /// The name it was started with (also the log file's stem).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything it has written so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of [`Process::log`].
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Its process id, while it has not been killed.
    pub fn id(&self) -> Option<u32> {
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        child.as_ref().map(Child::id)
    }

    /// `Some(status)` once it has exited (or was killed).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Kills it (SIGKILL) and reaps it; a no-op the second time.
    pub fn kill(&self) {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut c) = child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Polls `probe` (every [`POLL`]) until it yields a value. Fails as soon as the process
    /// has exited, or when `timeout` has passed.
    pub async fn wait_ready<T, F, Fut>(
        &self,
        timeout: Duration,
        mut probe: F,
    ) -> Result<T, NotReady>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Err(NotReady::Exited(status));
            }
            if let Some(v) = probe().await {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(NotReady::TimedOut(timeout));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits for the line `listening on ADDR` that the test upstream and the verifier
    /// sidecar print once their socket is bound, and returns ADDR.
    pub async fn wait_listening(&self, timeout: Duration) -> Result<SocketAddr, NotReady> {
        self.wait_ready(timeout, || async {
            self.log().lines().find_map(|l| {
                l.strip_prefix("listening on ")
                    .and_then(|a| a.trim().parse().ok())
            })
        })
        .await
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "---- {} log (last {LOG_TAIL_LINES} lines) ----\n{}\n---- end of {} log ----",
                self.name,
                self.log_tail(LOG_TAIL_LINES),
                self.name
            );
        }
    }
}

/// Polls `probe` (every [`POLL`]) until it yields a value; `None` once `timeout` has passed.
pub async fn poll_until<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `N` distinct TCP ports on 127.0.0.1 that were free a moment ago (bound together, then
/// released; a parallel test may still take one, so starters retry on "address in use").
pub fn free_tcp_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("local addr").port())
}

/// A port free for both UDP and TCP on 127.0.0.1 (a DNS server binds both).
pub fn free_udp_tcp_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp 127.0.0.1:0");
        let port = udp.local_addr().expect("udp local addr").port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper() -> Process {
        Process::spawn(
            "sleeper",
            temp_dir("sleeper"),
            Command::new("sh").args(["-c", "echo listening on 127.0.0.1:9; exec sleep 600"]),
        )
    }

    /// True while `pid` exists, also as a zombie (not reaped).
    fn exists(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[tokio::test]
    async fn a_process_is_killed_and_reaped_when_its_owner_panics() {
        let p = sleeper();
        let pid = p.id().expect("running");
        let addr = p
            .wait_listening(Duration::from_secs(10))
            .await
            .expect("ready");
        assert_eq!(addr, SocketAddr::from(([127, 0, 0, 1], 9)));
        assert!(exists(pid));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _owner = p;
            panic!("a failing test");
        }));
        assert!(panicked.is_err());
        assert!(!exists(pid), "process {pid} left behind");
    }

    #[tokio::test]
    async fn wait_ready_reports_an_exit() {
        let p = Process::spawn(
            "quitter",
            temp_dir("quitter"),
            Command::new("sh").args(["-c", "echo bye; exit 3"]),
        );
        let r = p
            .wait_ready(Duration::from_secs(10), || async { None::<()> })
            .await;
        assert!(
            matches!(r, Err(NotReady::Exited(s)) if s.code() == Some(3)),
            "{r:?}"
        );
        assert_eq!(p.log(), "bye\n");
    }

    #[test]
    fn a_process_dies_with_the_thread_that_started_it() {
        // The handle outlives the thread (it is moved out), the process does not.
        let p = std::thread::spawn(sleeper).join().expect("spawning thread");
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.exit_status().is_none() {
            assert!(
                Instant::now() < deadline,
                "still running after its thread ended"
            );
            std::thread::sleep(POLL);
        }
    }
}
