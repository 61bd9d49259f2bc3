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

use std::sync::Arc;

use flint_wire::{ArchivedMessage, Message, MessageKind};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

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
}

/// How the texts of [`AuthError`] and of a handshake that timed out begin, or what they
/// hold: a peer's refusal carries only its text, and these tell an authentication
/// refusal from any other.
const AUTH_TEXTS: [&str; 4] = [
    "authentication failed: ",
    "authentication did not finish within ",
    ", but authenticate is false here",
    " after its authentication had ended",
];

/// Whether a peer's refusal (the text of its `Refused`) is about authentication: the
/// peer is a flint process, which refuses with [`AuthError`]'s texts. Only the kind of
/// a failure rests on it (an executor's exit code, say), never a decision to trust.
pub fn is_auth_refusal(text: &str) -> bool {
    text.starts_with(AUTH_TEXTS[0])
        || text.starts_with(AUTH_TEXTS[1])
        || text.contains(AUTH_TEXTS[2])
        || text.contains(AUTH_TEXTS[3])
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
    AwaitProof { their_nonce: [u8; 32] },
    /// The peer is authenticated.
    Done,
}

/// One side of the handshake on one connection.
#[derive(Debug)]
pub struct Handshake {
    secret: Arc<[u8]>,
    our_nonce: [u8; 32],
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
    pub fn connecting(secret: Arc<[u8]>, nonce: [u8; 32]) -> (Self, Message) {
        let handshake = Handshake {
            secret,
            our_nonce: nonce,
            state: State::AwaitResponse,
        };
        (handshake, Message::AuthChallenge { nonce })
    }

    /// The accepting side, waiting for a challenge.
    pub fn accepting(secret: Arc<[u8]>, nonce: [u8; 32]) -> Self {
        Handshake {
            secret,
            our_nonce: nonce,
            state: State::AwaitChallenge,
        }
    }

    /// Whether the peer has proved it knows the secret.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Feeds the next message from the peer.
    pub fn on_message(&mut self, message: &ArchivedMessage) -> Result<Step, AuthError> {
        let unexpected = |expected: MessageKind| AuthError::Unexpected {
            expected: expected.name(),
            got: message.kind().name(),
        };
        match (self.state, message) {
            (State::AwaitChallenge, ArchivedMessage::AuthChallenge { nonce }) => {
                let their_nonce = *nonce;
                let proof = proof_bytes(&self.secret, SERVER_LABEL, &their_nonce, &self.our_nonce);
                self.state = State::AwaitProof { their_nonce };
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
                proof(&self.secret, SERVER_LABEL, &self.our_nonce, nonce)
                    .verify_slice(theirs)
                    .map_err(|_| AuthError::BadProof)?;
                self.state = State::Done;
                Ok(Step::SendAndDone(Message::AuthProof {
                    proof: proof_bytes(&self.secret, CLIENT_LABEL, nonce, &self.our_nonce),
                }))
            }
            (State::AwaitProof { their_nonce }, ArchivedMessage::AuthProof { proof: theirs }) => {
                proof(&self.secret, CLIENT_LABEL, &self.our_nonce, &their_nonce)
                    .verify_slice(theirs)
                    .map_err(|_| AuthError::BadProof)?;
                self.state = State::Done;
                Ok(Step::Done)
            }
            (State::AwaitChallenge, _) => Err(unexpected(MessageKind::AuthChallenge)),
            (State::AwaitResponse, _) => Err(unexpected(MessageKind::AuthResponse)),
            (State::AwaitProof { .. }, _) => Err(unexpected(MessageKind::AuthProof)),
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

    fn run(client_secret: &[u8], server_secret: &[u8]) -> Result<(bool, bool), AuthError> {
        let (mut client, challenge) =
            Handshake::connecting(Arc::from(client_secret), random_nonce().unwrap());
        let mut server = Handshake::accepting(Arc::from(server_secret), random_nonce().unwrap());
        let mut result = Ok((false, false));
        wire(&challenge, |m| {
            let Step::Send(response) = server.on_message(m).unwrap() else {
                panic!("the server answers a challenge");
            };
            wire(&response, |m| match client.on_message(m) {
                Err(e) => result = Err(e),
                Ok(Step::SendAndDone(proof)) => wire(&proof, |m| {
                    result = server.on_message(m).map(|step| {
                        assert_eq!(step, Step::Done);
                        (client.is_done(), server.is_done())
                    })
                }),
                Ok(other) => panic!("unexpected step {other:?}"),
            });
        });
        result
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
        let mut server = Handshake::accepting(Arc::from(&b"k"[..]), random_nonce().unwrap());
        wire(&Message::AuthChallenge { nonce: [1; 32] }, |m| {
            server.on_message(m).unwrap();
        });
        wire(&Message::AuthProof { proof: [0; 32] }, |m| {
            assert_eq!(server.on_message(m), Err(AuthError::BadProof));
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
        ] {
            assert!(!is_auth_refusal(other), "{other}");
        }
    }

    #[test]
    fn a_message_before_the_handshake_is_refused() {
        let mut server = Handshake::accepting(Arc::from(&b"k"[..]), random_nonce().unwrap());
        wire(&Message::ReviveOffers, |m| {
            let error = server.on_message(m).unwrap_err();
            assert_eq!(
                error.to_string(),
                "authentication failed: expected AuthChallenge, got ReviveOffers"
            );
        });
    }
}
