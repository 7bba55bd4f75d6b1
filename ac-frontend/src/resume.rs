//! Resuming a session after a network outage (protocol 8; "Resumption" in
//! `ac_proto::backend`).
//!
//! Each accelerator has a **lifeline**: a task that waits for its control connection to end.
//! A connection that timed out (silence: a partition, a cable, a switch reboot) is not the
//! session's end: the backend holds the session, and the lifeline dials it again, once a second
//! until the program's resume deadline (`ConnectOptions::resume`, `AC_RESUME_MS`), and resumes
//! it with the session's secret and capability. Calls made meanwhile wait; the envelopes the
//! backend had not handled are sent again from the control stream's log (`send_control.rs`), the
//! replies the program had not read come again (`replies.rs`), and bulk copies cut by the
//! outage run again (`accelerator.rs`). Any other end (a close by the backend, a revocation,
//! the backend's port refused, a session the backend no longer holds) ends the session at once,
//! with its reason.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use ac_proto::backend::{Hello, Response, SessionId};
use quinn::{Connection, ConnectionError, Endpoint};
use tokio::sync::watch;

use crate::link::{self, ConnectOptions, Link};
use crate::{Error, Result};

/// Where an accelerator's session stands. `epoch` counts the control connections it had.
#[derive(Debug, Clone)]
pub(crate) enum Phase {
    /// Connected, on its `epoch`th connection.
    Up(u64),
    /// The connection was lost; resuming.
    Resuming,
    /// The session is over, for this reason.
    Ended(Error),
}

/// How often a lost session is dialed again: the longest a program waits, once the network is
/// back, before the next try (a QUIC handshake that gets no answer is given up after this too).
pub(crate) const REDIAL: Duration = Duration::from_secs(1);

/// What a resumption needs to prove the session its own and reach it again.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub(crate) options: ConnectOptions,
    pub(crate) crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
    pub(crate) endpoint: Endpoint,
    pub(crate) session: SessionId,
    pub(crate) token: [u8; 16],
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Credentials")
            .field("addr", &self.options.addr)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// A resumed session's new connection, its control stream past [`Response::Resumed`].
pub(crate) struct Resumed {
    pub(crate) link: Link,
    /// Envelopes the backend had handled.
    pub(crate) handled: u64,
}

/// Whether a connection that ended this way may be resumed: only silence. A close (by either
/// side, for whatever reason), a reset by a restarted backend or a broken handshake end it.
pub(crate) fn resumable(reason: &ConnectionError) -> bool {
    matches!(reason, ConnectionError::TimedOut)
}

