//! The fixed 16-byte frame header: layout, encoding and checks.
//!
//! See the crate documentation for the byte-by-byte layout.

use crate::error::{WireError, MAX_SIZE_KEY};
use crate::kind::MessageKind;

/// The four bytes every frame starts with: `FLNT`.
pub const MAGIC: [u8; 4] = *b"FLNT";

/// The wire protocol version this build speaks. 2: launches and status updates in
/// batches (`LaunchTasks`, `StatusUpdates`), and a numbered task name archived as its
/// numbers; a peer of version 1 is refused at its first frame, with both versions named.
pub const PROTOCOL_VERSION: u8 = 2;

/// Size of the frame header in bytes.
pub const HEADER_LEN: usize = 16;

/// Frames start, and payloads start, at multiples of this many bytes in a stream.
///
/// It is at least the alignment of every archived message type, so a payload that sits
/// at an aligned position in the receive buffer can be accessed in place.
pub const FRAME_ALIGN: usize = 16;

/// Flag bit: the frame is sealed (`network.crypto.enabled`). Its payload and padding are
/// ciphertext of an AEAD whose associated data is the header; the header's CRC field
/// holds the low 32 bits of the frame's sequence number instead of a CRC; and a
/// [`TAG_LEN`]-byte authentication tag follows the padding. A connection seals every
/// frame after its handshake or none.
pub const FLAG_SEALED: u16 = 1 << 0;

/// Flag bit, on handshake frames only: their sender seals every frame after the handshake
/// (`network.crypto.enabled=true`), so that a side that does not is refused at the
/// handshake, with a reason, rather than at the first sealed frame.
pub const FLAG_WILL_SEAL: u16 = 1 << 1;

/// Flag bits defined by this protocol version. Any other bit set is an error.
pub const KNOWN_FLAGS: u16 = FLAG_SEALED | FLAG_WILL_SEAL;

/// Bytes of the authentication tag at the end of a sealed frame: a multiple of
/// [`FRAME_ALIGN`], so that the next frame stays aligned.
pub const TAG_LEN: usize = 16;

/// Where the CRC-covered bytes start: the header after magic and CRC, then the payload,
/// one contiguous range so that the CRC is a single pass.
pub(crate) const CRC_START: usize = 8;

/// The decoded fields of a frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the payload's envelope carries.
    pub kind: MessageKind,
    /// Flag bits (none are defined in version 1).
    pub flags: u16,
    /// Payload length in bytes, without the padding that follows it.
    pub payload_len: u32,
    /// CRC32 (IEEE) over header bytes 8..16 followed by the payload; in a sealed frame
    /// ([`FLAG_SEALED`]), the low 32 bits of its sequence number.
    pub crc: u32,
}

impl FrameHeader {
    /// Bytes the whole frame occupies in the stream, padding (and a sealed frame's tag)
    /// included.
    #[inline]
    pub fn frame_len(&self) -> usize {
        padded_frame_len(self.payload_len as usize) + self.tag_len()
    }

    /// Whether the frame is sealed ([`FLAG_SEALED`]).
    #[inline]
    pub fn is_sealed(&self) -> bool {
        self.flags & FLAG_SEALED != 0
    }

    /// Bytes of authentication tag after the padding: [`TAG_LEN`] if sealed, else 0.
    #[inline]
    fn tag_len(&self) -> usize {
        if self.is_sealed() {
            TAG_LEN
        } else {
            0
        }
    }

    /// Writes the header into `out`.
    pub fn write(&self, out: &mut [u8; HEADER_LEN]) {
        out[0..4].copy_from_slice(&MAGIC);
        out[4..8].copy_from_slice(&self.crc.to_le_bytes());
        out[8] = PROTOCOL_VERSION;
        out[9] = self.kind as u8;
        out[10..12].copy_from_slice(&self.flags.to_le_bytes());
        out[12..16].copy_from_slice(&self.payload_len.to_le_bytes());
    }

    /// Parses and checks a header: magic, version, kind, flags, and the announced payload
    /// length against `max_payload` (the `rpc.message.maxSize` limit in bytes).
    ///
    /// The checks run in the order of the fields, so a peer speaking another protocol
    /// entirely is told about the magic, and one speaking another flint version is told
    /// about the version, before anything else.
    pub fn parse(bytes: &[u8; HEADER_LEN], max_payload: usize) -> Result<Self, WireError> {
        let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if magic != MAGIC {
            return Err(WireError::BadMagic { found: magic });
        }
        if bytes[8] != PROTOCOL_VERSION {
            return Err(WireError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: bytes[8],
            });
        }
        let kind = MessageKind::from_code(bytes[9]).ok_or(WireError::UnknownKind(bytes[9]))?;
        let flags = u16::from_le_bytes([bytes[10], bytes[11]]);
        if flags & !KNOWN_FLAGS != 0 {
            return Err(WireError::UnknownFlags(flags));
        }
        let payload_len = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
        if payload_len as usize > max_payload {
            return Err(WireError::FrameTooLarge {
                announced: payload_len as usize,
                limit: max_payload,
                limit_name: MAX_SIZE_KEY,
            });
        }
        let crc = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        Ok(FrameHeader {
            kind,
            flags,
            payload_len,
            crc,
        })
    }
}

