//! The link block: how a world continues another or is continued by it.

use crate::cursor::Cursor;
use crate::error::FormatError;

/// The link block's role byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// 1: removes `body` at the transfer step (declares `ContinuedBy`, key `tm-left`).
    Sender = 1,
    /// 2: holds `body` from the transfer step on (declares `Continues`, key `tm-right`).
    Receiver = 2,
    /// 3: declares the density and occupancy fields only.
    FieldsOnly = 3,
}

impl Role {
    /// Role from its byte.
    pub fn from_byte(b: u8) -> Option<Role> {
        match b {
            1 => Some(Role::Sender),
            2 => Some(Role::Receiver),
            3 => Some(Role::FieldsOnly),
            _ => None,
        }
    }

    /// Name printed by the tools.
    pub fn name(self) -> &'static str {
        match self {
            Role::Sender => "sender",
            Role::Receiver => "receiver",
            Role::FieldsOnly => "fields-only",
        }
    }
}

/// The 4-byte link block: role, body index, transfer step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Link {
    pub role: Role,
    /// The body that moves (roles 1 and 2), any u8: an index with no slot moves nothing;
    /// kept as read for role 3.
    pub body: u8,
    /// The step at which it moves (roles 1 and 2); kept as read for role 3.
    pub transfer_step: u16,
}

/// Link key of the sending side.
pub const KEY_LEFT: &str = "tm-left";
/// Link key of the receiving side.
pub const KEY_RIGHT: &str = "tm-right";

/// Velocity (mm/step) a received body has at the moment it appears.
pub const ARRIVAL_VELOCITY: [i32; 3] = [40, 0, 0];

impl Link {
    /// Encoded length.
    pub const LEN: usize = 4;

    /// Reads and checks a link block. The body index may be any u8: a transfer (and a
    /// receiver's empty start slot) acts only on a slot that exists at that moment.
    pub fn read(c: &mut Cursor<'_>) -> Result<Link, FormatError> {
        let at = c.offset();
        let role_byte = c.u8("link role")?;
        let role = Role::from_byte(role_byte).ok_or_else(|| {
            c.error_at(
                at,
                format!("expected link role 1, 2 or 3, found {role_byte}"),
            )
        })?;
        let body = c.u8("link body index")?;
        let transfer_step = c.u16("link transfer step")?;
        Ok(Link {
            role,
            body,
            transfer_step,
        })
    }

    /// The block's 4 bytes.
    pub fn to_bytes(&self) -> [u8; 4] {
        let s = self.transfer_step.to_le_bytes();
        [self.role as u8, self.body, s[0], s[1]]
    }

    /// The link's direction as declared: `ContinuedBy` (sender), `Continues` (receiver).
    pub fn declaration(&self) -> Option<&'static str> {
        match self.role {
            Role::Sender => Some("ContinuedBy"),
            Role::Receiver => Some("Continues"),
            Role::FieldsOnly => None,
        }
    }

    /// This side's own link key.
    pub fn own_key(&self) -> Option<&'static str> {
        match self.role {
            Role::Sender => Some(KEY_LEFT),
            Role::Receiver => Some(KEY_RIGHT),
            Role::FieldsOnly => None,
        }
    }

    /// The key of the side this one is linked to.
    pub fn peer_key(&self) -> Option<&'static str> {
        match self.role {
            Role::Sender => Some(KEY_RIGHT),
            Role::Receiver => Some(KEY_LEFT),
            Role::FieldsOnly => None,
        }
    }
}
