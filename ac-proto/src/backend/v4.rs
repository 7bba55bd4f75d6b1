//! Protocol 4, the version before this one: the encodings that differ from [`super::VERSION`]'s.

use serde::{Deserialize, Serialize};

use super::{DeviceInfo, SessionId};

/// The version.
pub const VERSION: u16 = 4;

/// Protocol 4's [`super::Response`], of which only the welcome differs (variant 0, without
/// `lanes`: a protocol-4 client stripes over lanes by its own count).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Welcome {
    /// The hello was accepted.
    Welcome {
        /// The session (new or joined).
        session: SessionId,
        /// Secret to attach more connections to the session.
        token: [u8; 16],
        /// The device this session runs on.
        info: DeviceInfo,
        /// The TCP port of the backend's bulk lanes; 0 when it has none.
        lane_port: u16,
    },
}

/// Protocol 4's reply frame carrying its welcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WelcomeReply {
    /// Always 0.
    pub id: u64,
    /// The welcome.
    pub response: Welcome,
}

impl WelcomeReply {
    /// Protocol 4's form of a welcome; `None` for any other response, which protocol 4
    /// encodes as this version does.
    pub fn from_current(response: &super::Response) -> Option<Self> {
        let super::Response::Welcome { session, token, info, lane_port, .. } = response else { return None };
        let response = Welcome::Welcome { session: *session, token: *token, info: info.clone(), lane_port: *lane_port };
        Some(Self { id: 0, response })
    }

    /// This version's form, naming `lanes`, which protocol 4 leaves to the client.
    pub fn into_current(self, lanes: u16) -> super::Response {
        let Welcome::Welcome { session, token, info, lane_port } = self.response;
        super::Response::Welcome { session, token, info, lane_port, lanes }
    }
}
