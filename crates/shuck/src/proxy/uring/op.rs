//! What the ring is asked to do, and for whom: each submission's `user_data` is the
//! connection's slot and the operation, so that a completion finds its way back.

/// The operations of the prototype's data path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Op {
    /// The listener's multishot accept (slot unused).
    Accept = 0,
    /// The once-a-second multishot timeout: timeouts and the stop flag (slot unused).
    Tick,
    /// A receive from the client.
    ClientRecv,
    /// A send to the client.
    ClientSend,
    /// The backend socket's creation.
    Socket,
    /// TCP_NODELAY on the backend socket.
    NoDelay,
    /// The backend connect.
    Connect,
    /// A receive from the backend.
    BackendRecv,
    /// A send to the backend.
    BackendSend,
    /// The backend's write side shut (the client's end of stream passed on).
    Shutdown,
    /// A socket's close.
    Close,
    /// A cancellation of a receive still waiting at close.
    Cancel,
}

impl Op {
    const ALL: [Op; 12] = [
        Op::Accept,
        Op::Tick,
        Op::ClientRecv,
        Op::ClientSend,
        Op::Socket,
        Op::NoDelay,
        Op::Connect,
        Op::BackendRecv,
        Op::BackendSend,
        Op::Shutdown,
        Op::Close,
        Op::Cancel,
    ];
}

/// The `user_data` of `op` for the connection in `slot`.
pub(super) fn tag(slot: usize, op: Op) -> u64 {
    ((slot as u64) << 8) | op as u64
}

/// The slot and operation of a completion's `user_data`; `None` for a value no
/// submission of ours carries.
pub(super) fn untag(data: u64) -> Option<(usize, Op)> {
    let op = *Op::ALL.get(usize::from((data & 0xff) as u8))?;
    Some((usize::try_from(data >> 8).ok()?, op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for op in Op::ALL {
            for slot in [0, 1, 255, 256, 1 << 40] {
                assert_eq!(untag(tag(slot, op)), Some((slot, op)));
            }
        }
        assert_eq!(untag(0xff), None);
    }
}
