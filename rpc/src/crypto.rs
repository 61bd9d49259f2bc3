//! Encryption of a connection's frames (`network.crypto.enabled=true`, which needs
//! `authenticate=true`): session keys derived from the authentication handshake, and every
//! frame after it sealed with AES-256-GCM, in place.
//!
//! **Keys.** HKDF-SHA256, with the shared secret as input key material and the connecting
//! side's nonce followed by the accepting side's as salt, expands to one 32-byte key per
//! direction (the info names the direction). Both nonces are fresh, so every connection
//! has keys of its own, and one side alone cannot make them repeat; without the secret
//! they cannot be derived. They are not forward-secret: whoever recorded a connection,
//! its handshake included, and learns the secret later can decrypt it.
//!
//! **Nonces.** Each direction numbers its frames from 0, and frame `n` is sealed with the
//! nonce `n` (four zero bytes, then `n` as a big-endian `u64`): a key never seals two
//! frames under one nonce. The receiver counts the same way and opens frame `n` with
//! nonce `n`, so a frame replayed, reordered or dropped on the way does not open, nor one
//! altered in any byte of its header, payload, padding or tag; any of these closes the
//! connection. Frames carry the low 32 bits of their number in the header's CRC field,
//! so that a frame out of sequence is reported as such ([`WireError::OutOfSequence`])
//! rather than as altered ([`WireError::Forged`]).
//!
//! Frames are sealed by the sending thread as it encodes them into the outbox, under the
//! outbox's lock: the outbox's order is the order of the numbers and of the bytes on the
//! wire. The event loop opens them in the receive buffer, where their payloads are then
//! read in place (see `flint_wire`'s sealed frames).

use bytes::BytesMut;
use flint_wire::{
    FrameHeader, FrameOpener, WireError, FLAG_SEALED, HEADER_LEN, MAX_FRAME_PAYLOAD, TAG_LEN,
};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::hkdf;

/// Bytes of a session key (AES-256).
pub const KEY_LEN: usize = 32;

/// HKDF's info for the key of frames from the connecting side to the accepting side.
const CONNECTING_TO_ACCEPTING: &[u8] = b"flint-crypto-v1 connecting to accepting";
/// HKDF's info for the key of frames from the accepting side to the connecting side.
const ACCEPTING_TO_CONNECTING: &[u8] = b"flint-crypto-v1 accepting to connecting";

/// The two keys of one connection, one per direction.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    /// Seals what the connecting side sends.
    pub connecting_to_accepting: [u8; KEY_LEN],
    /// Seals what the accepting side sends.
    pub accepting_to_connecting: [u8; KEY_LEN],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(redacted)")
    }
}

/// `ring::hkdf` hands out key material by length: 32 bytes.
struct KeyLen;

impl hkdf::KeyType for KeyLen {
    fn len(&self) -> usize {
        KEY_LEN
    }
}

impl SessionKeys {
    /// The keys of the connection whose handshake used `connecting_nonce` (the challenge's)
    /// and `accepting_nonce` (the response's), under `secret`. Both sides derive the same.
    pub fn derive(
        secret: &[u8],
        connecting_nonce: &[u8; 32],
        accepting_nonce: &[u8; 32],
    ) -> SessionKeys {
        let mut salt = [0u8; 64];
        salt[..32].copy_from_slice(connecting_nonce);
        salt[32..].copy_from_slice(accepting_nonce);
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &salt).extract(secret);
        let expand = |info: &[u8]| {
            let mut key = [0u8; KEY_LEN];
            prk.expand(&[info], KeyLen)
                .and_then(|okm| okm.fill(&mut key))
                // Only a length above 255 hash lengths fails, and 32 bytes is one.
                .expect("HKDF-SHA256 expands to 32 bytes");
            key
        };
        SessionKeys {
            connecting_to_accepting: expand(CONNECTING_TO_ACCEPTING),
            accepting_to_connecting: expand(ACCEPTING_TO_CONNECTING),
        }
    }

    /// What one side seals its frames with and opens its peer's with: `connecting` for
    /// the side that opened the connection.
    pub fn session(&self, connecting: bool) -> (Sealer, Opener) {
        let (ours, theirs) = if connecting {
            (&self.connecting_to_accepting, &self.accepting_to_connecting)
        } else {
            (&self.accepting_to_connecting, &self.connecting_to_accepting)
        };
        (
            Sealer {
                key: aead_key(ours),
                next: 0,
            },
            Opener {
                key: aead_key(theirs),
                next: 0,
            },
        )
    }
}