/// The largest payload a frame carries, whatever the configured limit: rkyv's relative
/// pointers are 32-bit signed offsets, so nothing larger can be archived, and a frame's
/// length then fits a `u32` with its header and padding (on 32-bit targets too).
pub const MAX_FRAME_PAYLOAD: usize = i32::MAX as usize;

/// Length of a frame with a payload of `payload_len` bytes, rounded up to [`FRAME_ALIGN`].
pub fn padded_frame_len(payload_len: usize) -> usize {
    (HEADER_LEN + payload_len).next_multiple_of(FRAME_ALIGN)
}

/// The CRC a frame must carry, computed over `frame[CRC_START..16 + payload_len]`.
pub(crate) fn frame_crc(covered: &[u8]) -> u32 {
    crc32fast::hash(covered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: MessageKind, len: u32) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        FrameHeader {
            kind,
            flags: 0,
            payload_len: len,
            crc: 0xDEAD_BEEF,
        }
        .write(&mut out);
        out
    }

    #[test]
    fn layout_matches_the_documented_bytes() {
        let bytes = header(MessageKind::LaunchTask, 0x0102_0304);
        assert_eq!(&bytes[0..4], b"FLNT");
        assert_eq!(
            &bytes[4..8],
            &[0xEF, 0xBE, 0xAD, 0xDE],
            "crc is little-endian"
        );
        assert_eq!(bytes[8], PROTOCOL_VERSION);
        assert_eq!(bytes[9], MessageKind::LaunchTask as u8);
        assert_eq!(&bytes[10..12], &[0, 0]);
        assert_eq!(&bytes[12..16], &[4, 3, 2, 1], "length is little-endian");
    }

    #[test]
    fn parse_round_trips() {
        let bytes = header(MessageKind::StatusUpdate, 100);
        let parsed = FrameHeader::parse(&bytes, 100).unwrap();
        assert_eq!(parsed.kind, MessageKind::StatusUpdate);
        assert_eq!(parsed.payload_len, 100);
        assert_eq!(parsed.crc, 0xDEAD_BEEF);
        assert_eq!(parsed.frame_len(), 128);
    }

    #[test]
    fn limit_is_checked_from_the_header() {
        let bytes = header(MessageKind::LaunchTask, 101);
        let err = FrameHeader::parse(&bytes, 100).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("rpc.message.maxSize"), "{text}");
        assert!(text.contains("101"), "{text}");
        assert!(text.contains("100"), "{text}");
    }

    #[test]
    fn version_error_names_both_versions() {
        let mut bytes = header(MessageKind::LaunchTask, 1);
        bytes[8] = 7;
        let text = FrameHeader::parse(&bytes, 100).unwrap_err().to_string();
        assert!(
            text.contains(&format!("version {PROTOCOL_VERSION}")) && text.contains("version 7"),
            "{text}"
        );
    }

    #[test]
    fn bad_magic_unknown_kind_and_flags_are_refused() {
        let mut bytes = header(MessageKind::LaunchTask, 1);
        bytes[0] = b'G';
        assert!(matches!(
            FrameHeader::parse(&bytes, 100),
            Err(WireError::BadMagic { .. })
        ));
        let mut bytes = header(MessageKind::LaunchTask, 1);
        bytes[9] = 0xEE;
        assert!(matches!(
            FrameHeader::parse(&bytes, 100),
            Err(WireError::UnknownKind(0xEE))
        ));
        let mut bytes = header(MessageKind::LaunchTask, 1);
        bytes[11] = 0x80;
        assert!(matches!(
            FrameHeader::parse(&bytes, 100),
            Err(WireError::UnknownFlags(0x8000))
        ));
    }

    #[test]
    fn padding_rounds_up_to_the_alignment() {
        assert_eq!(padded_frame_len(0), 16);
        assert_eq!(padded_frame_len(1), 32);
        assert_eq!(padded_frame_len(16), 32);
        assert_eq!(padded_frame_len(17), 48);
    }

    /// A sealed frame carries its tag after the padding, and the next frame still starts
    /// at a multiple of 16.
    #[test]
    fn a_sealed_frame_is_longer_by_its_tag() {
        let mut bytes = header(MessageKind::Ack, 17);
        let plain = FrameHeader::parse(&bytes, 100).unwrap();
        assert!(!plain.is_sealed());
        assert_eq!(plain.frame_len(), 48);
        bytes[10] = FLAG_SEALED as u8;
        let sealed = FrameHeader::parse(&bytes, 100).unwrap();
        assert!(sealed.is_sealed());
        assert_eq!(sealed.frame_len(), 48 + TAG_LEN);
        assert_eq!(sealed.frame_len() % FRAME_ALIGN, 0);
        bytes[10] = FLAG_WILL_SEAL as u8;
        assert!(!FrameHeader::parse(&bytes, 100).unwrap().is_sealed());
        bytes[10] = 1 << 2;
        assert!(matches!(
            FrameHeader::parse(&bytes, 100),
            Err(WireError::UnknownFlags(4))
        ));
    }
}
