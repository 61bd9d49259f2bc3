//! Connection authentication: a mutual HMAC-SHA256 challenge-response over a shared
//! secret (`authenticate=true`, `authenticate.secret`).
//!
//! 1. The connecting side sends [`Message::AuthChallenge`] with a fresh 32-byte nonce `Nc`.
//! 2. The accepting side answers [`Message::AuthResponse`] with its own nonce `Ns` and
//!    `HMAC(secret, "flint-auth-server" ‖ Nc ‖ Ns)`.
//! 3. The connecting side checks that proof, then sends [`Message::AuthProof`] with
//!    `HMAC(secret, "flint-auth-client" ‖ Ns ‖ Nc)`, and may send messages right behind it.
//! 4. The accepting side checks that proof.
//!
//! Each side delivers nothing from its peer before the peer's proof checked out, and takes
//! no frame above [`HANDSHAKE_MAX_PAYLOAD`] from it until then; the secret itself never
//! travels, and fresh nonces on both sides defeat replay. This is a
//! pure state machine: the connection feeds it messages and sends what it returns.
//!
//! With `network.crypto.enabled=true` a side sets [`FLAG_WILL_SEAL`](flint_wire::FLAG_WILL_SEAL)
//! on its handshake frames, and each side refuses a peer that does not agree at the first
//! step that shows it ([`AuthError::CryptoMismatch`]); once done, the handshake gives the
//! session's keys, derived from the secret and both nonces ([`Handshake::session`], see
//! [`crate::crypto`]).

use std::sync::Arc;

use flint_wire::{ArchivedMessage, Message, MessageKind, CRYPTO_KEY};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::crypto::{Opener, Sealer, SessionKeys};

/// The largest payload a peer may send while it has not authenticated. The handshake's
/// messages take about a hundred bytes; without this bound a stranger could make a
/// connection buffer frames of up to `rpc.message.maxSize` before proving anything.
pub const HANDSHAKE_MAX_PAYLOAD: usize = 512;

/// How size errors name [`HANDSHAKE_MAX_PAYLOAD`].
pub const HANDSHAKE_LIMIT_NAME: &str = "the limit on frames before authentication";

const SERVER_LABEL: &[u8] = b"flint-auth-server";
const CLIENT_LABEL: &[u8] = b"flint-auth-client";

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The peer's proof does not match: it does not know the shared secret.
    #[error(
        "authentication failed: the peer's proof does not match the shared secret \
         (authenticate.secret)"
    )]
    BadProof,
    /// The peer sent something other than the next handshake step.
    #[error("authentication failed: expected {expected}, got {got}")]
    Unexpected {
        /// What the handshake expected.
        expected: &'static str,
        /// What came.
        got: &'static str,
    },
    /// The peer tried to authenticate with a side that does not require it.
    #[error(
        "the peer sent {0}, but authenticate is false here: both sides must set \
         authenticate and the same authenticate.secret"
    )]
    NotEnabled(&'static str),
    /// The peer sent a handshake message after its handshake had ended.
    #[error("the peer sent {0} after its authentication had ended")]
    AfterHandshake(&'static str),
    /// No random bytes for a nonce.
    #[error("authentication failed: no random nonce: {0}")]
    Random(String),
    /// One side encrypts its frames and the other does not: `ours` is this side's
    /// `network.crypto.enabled`.
    #[error(
        "{}, but {key}={ours} here: both sides must set {key} the same",
        if *ours { "the peer does not encrypt" } else { "the peer encrypts" },
        key = CRYPTO_KEY
    )]
    CryptoMismatch {
        /// This side's setting.
        ours: bool,
    },
}