fn aead_key(key: &[u8; KEY_LEN]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).expect("AES-256 takes 32-byte keys"))
}

/// The nonce of frame `sequence`.
fn nonce(sequence: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&sequence.to_be_bytes());
    Nonce::assume_unique_for_key(bytes)
}

/// Seals the frames one side sends, in order.
pub struct Sealer {
    key: LessSafeKey,
    /// The number of the next frame sealed.
    next: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("next", &self.next).finish()
    }
}

impl Sealer {
    /// Seals one frame in place, as the next in sequence: `frame` is all of it as
    /// [`flint_wire::Encoder::encode_with_flags`] with [`FLAG_SEALED`] laid it out (header,
    /// payload, padding, room for the tag).
    pub fn seal(&mut self, frame: &mut [u8]) {
        let sequence = self.next;
        // 2^64 frames are never sent: the count cannot wrap and reuse a nonce.
        self.next = sequence + 1;
        frame[4..8].copy_from_slice(&(sequence as u32).to_le_bytes());
        let (header, rest) = frame.split_at_mut(HEADER_LEN);
        let (body, tag) = rest.split_at_mut(rest.len() - TAG_LEN);
        let sealed = self
            .key
            .seal_in_place_separate_tag(nonce(sequence), Aad::from(&*header), body)
            // It fails only for inputs above 64 GiB; a payload is at most 2 GiB.
            .expect("a frame is within AES-GCM's input limit");
        tag.copy_from_slice(sealed.as_ref());
    }

    /// Seals frames encoded in clear, whole and one after another (as the outbox holds
    /// those queued before the handshake ended), appending them to `out`: each gets
    /// [`FLAG_SEALED`], loses its CRC and gains its tag. Returns how many there were.
    pub fn seal_frames_in_clear(&mut self, plain: &[u8], out: &mut BytesMut) -> usize {
        let mut rest = plain;
        let mut frames = 0;
        while let Some(prefix) = rest.first_chunk::<HEADER_LEN>() {
            let header = FrameHeader::parse(prefix, MAX_FRAME_PAYLOAD)
                .expect("the outbox holds whole frames of its own encoder");
            let len = header.frame_len().min(rest.len());
            let start = out.len();
            out.extend_from_slice(&rest[..len]);
            out.extend_from_slice(&[0u8; TAG_LEN]);
            let flags = header.flags | FLAG_SEALED;
            out[start + 10..start + 12].copy_from_slice(&flags.to_le_bytes());
            self.seal(&mut out[start..]);
            rest = &rest[len..];
            frames += 1;
        }
        debug_assert!(rest.is_empty(), "a frame was cut short in the outbox");
        frames
    }
}

/// Opens the frames one side receives, in order (the decoder's [`FrameOpener`]).
pub struct Opener {
    key: LessSafeKey,
    /// The number of the next frame due.
    next: u64,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener").field("next", &self.next).finish()
    }
}

