//! [`SlowProxy`]: a TCP relay that delays what clients send, to make Redis slow for the
//! clients behind it only.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A TCP relay on `127.0.0.1:<free port>` to `upstream` that holds every chunk a client
/// sends for [`SlowProxy::set_delay`] before passing it on (answers come back at once): a
/// slow Redis for the clients that connect through it. Starts with no delay; stops
/// accepting when dropped.
pub struct SlowProxy {
    addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl SlowProxy {
    /// Binds a free port and relays to `upstream`.
    pub fn start(upstream: SocketAddr) -> SlowProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("slow proxy local addr");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (delay, stopped) = (delay_ms.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = TcpStream::connect(upstream) else {
                            let _ = client.shutdown(Shutdown::Both);
                            continue;
                        };
                        relay(client, server, delay.clone(), stopped.clone());
                    }
                    // Nothing to accept: look again soon (and notice `stop`).
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        SlowProxy {
            addr,
            delay_ms,
            stop,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://<addr>/`: Redis through this relay.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// How long each chunk from a client is held from now on (0: none).
    pub fn set_delay(&self, d: Duration) {
        self.delay_ms.store(
            d.as_millis().try_into().unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Two threads per connection: client -> server with the delay, server -> client without.
fn relay(client: TcpStream, server: TcpStream, delay_ms: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let pipe = move |mut from: TcpStream, mut to: TcpStream, delayed: bool| {
        let delay_ms = delay_ms.clone();
        let stop = stop.clone();
        move || {
            // A read timeout so the thread notices `stop`.
            let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
            let mut buf = [0u8; 16 * 1024];
            while !stop.load(Ordering::Relaxed) {
                let n = match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        continue
                    }
                    Err(_) => break,
                };
                if delayed {
                    let arrived = Instant::now();
                    let delay = Duration::from_millis(delay_ms.load(Ordering::Relaxed));
                    // Simulated latency of a slow server, not a synchronisation.
                    std::thread::sleep(delay.saturating_sub(arrived.elapsed()));
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        }
    };
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    std::thread::spawn(pipe(client, server, true));
    std::thread::spawn(pipe(server2, client2, false));
}

#[cfg(test)]
mod tests {
    use super::super::{redis_cmd, Redis, RedisReply};
    use super::*;

    #[tokio::test]
    async fn a_slow_proxy_holds_commands_for_its_delay() {
        let redis = Redis::start().await;
        let proxy = SlowProxy::start(redis.addr());
        let ping = || {
            let t = Instant::now();
            let reply = redis_cmd(proxy.addr(), &["PING"]).expect("through the proxy");
            assert_eq!(reply, RedisReply::Status("PONG".into()));
            t.elapsed()
        };
        assert!(ping() < Duration::from_millis(250));
        proxy.set_delay(Duration::from_millis(300));
        let took = ping();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        proxy.set_delay(Duration::ZERO);
        assert!(ping() < Duration::from_millis(250));
        assert_eq!(proxy.url(), format!("redis://{}/", proxy.addr()));
    }
}