/// Dials the backend again and resumes the session, every [`REDIAL`] until `deadline`.
/// `replies`: the reply frames read so far. A backend that answers but will not resume (the
/// session is gone, the capability revoked, the token wrong) or whose port is closed ends it at
/// once.
pub(crate) async fn reconnect(credentials: &Credentials, replies: u64, deadline: Instant) -> Result<Resumed> {
    let Credentials { options, crypto, endpoint, session, token } = credentials;
    let hello = Hello::Resume { session: *session, token: *token, capability: options.capability.clone(), replies };
    let mut last = String::from("no answer");
    loop {
        let started = Instant::now();
        if started >= deadline {
            return Err(Error::Timeout(format!(
                "the connection to the backend {} was lost and the session could not be resumed within {:?} ({last}); \
                 its device memory and handles are lost",
                options.addr, options.resume
            )));
        }
        // Only the handshake is given up after a while: a connection that has said its hello
        // is never dropped unanswered, or the backend would see the session's new connection
        // closed by its client, and end it.
        match tokio::time::timeout(REDIAL, link::dial(options, crypto.clone(), endpoint)).await {
            Ok(Ok(conn)) => {
                let greeted = link::greet(endpoint.clone(), false, conn.clone(), &hello, options.protocol).await;
                match greeted {
                    Ok(link) => match link.welcome {
                        Response::Resumed { handled } => return Ok(Resumed { link, handled }),
                        other => return Err(Error::Protocol(format!("expected a resumption, got {other:?}"))),
                    },
                    // The backend answered: asking again would get the same answer.
                    Err(e) if answered(conn.close_reason()) => return Err(gone(e.into())),
                    Err(e) => last = e.to_string(),
                }
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no answer in {REDIAL:?}"),
        }
        if crate::watch::port_refused(options.addr).await {
            return Err(Error::Disconnected(crate::error::GONE.into()));
        }
        tokio::time::sleep_until((started + REDIAL).into()).await;
    }
}

/// Whether a connection ended by the backend's own word (a close, at the application's level or
/// QUIC's), not by silence: asking again would get the same answer.
fn answered(reason: Option<ConnectionError>) -> bool {
    matches!(reason, Some(ConnectionError::ApplicationClosed(_) | ConnectionError::ConnectionClosed(_)))
}

/// A refusal, said as what it means for the program.
fn gone(e: Error) -> Error {
    match e {
        Error::Disconnected(reason) => Error::Disconnected(format!("the session could not be resumed: {reason}")),
        other => other,
    }
}

/// Waits for the control connection `conn` of `epoch` to end and resumes the session, again and
/// again, publishing each phase; returns once the session is over. Holds the accelerator only
/// weakly: dropping its last handle closes its connections, which ends this.
pub(crate) async fn lifeline<T: Resumes>(
    owner: Weak<T>,
    mut conn: Connection,
    mut epoch: u64,
    phase: Arc<watch::Sender<Phase>>,
) {
    loop {
        let reason = conn.closed().await;
        let Some(owner) = owner.upgrade() else { return };
        let resume_for = owner.credentials().options.resume;
        if !resumable(&reason) || resume_for.is_zero() || owner.version() < 8 {
            phase.send_replace(Phase::Ended(reason.into()));
            return;
        }
        phase.send_replace(Phase::Resuming);
        let lost = Instant::now();
        let session = owner.credentials().session.0;
        let addr = owner.credentials().options.addr;
        eprintln!("ac: the connection to the backend {addr} was lost ({reason}); resuming session {session} (for up to {resume_for:?})");
        match reconnect(owner.credentials(), owner.replies_read(), lost + resume_for).await {
            Ok(resumed) => {
                epoch += 1;
                conn = resumed.link.connection.clone();
                if let Err(e) = owner.resumed(resumed, epoch).await {
                    phase.send_replace(Phase::Ended(e));
                    return;
                }
                eprintln!(
                    "ac: session {session} on {addr} resumed after {:.1} s without its connection",
                    lost.elapsed().as_secs_f64()
                );
                phase.send_replace(Phase::Up(epoch));
            }
            Err(e) => {
                eprintln!("ac: session {session} on {addr} ended: {e}");
                phase.send_replace(Phase::Ended(e));
                return;
            }
        }
    }
}

/// What the lifeline needs of an accelerator.
pub(crate) trait Resumes: Send + Sync + 'static {
    /// How to reach and prove the session.
    fn credentials(&self) -> &Credentials;
    /// The protocol version the session speaks.
    fn version(&self) -> u16;
    /// Reply frames read so far.
    fn replies_read(&self) -> u64;
    /// Puts the resumed connection in place of the lost one: envelopes after `handled` sent
    /// again, replies read from the new stream, further connections attached.
    fn resumed(&self, resumed: Resumed, epoch: u64) -> impl std::future::Future<Output = Result<()>> + Send;
}

/// Waits until the session has left the connection of `epoch` behind: `true` once it is up
/// on a later one, `false` when it ended.
pub(crate) async fn resumed_since(mut phase: watch::Receiver<Phase>, epoch: u64) -> bool {
    let settled = phase.wait_for(|p| matches!(p, Phase::Up(e) if *e > epoch) || matches!(p, Phase::Ended(_))).await;
    matches!(settled.as_deref(), Ok(Phase::Up(_)))
}