/// How the texts of [`AuthError`] and of a handshake that timed out begin, or what they
/// hold: a peer's refusal carries only its text, and these tell an authentication
/// refusal from any other. The last is [`AuthError::CryptoMismatch`]'s (its key is
/// `CRYPTO_KEY`, which a test holds it to): a mismatch is refused during the handshake,
/// so that both sides, not only the one that found it, see it as an authentication
/// failure (an executor exits with code 77 for it either way).
const AUTH_TEXTS: [&str; 5] = [
    "authentication failed: ",
    "authentication did not finish within ",
    ", but authenticate is false here",
    " after its authentication had ended",
    " here: both sides must set network.crypto.enabled the same",
];

/// Whether a peer's refusal (the text of its `Refused`) is about authentication: the
/// peer is a flint process, which refuses with [`AuthError`]'s texts. Only the kind of
/// a failure rests on it (an executor's exit code, say), never a decision to trust.
pub fn is_auth_refusal(text: &str) -> bool {
    text.starts_with(AUTH_TEXTS[0])
        || text.starts_with(AUTH_TEXTS[1])
        || AUTH_TEXTS[2..].iter().any(|held| text.contains(held))
}

/// What the connection should do after feeding the handshake a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send this message; the handshake is not over yet.
    Send(Message),
    /// Send this message; the peer is now authenticated.
    SendAndDone(Message),
    /// The peer is now authenticated; nothing to send.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Connecting side, challenge sent, waiting for the response.
    AwaitResponse,
    /// Accepting side, waiting for the challenge.
    AwaitChallenge,
    /// Accepting side, response sent, waiting for the proof.
    AwaitProof,
    /// The peer is authenticated.
    Done,
}

/// One side of the handshake on one connection.
#[derive(Debug)]
pub struct Handshake {
    secret: Arc<[u8]>,
    our_nonce: [u8; 32],
    /// The peer's nonce, once it came.
    their_nonce: [u8; 32],
    /// Whether this side opened the connection.
    connecting: bool,
    /// Whether this side seals its frames after the handshake (`network.crypto.enabled`).
    seals: bool,
    state: State,
}

/// 32 bytes from the operating system's random source.
pub fn random_nonce() -> Result<[u8; 32], AuthError> {
    let mut nonce = [0u8; 32];
    getrandom::fill(&mut nonce).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(nonce)
}

fn proof(secret: &[u8], label: &[u8], first: &[u8; 32], second: &[u8; 32]) -> Hmac<Sha256> {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(label);
    mac.update(first);
    mac.update(second);
    mac
}

fn proof_bytes(secret: &[u8], label: &[u8], first: &[u8; 32], second: &[u8; 32]) -> [u8; 32] {
    proof(secret, label, first, second)
        .finalize()
        .into_bytes()
        .into()
}

impl Handshake {
    /// The connecting side: returns the handshake and the challenge to send first.
    /// `seals`: whether this side seals its frames after the handshake.
    pub fn connecting(secret: Arc<[u8]>, nonce: [u8; 32], seals: bool) -> (Self, Message) {
        let handshake = Handshake {
            secret,
            our_nonce: nonce,
            their_nonce: [0; 32],
            connecting: true,
            seals,
            state: State::AwaitResponse,
        };
        (handshake, Message::AuthChallenge { nonce })
    }

    /// The accepting side, waiting for a challenge. `seals`: whether this side seals its
    /// frames after the handshake.
    pub fn accepting(secret: Arc<[u8]>, nonce: [u8; 32], seals: bool) -> Self {
        Handshake {
            secret,
            our_nonce: nonce,
            their_nonce: [0; 32],
            connecting: false,
            seals,
            state: State::AwaitChallenge,
        }
    }

    /// Whether the peer has proved it knows the secret.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether this side seals its frames after the handshake: its handshake frames say
    /// so ([`FLAG_WILL_SEAL`](flint_wire::FLAG_WILL_SEAL)).
    pub fn seals(&self) -> bool {
        self.seals
    }

