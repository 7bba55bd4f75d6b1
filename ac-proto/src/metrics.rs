//! The HTTP endpoint where Prometheus scrapes a daemon (`--metrics-listen`): `GET /metrics`
//! answers the daemon's registry in the OpenMetrics text format; anything else gets 404 or 405.
//!
//! Hand-rolled HTTP/1.1 on tokio rather than a web framework: one request per connection, a
//! request head of at most [`MAX_HEAD`] bytes read within [`READ_TIMEOUT`], at most
//! [`MAX_CONNECTIONS`] connections at once. A malformed, oversized or silent request ends its
//! own connection (with a 400 when it can still be answered) and nothing else.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// The longest request head (request line and headers) read, bytes.
pub const MAX_HEAD: usize = 8 << 10;
/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the answer may take to leave.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 64;

/// The content type of the OpenMetrics text format, which Prometheus asks for first.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A running metrics endpoint; it stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0 picks a free port) and serves `registry` from there.
    pub async fn start(addr: SocketAddr, registry: Registry) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(accept_loop(listener, Arc::new(registry)));
        tracing::info!(%addr, "serving Prometheus metrics at /metrics");
        Ok(Self { addr, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, registry: Arc<Registry>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let socket = match listener.accept().await {
            Ok((socket, _)) => socket,
            Err(e) => {
                // Out of descriptors and the like: wait rather than spin.
                tracing::warn!(error = %e, "cannot accept a metrics connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Over the limit the connection is dropped (closed) unread.
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let registry = registry.clone();
        tokio::spawn(async move {
            serve(socket, &registry).await;
            drop(slot);
        });
    }
}

/// Answers one request and closes the connection.
async fn serve(mut socket: TcpStream, registry: &Registry) {
    let answer = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut socket)).await {
        Ok(Ok(head)) => answer(&head, registry),
        Ok(Err(Unreadable::Closed)) | Err(_) => return,
        Ok(Err(Unreadable::Malformed(why))) => {
            tracing::debug!(why, "malformed metrics request");
            response("400 Bad Request", "text/plain", &format!("{why}\n"), &[])
        }
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        socket.write_all(answer.as_bytes()).await?;
        socket.shutdown().await
    })
    .await;
}

/// Why a request head could not be read.
#[derive(Debug, PartialEq, Eq)]
enum Unreadable {
    /// The client went away first.
    Closed,
    /// It is not an HTTP request head we accept.
    Malformed(&'static str),
}

/// Reads up to the end of the request head (an empty line), at most [`MAX_HEAD`] bytes.
async fn read_head(socket: &mut TcpStream) -> Result<String, Unreadable> {
    let mut head = Vec::with_capacity(1024);
    let mut piece = [0u8; 1024];
    loop {
        let n = socket.read(&mut piece).await.map_err(|_| Unreadable::Closed)?;
        if n == 0 {
            return Err(if head.is_empty() { Unreadable::Closed } else { Unreadable::Malformed("incomplete request") });
        }
        head.extend_from_slice(&piece[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return String::from_utf8(head).map_err(|_| Unreadable::Malformed("request head is not UTF-8"));
        }
        if head.len() > MAX_HEAD {
            return Err(Unreadable::Malformed("request head too large"));
        }
    }
}

/// The whole HTTP response to a request head.
fn answer(head: &str, registry: &Registry) -> String {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return response("400 Bad Request", "text/plain", "malformed request line\n", &[]);
    };
    if !version.starts_with("HTTP/1.") {
        return response("400 Bad Request", "text/plain", "HTTP/1.x only\n", &[]);
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return response("404 Not Found", "text/plain", "metrics are at /metrics\n", &[]);
    }
    if method != "GET" {
        return response("405 Method Not Allowed", "text/plain", "only GET\n", &[("Allow", "GET")]);
    }
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, registry) {
        Ok(()) => response("200 OK", CONTENT_TYPE, &body, &[]),
        Err(_) => response("500 Internal Server Error", "text/plain", "cannot encode the metrics\n", &[]),
    }
}

fn response(status: &str, content_type: &str, body: &str, extra: &[(&str, &str)]) -> String {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in extra {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    fn registry() -> Registry {
        let mut registry = Registry::default();
        let counter: Counter = Counter::default();
        counter.inc_by(3);
        registry.register("things", "Things done", counter);
        registry
    }

    #[test]
    fn answers_get_metrics_only() {
        let ok = answer("GET /metrics HTTP/1.1\r\nHost: x", &registry());
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("things_total 3\n") && ok.ends_with("# EOF\n"), "{ok}");
        assert!(answer("GET /metrics?x=1 HTTP/1.0", &registry()).starts_with("HTTP/1.1 200"));
        assert!(answer("GET / HTTP/1.1", &registry()).starts_with("HTTP/1.1 404"));
        let post = answer("POST /metrics HTTP/1.1", &registry());
        assert!(post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET\r\n"), "{post}");
        for bad in ["", "GET", "GET /metrics", "GET /metrics HTTP/1.1 extra", "GET /metrics SPDY/3"] {
            assert!(answer(bad, &registry()).starts_with("HTTP/1.1 400"), "{bad:?}");
        }
    }

    #[test]
    fn content_length_counts_the_body() {
        let ok = answer("GET /metrics HTTP/1.1", &registry());
        let (head, body) = ok.split_once("\r\n\r\n").expect("head and body");
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())), "{head}");
    }
}
