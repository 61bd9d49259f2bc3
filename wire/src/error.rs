//! The errors of the wire layer.

use crate::header::MAGIC;

/// The configuration key that bounds a frame's payload, named in size errors.
pub const MAX_SIZE_KEY: &str = "rpc.message.maxSize";

/// The configuration key that makes a connection seal its frames, named in the errors of
/// sealed frames.
pub const CRYPTO_KEY: &str = "network.crypto.enabled";

/// Everything that can go wrong while framing, encoding or validating a message.
///
/// A decoder that returns any of these (other than on `encode`) has stopped: it accepts
/// no further bytes, so nothing a misbehaving peer sends after the fault is processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The first four bytes of a frame were not `FLNT`.
    #[error(
        "bad frame magic: expected {:02x?} (\"FLNT\"), got {found:02x?}",
        MAGIC
    )]
    BadMagic {
        /// The four bytes that arrived instead.
        found: [u8; 4],
    },
    /// The peer speaks another version of the protocol.
    #[error(
        "protocol version mismatch: this peer speaks flint wire protocol version {ours}, \
         the remote sent version {theirs}"
    )]
    VersionMismatch {
        /// The version this build speaks.
        ours: u8,
        /// The version in the peer's frame.
        theirs: u8,
    },
    /// The header names a message kind this version does not define.
    #[error("unknown message kind {0} in frame header")]
    UnknownKind(u8),
    /// The header sets flag bits this version does not define.
    #[error("unsupported frame flags {0:#06x}")]
    UnknownFlags(u16),
    /// A frame header announced a payload above the configured limit.
    #[error(
        "frame announces a payload of {announced} bytes, which exceeds {limit_name} ({limit} \
         bytes)"
    )]
    FrameTooLarge {
        /// Payload size the header announced.
        announced: usize,
        /// The limit in bytes.
        limit: usize,
        /// What sets the limit: [`MAX_SIZE_KEY`], unless the decoder was given a tighter
        /// one ([`crate::FrameDecoder::set_max_payload`]).
        limit_name: &'static str,
    },
    /// An encoded message is larger than the configured limit; nothing was queued.
    #[error(
        "encoded message of {size} bytes exceeds {key} ({limit} bytes)",
        key = MAX_SIZE_KEY
    )]
    MessageTooLarge {
        /// Size of the encoded payload.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// A list in a valid message would take more memory decoded than the limit allows;
    /// it was not decoded.
    #[error(
        "{what} would take {size} bytes decoded, more than {key} ({limit} bytes)",
        key = MAX_SIZE_KEY
    )]
    DecodedTooLarge {
        /// What was refused, for the message.
        what: &'static str,
        /// Bytes its decoded form would take.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// The CRC in the header does not match the bytes that arrived.
    #[error(
        "frame checksum mismatch: header carries {expected:#010x}, bytes give {computed:#010x}"
    )]
    ChecksumMismatch {
        /// CRC the header carries.
        expected: u32,
        /// CRC of the header prefix and payload as received.
        computed: u32,
    },
    /// The padding after a payload was not zero.
    #[error("non-zero padding after a {0} frame payload")]
    BadPadding(&'static str),
    /// The payload is not a valid archived envelope.
    #[error("invalid {kind} payload: {reason}")]
    InvalidPayload {
        /// Message kind the header announced.
        kind: &'static str,
        /// What validation found.
        reason: String,
    },
    /// The header's kind and the archived message disagree.
    #[error("frame header says {header} but the payload holds {payload}")]
    KindMismatch {
        /// Kind in the header.
        header: &'static str,
        /// Kind of the archived message.
        payload: &'static str,
    },
    /// The stream ended part-way through a frame.
    #[error("stream ended inside a frame: {buffered} bytes of an incomplete frame were buffered")]
    Truncated {
        /// Bytes of the incomplete frame.
        buffered: usize,
    },
    /// The decoder already failed; it accepts nothing more.
    #[error("decoder closed after an earlier error: {0}")]
    Closed(Box<WireError>),
    /// A frame in clear arrived on a connection that seals every frame.
    #[error(
        "a {kind} frame arrived unsealed where every frame must be sealed ({key}=true): \
         the peer does not encrypt, or the frame did not come from it",
        key = CRYPTO_KEY
    )]
    Unsealed {
        /// Kind in the header.
        kind: &'static str,
    },
    /// A sealed frame arrived on a connection that does not seal.
    #[error(
        "a sealed {kind} frame arrived, but this side does not encrypt: both sides must set \
         {key} the same",
        key = CRYPTO_KEY
    )]
    UnexpectedSeal {
        /// Kind in the header.
        kind: &'static str,
    },
    /// A sealed frame carries another sequence number than the one due: a frame was
    /// replayed, reordered or dropped on the way.
    #[error(
        "sealed {kind} frame out of sequence: it carries sequence number {carried} where \
         {expected} was due, so a frame was replayed, reordered or dropped on the way \
         ({key}=true)",
        key = CRYPTO_KEY
    )]
    OutOfSequence {
        /// Kind in the header.
        kind: &'static str,
        /// The sequence number due (its low 32 bits, as frames carry them).
        expected: u32,
        /// The sequence number the frame carries.
        carried: u32,
    },
    /// A sealed frame does not authenticate: altered on the way, or sealed with other keys.
    #[error(
        "sealed {kind} frame {sequence} failed authentication: it was altered on the way \
         ({key}=true)",
        key = CRYPTO_KEY
    )]
    Forged {
        /// Kind in the header.
        kind: &'static str,
        /// Its sequence number.
        sequence: u64,
    },
    /// A task's serialized form is malformed (see [`crate::TaskPayload`]).
    #[error("bad serialized task: {0}")]
    BadTaskPayload(String),
}
