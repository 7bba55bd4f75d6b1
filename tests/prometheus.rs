//! A real Prometheus server (the Debian package's `prometheus`) for the metrics tests: it
//! scrapes the daemons every second, evaluates `docs/alerts.yml`, and is asked through its
//! HTTP API. Also a minimal HTTP/1.0 client for talking to it and to the daemons' endpoints.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `request` as it is to `addr` and reads the answer until the server closes (at most
/// 10 s).
pub async fn exchange(addr: SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let talk = async {
        let mut socket = tokio::net::TcpStream::connect(addr).await?;
        socket.write_all(request).await?;
        let mut answer = Vec::new();
        socket.read_to_end(&mut answer).await?;
        Ok(answer)
    };
    tokio::time::timeout(Duration::from_secs(10), talk)
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other("no answer in 10 s")))
}

/// `GET path` over HTTP/1.0 (the server closes after the body: no chunks); (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let answer = exchange(addr, format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, body.to_string()))
}

/// Percent-encodes a query parameter.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One series of a query's answer: its labels and value.
pub type Sample = (BTreeMap<String, String>, f64);

/// A Prometheus process scraping some targets; killed when dropped, whatever happened.
#[derive(Debug)]
pub struct Prometheus {
    child: std::process::Child,
    /// Its HTTP address.
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

/// `docs/alerts.yml` of the workspace.
pub fn alert_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/alerts.yml")
}

/// A free TCP port on loopback (a port Prometheus can take: it has no "pick one" option).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

impl Prometheus {
    /// Starts Prometheus on loopback, scraping every second `targets` (job name, address) and
    /// evaluating `docs/alerts.yml`; returns once it is ready.
    pub async fn start(targets: &[(&str, SocketAddr)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut jobs: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (job, addr) in targets {
            jobs.entry(job).or_default().push(format!("'{addr}'"));
        }
        let mut config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nrule_files:\n  - '{}'\nscrape_configs:\n",
            alert_rules().display()
        );
        for (job, addrs) in jobs {
            config.push_str(&format!(
                "  - job_name: '{job}'\n    static_configs:\n      - targets: [{}]\n",
                addrs.join(", ")
            ));
        }
        std::fs::write(dir.path().join("prometheus.yml"), config).expect("configuration written");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("address");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("prometheus starts (./scripts/install-packages installs it)");
        let mut prometheus = Self { child, addr, dir };
        prometheus.until_ready().await;
        prometheus
    }

    async fn until_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Ok((200, _)) = http_get(self.addr, "/-/ready").await {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("prometheus ended ({status}):\n{}", self.log());
            }
            assert!(start.elapsed() < Duration::from_secs(30), "prometheus not ready in 30 s:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its log, for a failing test to show.
    pub fn log(&self) -> String {
        crate::tail(&self.dir.path().join("prometheus.log"), 30)
    }

    /// The series of an instant query (`/api/v1/query`) with their values.
    pub async fn query(&self, expr: &str) -> Vec<Sample> {
        let path = format!("/api/v1/query?query={}", encode(expr));
        let (status, body) = http_get(self.addr, &path).await.expect("prometheus answers");
        assert_eq!(status, 200, "query {expr}: {body}");
        let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let result = answer["data"]["result"].as_array().cloned().unwrap_or_default();
        result
            .iter()
            .map(|series| {
                let labels = series["metric"]
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                    .unwrap_or_default();
                let value = series["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
                (labels, value)
            })
            .collect()
    }

    /// The value of a query that answers one series (a `sum`, a single gauge); `None` for none.
    pub async fn value(&self, expr: &str) -> Option<f64> {
        let samples = self.query(expr).await;
        assert!(samples.len() <= 1, "{expr} answers several series: {samples:?}");
        samples.first().map(|(_, v)| *v)
    }

    /// Waits until the value of `expr` satisfies `check` (polling, at most `limit`); panics with
    /// the last value and Prometheus's log otherwise.
    pub async fn wait_for(&self, expr: &str, limit: Duration, check: impl Fn(f64) -> bool) -> f64 {
        let start = Instant::now();
        loop {
            let value = self.value(expr).await;
            if let Some(v) = value.filter(|v| check(*v)) {
                return v;
            }
            assert!(start.elapsed() < limit, "{expr} is {value:?} after {limit:?}\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