    /// Once done, with sealing on, what this side seals its frames with and opens its
    /// peer's with; `None` otherwise.
    pub fn session(&self) -> Option<(Sealer, Opener)> {
        if !self.seals || !self.is_done() {
            return None;
        }
        let (connecting_nonce, accepting_nonce) = if self.connecting {
            (&self.our_nonce, &self.their_nonce)
        } else {
            (&self.their_nonce, &self.our_nonce)
        };
        let keys = SessionKeys::derive(&self.secret, connecting_nonce, accepting_nonce);
        Some(keys.session(self.connecting))
    }

    /// Feeds the next message from the peer; `peer_seals` is whether its frame said that
    /// the peer seals its frames after the handshake.
    pub fn on_message(
        &mut self,
        message: &ArchivedMessage,
        peer_seals: bool,
    ) -> Result<Step, AuthError> {
        let unexpected = |expected: MessageKind| AuthError::Unexpected {
            expected: expected.name(),
            got: message.kind().name(),
        };
        // Told before anything else is checked: a side that cannot work with this one
        // learns why, whatever else it got wrong.
        let agree = || {
            if peer_seals == self.seals {
                Ok(())
            } else {
                Err(AuthError::CryptoMismatch { ours: self.seals })
            }
        };
        match (self.state, message) {
            (State::AwaitChallenge, ArchivedMessage::AuthChallenge { nonce }) => {
                agree()?;
                self.their_nonce = *nonce;
                let proof = proof_bytes(
                    &self.secret,
                    SERVER_LABEL,
                    &self.their_nonce,
                    &self.our_nonce,
                );
                self.state = State::AwaitProof;
                Ok(Step::Send(Message::AuthResponse {
                    nonce: self.our_nonce,
                    proof,
                }))
            }
            (
                State::AwaitResponse,
                ArchivedMessage::AuthResponse {
                    nonce,
                    proof: theirs,
                },
            ) => {
                agree()?;
                proof(&self.secret, SERVER_LABEL, &self.our_nonce, nonce)
                    .verify_slice(theirs)
                    .map_err(|_| AuthError::BadProof)?;
                self.their_nonce = *nonce;
                self.state = State::Done;
                Ok(Step::SendAndDone(Message::AuthProof {
                    proof: proof_bytes(&self.secret, CLIENT_LABEL, nonce, &self.our_nonce),
                }))
            }
            (State::AwaitProof, ArchivedMessage::AuthProof { proof: theirs }) => {
                proof(
                    &self.secret,
                    CLIENT_LABEL,
                    &self.our_nonce,
                    &self.their_nonce,
                )
                .verify_slice(theirs)
                .map_err(|_| AuthError::BadProof)?;
                self.state = State::Done;
                Ok(Step::Done)
            }
            (State::AwaitChallenge, _) => Err(unexpected(MessageKind::AuthChallenge)),
            (State::AwaitResponse, _) => Err(unexpected(MessageKind::AuthResponse)),
            (State::AwaitProof, _) => Err(unexpected(MessageKind::AuthProof)),
            (State::Done, _) => Err(AuthError::Unexpected {
                expected: "no further handshake message",
                got: message.kind().name(),
            }),
        }
    }
}

