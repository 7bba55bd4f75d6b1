//! Ending a session from another process (backend protocol 17, `Hello::End`).
//!
//! A process that dies without closing its sessions (`_exit`, a signal) leaves them to its
//! backends' resumption hold: their connections go silent, and the backend keeps the memory
//! for a resumption that never comes (a minute by default). A process of the same job that
//! learns of the death can end them at once with each session's [`SessionTicket`]: what a
//! resumption proves the session with (its secret token and the capability it was opened
//! with) and where its backend is. The CUDA shim's parent so ends the sessions of children that
//! ended with `_exit`, as Python's `multiprocessing` workers do.
//!
//! A ticket is as secret as the session's token, and grants as much: whoever holds one can end
//! the session, or resume it as its own program could. The CUDA shim's children hand theirs to
//! their parent alone, a process of the same job and user.

use std::net::SocketAddr;
use std::path::PathBuf;

use ac_proto::backend::{close, Hello, Response, SessionId};
use serde::{Deserialize, Serialize};

use crate::link::{self, ConnectOptions};
use crate::resume::Resumes;
use crate::{Accelerator, Error, Result};

/// What ending one accelerator's session from another process takes.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTicket {
    /// The backend's address.
    pub addr: SocketAddr,
    server_name: String,
    ca_cert: PathBuf,
    ca_pem: Option<String>,
    capability: Vec<u8>,
    session: u64,
    token: [u8; 16],
}

impl std::fmt::Debug for SessionTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token or the capability.
        f.debug_struct("SessionTicket")
            .field("addr", &self.addr)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// How [`end_session`] left the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The backend ended it now.
    Now,
    /// It had ended already (closed by its process, its hold run out, its backend restarted).
    Already,
}

impl Accelerator {
    /// The ticket that lets another process of the job end this session (see [`end_session`]).
    pub fn ticket(&self) -> SessionTicket {
        let credentials = self.inner.credentials();
        let options = &credentials.options;
        SessionTicket {
            addr: options.addr,
            server_name: options.server_name.clone(),
            ca_cert: options.ca_cert.clone(),
            ca_pem: options.ca_pem.clone(),
            capability: options.capability.clone(),
            session: credentials.session.0,
            token: credentials.token,
        }
    }
}

/// Ends the session of `ticket` on its backend, whichever process opened it; returns once the
/// backend has ended it (its memory freed) or said it had ended already. A backend of protocol
/// 16 or older cannot end another connection's session: an error, and the session is left to
/// its hold.
pub async fn end_session(ticket: &SessionTicket) -> Result<Ended> {
    let mut options = ConnectOptions::new(ticket.addr, ticket.ca_cert.clone());
    options.server_name = ticket.server_name.clone();
    options.ca_pem = ticket.ca_pem.clone();
    let crypto = link::client_crypto(&options)?;
    let hello =
        Hello::End { session: SessionId(ticket.session), token: ticket.token, capability: ticket.capability.clone() };
    match link::open(&options, crypto, &hello).await {
        Ok(link) => {
            link.connection.close(close::NORMAL.into(), b"ended");
            link.endpoint.wait_idle().await;
            match link.welcome {
                Response::Ok => Ok(Ended::Now),
                other => Err(Error::Protocol(format!("expected the end of the session, got {other:?}"))),
            }
        }
        Err(refused) if refused.close_code() == Some(close::SESSION_GONE) => Ok(Ended::Already),
        Err(refused) => Err(Error::from(refused)),
    }
}