impl FrameOpener for Opener {
    fn open(&mut self, header: &FrameHeader, frame: &mut [u8]) -> Result<(), WireError> {
        let sequence = self.next;
        let kind = header.kind.name();
        // The number the frame carries is a hint, authenticated with the rest of the
        // header: the frame is opened with the number due whatever it says.
        if header.crc != sequence as u32 {
            return Err(WireError::OutOfSequence {
                kind,
                expected: sequence as u32,
                carried: header.crc,
            });
        }
        let (head, rest) = frame.split_at_mut(HEADER_LEN);
        self.key
            .open_in_place(nonce(sequence), Aad::from(&*head), rest)
            .map_err(|_| WireError::Forged { kind, sequence })?;
        self.next = sequence + 1;
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use flint_wire::{Encoder, FrameDecoder, Message, Route};

    const SECRET: &[u8] = b"correct horse";

    #[test]
    fn both_sides_derive_the_same_keys_and_each_direction_its_own() {
        let (nc, ns) = ([1u8; 32], [2u8; 32]);
        let keys = SessionKeys::derive(SECRET, &nc, &ns);
        assert_eq!(keys, SessionKeys::derive(SECRET, &nc, &ns));
        assert_ne!(keys.connecting_to_accepting, keys.accepting_to_connecting);
        // RFC 5869's extract-then-expand, recomputed with plain HMAC-SHA256: the keys
        // are HKDF's over this salt and info, not some other mixing of the inputs.
        use hmac::{Hmac, KeyInit, Mac};
        let hmac = |key: &[u8], parts: &[&[u8]]| -> [u8; 32] {
            let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key).unwrap();
            parts.iter().for_each(|part| mac.update(part));
            mac.finalize().into_bytes().into()
        };
        let prk = hmac(&[&nc[..], &ns[..]].concat(), &[SECRET]);
        assert_eq!(
            keys.connecting_to_accepting,
            hmac(&prk, &[CONNECTING_TO_ACCEPTING, &[1]])
        );
        assert_eq!(
            keys.accepting_to_connecting,
            hmac(&prk, &[ACCEPTING_TO_CONNECTING, &[1]])
        );
    }

    #[test]
    fn another_nonce_or_secret_gives_other_keys() {
        let keys = SessionKeys::derive(SECRET, &[1; 32], &[2; 32]);
        for other in [
            SessionKeys::derive(SECRET, &[3; 32], &[2; 32]),
            SessionKeys::derive(SECRET, &[1; 32], &[3; 32]),
            // The nonces' order matters: the sides' roles are not interchangeable.
            SessionKeys::derive(SECRET, &[2; 32], &[1; 32]),
            SessionKeys::derive(b"battery staple", &[1; 32], &[2; 32]),
        ] {
            assert_ne!(other.connecting_to_accepting, keys.connecting_to_accepting);
            assert_ne!(other.accepting_to_connecting, keys.accepting_to_connecting);
        }
    }

    fn sealed(sealer: &mut Sealer, tag: u32, body: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        let len = Encoder::new(1 << 20)
            .encode_with_flags(
                &Route::Reply { request_id: 1 },
                &Message::Custom {
                    tag,
                    body: bytes::Bytes::copy_from_slice(body),
                },
                FLAG_SEALED,
                &mut out,
            )
            .unwrap();
        assert_eq!(len, out.len());
        sealer.seal(&mut out);
        out
    }

    fn decoder(opener: Opener) -> FrameDecoder {
        let mut decoder = FrameDecoder::new(1 << 20);
        decoder.set_opener(Box::new(opener));
        decoder
    }

