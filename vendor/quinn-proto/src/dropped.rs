//! Why received datagrams, or packets within them, are discarded (shuck patch 2: see
//! vendor/patches/quinn-proto). An application that wants counts sets [`EndpointConfig::drop_hook`];
//! without one nothing is recorded.
//!
//! [`EndpointConfig::drop_hook`]: crate::EndpointConfig::drop_hook

/// Why a received datagram, or a packet within one, went no further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// A header that does not parse, or a first Initial that does not decode.
    Malformed = 0,
    /// A QUIC version this endpoint does not speak (answered with Version Negotiation
    /// when the datagram is large enough).
    UnsupportedVersion,
    /// For no connection this endpoint knows (answered with a stateless reset where the
    /// rate limit and the datagram's size allow).
    UnknownConnection,
    /// A first Initial in a datagram under 1200 bytes (RFC 9000 §14.1).
    ShortInitial,
    /// No room: too many connection attempts under way, or their buffers full.
    Saturated,
    /// A Retry token that does not validate, or an Initial without the connection's.
    InvalidToken,
    /// A packet that fails authentication, or whose keys are unknown or discarded.
    Undecryptable,
    /// A packet number already received.
    Duplicate,
    /// From an address other than the peer's where that is not allowed (during the
    /// handshake, or where migration is refused).
    UnexpectedPeer,
    /// A packet that cannot be processed in the connection's state (1-RTT before the
    /// handshake is confirmed, a handshake packet after it).
    OutOfOrder,
}

impl DropReason {
    /// Every reason, in the order of their discriminants.
    pub const ALL: [Self; 10] = [
        Self::Malformed,
        Self::UnsupportedVersion,
        Self::UnknownConnection,
        Self::ShortInitial,
        Self::Saturated,
        Self::InvalidToken,
        Self::Undecryptable,
        Self::Duplicate,
        Self::UnexpectedPeer,
        Self::OutOfOrder,
    ];
}