/// Whether `kind` belongs to the handshake (and so must not reach endpoints).
pub fn is_handshake(kind: MessageKind) -> bool {
    matches!(
        kind,
        MessageKind::AuthChallenge | MessageKind::AuthResponse | MessageKind::AuthProof
    )
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use flint_wire::{Encoder, FrameDecoder, Route};

    /// Passes `message` through the codec, as the connection does.
    fn wire(message: &Message, check: impl FnOnce(&ArchivedMessage)) {
        let mut out = BytesMut::new();
        Encoder::new(1 << 16)
            .encode(&Route::Reply { request_id: 0 }, message, &mut out)
            .unwrap();
        // Every handshake message fits the limit a connection sets while it authenticates.
        let mut decoder = FrameDecoder::new(1 << 16);
        decoder.set_max_payload(HANDSHAKE_MAX_PAYLOAD, HANDSHAKE_LIMIT_NAME);
        decoder.feed(&out).unwrap();
        let frame = decoder.next_frame().unwrap().unwrap();
        check(&frame.envelope().unwrap().message);
    }

    /// Runs a handshake through the codec; `seals` is each side's network.crypto.enabled,
    /// passed to its peer as the frame flag would. Returns both handshakes, and whether
    /// each side is done, or the first error.
    fn handshake(
        client_secret: &[u8],
        server_secret: &[u8],
        (client_seals, server_seals): (bool, bool),
    ) -> (Handshake, Handshake, Result<(bool, bool), AuthError>) {
        let (mut client, challenge) = Handshake::connecting(
            Arc::from(client_secret),
            random_nonce().unwrap(),
            client_seals,
        );
        let mut server = Handshake::accepting(
            Arc::from(server_secret),
            random_nonce().unwrap(),
            server_seals,
        );
        let mut result = Ok((false, false));
        wire(&challenge, |m| {
            let response = match server.on_message(m, client_seals) {
                Ok(Step::Send(response)) => response,
                Ok(other) => panic!("unexpected step {other:?}"),
                Err(e) => {
                    result = Err(e);
                    return;
                }
            };
            wire(&response, |m| match client.on_message(m, server_seals) {
                Err(e) => result = Err(e),
                Ok(Step::SendAndDone(proof)) => wire(&proof, |m| {
                    result = server.on_message(m, client_seals).map(|step| {
                        assert_eq!(step, Step::Done);
                        (client.is_done(), server.is_done())
                    })
                }),
                Ok(other) => panic!("unexpected step {other:?}"),
            });
        });
        (client, server, result)
    }

    fn run(client_secret: &[u8], server_secret: &[u8]) -> Result<(bool, bool), AuthError> {
        handshake(client_secret, server_secret, (false, false)).2
    }

    /// Seals a frame with `sealer` and opens it with `opener`.
    fn opens(sealer: &mut Sealer, opener: Opener) -> bool {
        let mut out = BytesMut::new();
        Encoder::new(1 << 16)
            .encode_with_flags(
                &Route::Reply { request_id: 1 },
                &Message::Ack { ok: true },
                flint_wire::FLAG_SEALED,
                &mut out,
            )
            .unwrap();
        sealer.seal(&mut out);
        let mut decoder = FrameDecoder::new(1 << 16);
        decoder.set_opener(Box::new(opener));
        decoder.feed(&out).unwrap();
        decoder.next_frame().is_ok_and(|frame| frame.is_some())
    }

    #[test]
    fn sealing_sides_get_matching_keys_once_done_and_each_session_its_own() {
        let (client, server, result) = handshake(b"s3cret", b"s3cret", (true, true));
        assert_eq!(result, Ok((true, true)));
        let (mut client_sealer, client_opener) = client.session().unwrap();
        let (mut server_sealer, server_opener) = server.session().unwrap();
        assert!(opens(&mut client_sealer, server_opener));
        assert!(opens(&mut server_sealer, client_opener));

        // Another connection under the same secret: fresh nonces, other keys.
        let (other_client, _, result) = handshake(b"s3cret", b"s3cret", (true, true));
        assert_eq!(result, Ok((true, true)));
        let (_, server_opener) = server.session().unwrap();
        let (mut other_sealer, _) = other_client.session().unwrap();
        assert!(!opens(&mut other_sealer, server_opener));

        // No keys without sealing, nor before the handshake is done.
        let (client, server, result) = handshake(b"s3cret", b"s3cret", (false, false));
        assert_eq!(result, Ok((true, true)));
        assert!(client.session().is_none() && server.session().is_none());
        let (waiting, _) = Handshake::connecting(Arc::from(&b"k"[..]), [1; 32], true);
        assert!(waiting.session().is_none());
    }

    #[test]
    fn a_side_that_seals_and_one_that_does_not_are_told_at_the_first_step() {
        // The server sees the client's challenge first, and refuses it whichever side
        // seals.
        let (_, server, result) = handshake(b"s3cret", b"s3cret", (false, true));
        assert_eq!(result, Err(AuthError::CryptoMismatch { ours: true }));
        assert!(!server.is_done());
        assert_eq!(
            result.unwrap_err().to_string(),
            "the peer does not encrypt, but network.crypto.enabled=true here: both sides \
             must set network.crypto.enabled the same"
        );
        let (_, _, result) = handshake(b"s3cret", b"s3cret", (true, false));
        assert_eq!(
            result.unwrap_err().to_string(),
            "the peer encrypts, but network.crypto.enabled=false here: both sides must set \
             network.crypto.enabled the same"
        );
        // A client checks the response too.
        let (mut client, _) = Handshake::connecting(Arc::from(&b"k"[..]), [1; 32], true);
        wire(
            &Message::AuthResponse {
                nonce: [2; 32],
                proof: [0; 32],
            },
            |m| {
                assert_eq!(
                    client.on_message(m, false),
                    Err(AuthError::CryptoMismatch { ours: true })
                );
            },
        );
    }

    #[test]
    fn same_secret_authenticates_both_sides() {
        assert_eq!(run(b"s3cret", b"s3cret"), Ok((true, true)));
    }

    #[test]
    fn wrong_secret_fails_at_the_client_which_checks_first() {
        assert_eq!(run(b"s3cret", b"other"), Err(AuthError::BadProof));
    }

    #[test]
    fn a_forged_client_proof_is_refused() {
        let mut server = Handshake::accepting(Arc::from(&b"k"[..]), random_nonce().unwrap(), false);
        wire(&Message::AuthChallenge { nonce: [1; 32] }, |m| {
            server.on_message(m, false).unwrap();
        });
        wire(&Message::AuthProof { proof: [0; 32] }, |m| {
            assert_eq!(server.on_message(m, false), Err(AuthError::BadProof));
        });
        assert!(!server.is_done());
    }

    /// A refusal with any of the handshake's texts is known as one, so that the texts
    /// and the check cannot drift apart; other refusals are not.
    #[test]
    fn every_authentication_text_is_known_as_an_authentication_refusal() {
        for error in [
            AuthError::BadProof,
            AuthError::Unexpected {
                expected: "AuthChallenge",
                got: "RegisterExecutor",
            },
            AuthError::NotEnabled("AuthChallenge"),
            AuthError::AfterHandshake("AuthProof"),
            AuthError::Random("no entropy".into()),
            AuthError::CryptoMismatch { ours: true },
            AuthError::CryptoMismatch { ours: false },
        ] {
            assert!(is_auth_refusal(&error.to_string()), "{error}");
        }
        assert!(is_auth_refusal(
            "authentication did not finish within 30s; the timeout is set by \
             authenticate.timeout"
        ));
        for other in [
            "end of stream",
            "frame checksum mismatch: header carries 0x00000000, bytes give 0x00000001",
            "the peer sent nothing for 120s; the timeout is set by rpc.io.idleTimeout",
            // A sealed frame's own failures are not the handshake's.
            "sealed Custom frame out of sequence: it carries sequence number 2 where 1 was \
             due, so a frame was replayed, reordered or dropped on the way \
             (network.crypto.enabled=true)",
        ] {
            assert!(!is_auth_refusal(other), "{other}");
        }
    }

    #[test]
    fn a_message_before_the_handshake_is_refused() {
        let mut server = Handshake::accepting(Arc::from(&b"k"[..]), random_nonce().unwrap(), false);
        wire(&Message::ReviveOffers, |m| {
            let error = server.on_message(m, false).unwrap_err();
            assert_eq!(
                error.to_string(),
                "authentication failed: expected AuthChallenge, got ReviveOffers"
            );
        });
    }
}