    /// What one side seals the other opens, in both directions, and neither opens its own.
    #[test]
    fn a_frame_sealed_by_one_side_opens_at_the_other_only() {
        let keys = SessionKeys::derive(SECRET, &[1; 32], &[2; 32]);
        let (mut client_sealer, client_opener) = keys.session(true);
        let (mut server_sealer, server_opener) = keys.session(false);
        let body = b"a task's result, which travels in clear only without crypto";

        let to_server = sealed(&mut client_sealer, 7, body);
        assert!(!to_server.windows(body.len()).any(|w| w == body));
        let mut server = decoder(server_opener);
        server.feed(&to_server).unwrap();
        let frame = server.next_frame().unwrap().unwrap();
        let flint_wire::ArchivedMessage::Custom { tag, body: got } =
            &frame.envelope().unwrap().message
        else {
            panic!("not the frame sealed");
        };
        assert_eq!((tag.to_native(), got.as_slice()), (7, &body[..]));

        let to_client = sealed(&mut server_sealer, 8, body);
        let mut client = decoder(client_opener);
        client.feed(&to_client).unwrap();
        assert!(client.next_frame().unwrap().is_some());

        // A frame echoed back to its sender is sealed with the other direction's key.
        let (_, own_opener) = keys.session(true);
        let mut own = decoder(own_opener);
        own.feed(&to_server).unwrap();
        assert!(matches!(
            own.next_frame(),
            Err(WireError::Forged { sequence: 0, .. })
        ));
    }

    /// Frames queued in clear before the keys were known are sealed as the ones after
    /// them, numbered on from the same count.
    #[test]
    fn frames_queued_in_clear_are_sealed_in_order() {
        let keys = SessionKeys::derive(SECRET, &[1; 32], &[2; 32]);
        let (mut sealer, _) = keys.session(true);
        let (_, opener) = keys.session(false);
        let mut plain = BytesMut::new();
        let mut encoder = Encoder::new(1 << 20);
        for tag in 0..3 {
            encoder
                .encode(
                    &Route::Reply { request_id: 1 },
                    &Message::Custom {
                        tag,
                        body: bytes::Bytes::from(vec![tag as u8; 100 * tag as usize]),
                    },
                    &mut plain,
                )
                .unwrap();
        }
        let mut out = BytesMut::new();
        assert_eq!(sealer.seal_frames_in_clear(&plain, &mut out), 3);
        assert_eq!(out.len(), plain.len() + 3 * TAG_LEN);
        out.extend_from_slice(&sealed(&mut sealer, 3, b"after"));
        let mut decoder = decoder(opener);
        decoder.feed(&out).unwrap();
        let mut tags = Vec::new();
        while let Some(frame) = decoder.next_frame().unwrap() {
            let flint_wire::ArchivedMessage::Custom { tag, .. } =
                &frame.envelope().unwrap().message
            else {
                panic!("not a Custom frame");
            };
            tags.push(tag.to_native());
        }
        assert_eq!(tags, [0, 1, 2, 3]);
    }

    /// Each byte of a sealed frame is covered: its header (the associated data), its
    /// payload and padding, and its tag.
    #[test]
    fn a_frame_altered_in_any_byte_does_not_open() {
        let keys = SessionKeys::derive(SECRET, &[1; 32], &[2; 32]);
        let (mut sealer, _) = keys.session(true);
        let frame = sealed(&mut sealer, 1, b"abc");
        let opens = |altered: &[u8]| {
            let (_, opener) = keys.session(false);
            let mut decoder = decoder(opener);
            decoder.feed(altered).unwrap();
            decoder.next_frame().map(|_| ())
        };
        assert_eq!(opens(&frame), Ok(()));
        // In the header, a kind that is another valid one and a flag that is another known
        // one pass the header's own checks: the tag refuses them.
        let mut other_kind = frame.to_vec();
        other_kind[9] = flint_wire::MessageKind::Ack as u8;
        let mut other_flags = frame.to_vec();
        other_flags[10] |= flint_wire::FLAG_WILL_SEAL as u8;
        let body = (HEADER_LEN..frame.len()).map(|at| {
            let mut altered = frame.to_vec();
            altered[at] ^= 0x01;
            (at, altered)
        });
        for (at, altered) in [(9, other_kind), (10, other_flags)].into_iter().chain(body) {
            let error = opens(&altered).unwrap_err();
            assert!(
                matches!(error, WireError::Forged { sequence: 0, .. }),
                "byte {at}: {error}"
            );
        }
    }
}
