//! Typed user messages: an embedder's own rkyv types, sent, asked and answered, read in
//! place on the receiving side after validation.
//!
//! A type becomes a message by deriving rkyv's `Archive` and `Serialize` (validation,
//! bytecheck, comes with `Archive`) and implementing [`UserMessage`], whose `ID` names it
//! on the wire; a [`Request`] names the type of its reply as well. On the wire a user
//! message is a [`Message::Custom`] whose tag is the id and whose body is the type's
//! archive, placed at a multiple of [`flint_wire::BODY_ALIGN`] in the frame's payload, so
//! that it is read in place under every chunking of the stream, as catalogue messages are.
//! Everything the transport does to a frame (`rpc.message.maxSize`, authentication,
//! sealing, every rule against a hostile peer) applies unchanged.
//!
//! Senders use [`EndpointRef::send_typed`] and [`EndpointRef::ask_typed`]; receivers
//! either register a [`Service`] (one handler per message type) or read messages in an
//! [`Endpoint`] of their own with [`Incoming::typed`] and answer with
//! [`Incoming::reply_typed`] or [`ReplyHandle::reply_typed`].

use std::any::type_name;
use std::marker::PhantomData;
use std::time::Duration;

use bytes::Bytes;
use bytes::BytesMut;
use flint_wire::{
    ArchivedMessage, CheckError, Encoder, Frame, Message, Route, UserSerializer, WireError,
    BODY_ALIGN,
};
use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Archived, Deserialize, Serialize};
use rustc_hash::FxHashMap;

use crate::ask::Reply;
use crate::endpoint::{Endpoint, EndpointContext, Incoming, ReplyHandle};
use crate::error::RpcError;
use crate::log_budget::LogBudget;
use crate::outbox::Outgoing;
use crate::refs::EndpointRef;

/// A type the transport carries as an application's own message.
///
/// `ID` identifies the type on the wire: both sides must agree on it, and one
/// [`Service`] takes one type per id. Any type that derives rkyv's `Archive` and
/// `Serialize` qualifies (bytecheck, which validates what arrives, is derived with
/// `Archive`); its archived form must need an alignment of at most
/// [`flint_wire::BODY_ALIGN`] (16, that of `u128`), which every type rkyv derives does.
/// What arrives is validated at most [`MAX_USER_MESSAGE_DEPTH`] levels deep, so a
/// recursive type (derived as rkyv documents, with `omit_bounds`) is safe to receive.
pub trait UserMessage:
    Archive<Archived: for<'a> CheckBytes<HighValidator<'a, CheckError>>>
    + for<'a> Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>
    + for<'a, 'b> Serialize<UserSerializer<'a, 'b>>
    + 'static
{
    /// The id that names this type on the wire.
    const ID: u32;
}

/// A user message that expects an answer of type `Reply`.
pub trait Request: UserMessage {
    /// The type of the answer.
    type Reply: UserMessage;
}

/// Serializes `message` into the body of a [`Message::Custom`] tagged with its id.
pub fn encode_user_message<M: UserMessage>(message: &M) -> Result<Message, RpcError> {
    const {
        assert!(
            std::mem::align_of::<Archived<M>>() <= BODY_ALIGN,
            "a user message's archived form may need at most 16-byte alignment"
        )
    };
    let archive =
        rkyv::to_bytes::<rancor::Error>(message).map_err(|error| RpcError::Serialize {
            id: M::ID,
            type_name: type_name::<M>(),
            reason: error.to_string(),
        })?;
    Ok(Message::Custom {
        tag: M::ID,
        // The archive's buffer becomes the body without a copy.
        body: Bytes::from_owner(archive),
    })
}

/// A typed value on its way out: archived as a [`Message::Custom`] body straight into the
/// connection's outbox ([`Encoder::encode_user`]), with no buffer of its own.
pub(crate) struct Typed<'a, M>(pub(crate) &'a M);

impl<M: UserMessage> Outgoing for Typed<'_, M> {
    fn encode(
        &self,
        encoder: &mut Encoder,
        route: &Route,
        flags: u16,
        out: &mut BytesMut,
    ) -> Result<usize, WireError> {
        const {
            assert!(
                std::mem::align_of::<Archived<M>>() <= BODY_ALIGN,
                "a user message's archived form may need at most 16-byte alignment"
            )
        };
        encoder.encode_user(route, M::ID, self.0, flags, out)
    }
}

/// Reads `message` as an `M`: checks that it is a user message with `M`'s id and
/// validates its body in place.
pub fn decode_user_message<M: UserMessage>(
    message: &ArchivedMessage,
) -> Result<&Archived<M>, RpcError> {
    match message {
        ArchivedMessage::Custom { tag, body } if tag.to_native() == M::ID => {
            validate::<M>(body.as_slice())
        }
        ArchivedMessage::Custom { tag, .. } => Err(RpcError::UnexpectedMessage {
            expected: M::ID,
            type_name: type_name::<M>(),
            got: format!("user message id {tag}"),
        }),
        other => Err(RpcError::UnexpectedMessage {
            expected: M::ID,
            type_name: type_name::<M>(),
            got: format!("a {} message", other.kind().name()),
        }),
    }
}

/// How many levels deep a user message is validated before it is refused: the root is
/// one, and each `Box`, `Vec` or out-of-line `String` one more (see
/// [`flint_wire::MAX_BODY_DEPTH`], why).
pub const MAX_USER_MESSAGE_DEPTH: usize = flint_wire::MAX_BODY_DEPTH;

/// Validates `body` as the archive of an `M` and reads it in place.
fn validate<M: UserMessage>(body: &[u8]) -> Result<&Archived<M>, RpcError> {
    flint_wire::access_body::<Archived<M>>(body).map_err(|error| RpcError::InvalidMessage {
        id: M::ID,
        type_name: type_name::<M>(),
        reason: error.to_string(),
    })
}

/// The reply to [`EndpointRef::ask_typed`]: the frame it came in, its body validated as
/// an `M` when it arrived.
pub struct TypedReply<M> {
    reply: Reply,
    _message: PhantomData<fn() -> M>,
}

impl<M: UserMessage> TypedReply<M> {
    pub(crate) fn new(reply: Reply) -> Result<Self, RpcError> {
        decode_user_message::<M>(reply.message())?;
        Ok(TypedReply {
            reply,
            _message: PhantomData,
        })
    }

    /// The reply, read in place in the receive buffer.
    ///
    /// The archive was validated on receipt; this crate has no `unsafe`, so each call
    /// validates it again (as [`Reply::message`] does): call it once and keep the
    /// reference.
    pub fn archived(&self) -> &Archived<M> {
        decode_user_message::<M>(self.reply.message())
            .expect("a typed reply is validated on receipt")
    }

    /// The frame, for zero-copy `Bytes` views of the reply's parts ([`Frame::bytes_of`]).
    pub fn frame(&self) -> &Frame {
        self.reply.frame()
    }

    /// The reply as an owned `M` (a copy).
    pub fn deserialize(&self) -> M
    where
        Archived<M>: Deserialize<M, HighDeserializer<rancor::Error>>,
    {
        rkyv::deserialize::<M, rancor::Error>(self.archived())
            .expect("a validated archive deserializes")
    }
}

impl<M> std::fmt::Debug for TypedReply<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedReply")
            .field("type", &type_name::<M>())
            .field("frame", self.reply.frame())
            .finish()
    }
}

impl EndpointRef {
    /// Sends `message` one-way, as [`EndpointRef::send`] does a catalogue message.
    ///
    /// The value is archived straight into the connection's outbox: sending allocates
    /// nothing once the outbox's buffer has grown to the traffic.
    pub fn send_typed<M: UserMessage>(&self, message: &M) -> Result<(), RpcError> {
        self.send_outgoing(&Typed(message))
    }

    /// Queues `message` one-way without telling the event loop, as
    /// [`EndpointRef::send_deferred`] does a catalogue message: it leaves with the next
    /// [`EndpointRef::flush`], together with everything queued before it.
    pub fn send_typed_deferred<M: UserMessage>(&self, message: &M) -> Result<(), RpcError> {
        self.send_deferred_outgoing(&Typed(message))
    }

    /// Asks `request` and waits for its reply, at most rpc.askTimeout. The reply is
    /// validated as a `Req::Reply` before it is returned; a reply of another type is
    /// [`RpcError::UnexpectedMessage`], one that does not validate
    /// [`RpcError::InvalidMessage`], and an error the endpoint answered (an id it does
    /// not know, a body that did not validate there) [`RpcError::Remote`].
    pub fn ask_typed<Req: Request>(
        &self,
        request: &Req,
    ) -> Result<TypedReply<Req::Reply>, RpcError> {
        self.ask_typed_timeout(request, self.env().settings().ask_timeout)
    }

    /// As [`EndpointRef::ask_typed`], waiting at most `timeout`.
    pub fn ask_typed_timeout<Req: Request>(
        &self,
        request: &Req,
        timeout: Duration,
    ) -> Result<TypedReply<Req::Reply>, RpcError> {
        TypedReply::new(self.ask_timeout_outgoing(&Typed(request), timeout)?)
    }
}

impl<'a> Incoming<'a> {
    /// The id of the user message this is; `None` for a catalogue message.
    pub fn user_message_id(&self) -> Option<u32> {
        match self.message() {
            ArchivedMessage::Custom { tag, .. } => Some(tag.to_native()),
            _ => None,
        }
    }

    /// The message as an `M`, validated and read in place; an error if it is another
    /// message or does not validate.
    pub fn typed<M: UserMessage>(&self) -> Result<&'a Archived<M>, RpcError> {
        decode_user_message::<M>(self.message())
    }

    /// Answers this ask with `reply`. A one-way message has nobody to answer: that is
    /// ignored.
    pub fn reply_typed<M: UserMessage>(&self, reply: &M) -> Result<(), RpcError> {
        if !self.is_ask() {
            return Ok(());
        }
        match self.reply_handle() {
            Some(handle) => handle.reply_typed(reply),
            None => Ok(()),
        }
    }
}

impl ReplyHandle {
    /// Sends `reply` as the answer.
    pub fn reply_typed<M: UserMessage>(self, reply: &M) -> Result<(), RpcError> {
        self.reply_outgoing(&Typed(reply))
    }
}

/// What a [`Service`] runs for one message type: validates the body, then calls the
/// handler. `Err` only when validation failed, before the handler ran.
type Handler<S> = Box<
    dyn FnMut(&mut S, &mut EndpointContext<'_>, &Incoming<'_>, &[u8]) -> Result<(), RpcError>
        + Send,
>;

struct Registered<S> {
    type_name: &'static str,
    handler: Handler<S>,
}

/// An [`Endpoint`] made of one handler per user message type, over a state `S` the
/// handlers share.
///
/// A message whose id no handler takes, one whose body does not validate as its id's
/// type, and a catalogue message are answered with an error (an ask) or dropped with a
/// rate-limited warning (a one-way message); the handlers never see them, and the
/// connection stays open.
///
/// ```
/// use flint_rpc::{rkyv, Request, Service, UserMessage};
///
/// #[derive(rkyv::Archive, rkyv::Serialize)]
/// #[rkyv(crate = flint_rpc::rkyv)]
/// struct Ping(u32);
/// impl UserMessage for Ping { const ID: u32 = 1; }
/// impl Request for Ping { type Reply = Ping; }
///
/// let service = Service::new(0u64)
///     .on_ask::<Ping>(|pings, ping| {
///         *pings += 1;
///         Ok(Ping(ping.0.to_native() + 1))
///     })?;
/// // Ping's id is taken now.
/// assert!(service.on_ask::<Ping>(|_, _| Ok(Ping(0))).is_err());
/// # Ok::<(), flint_rpc::RpcError>(())
/// ```
pub struct Service<S> {
    state: S,
    /// FxHash: ids are the sender's choice, but a service holds a handful, and a
    /// lookup per message is on the hot path.
    handlers: FxHashMap<u32, Registered<S>>,
    warnings: LogBudget,
}

impl<S: Send + 'static> Service<S> {
    /// A service with no handlers over `state`.
    pub fn new(state: S) -> Self {
        Service {
            state,
            handlers: FxHashMap::default(),
            warnings: LogBudget::default(),
        }
    }

    /// Answers each `Req` with what `handler` returns: the reply, or an error text the
    /// asker gets as [`RpcError::Remote`]. A `Req` sent one-way is handled too, and the
    /// reply dropped.
    ///
    /// Fails if a handler for `Req`'s id is registered already, naming both types.
    pub fn on_ask<Req: Request>(
        self,
        mut handler: impl FnMut(&mut S, &Archived<Req>) -> Result<Req::Reply, String> + Send + 'static,
    ) -> Result<Self, RpcError> {
        // A peer that reads nothing fills its outbox, and every reply to it fails.
        let mut warnings = LogBudget::default();
        self.on_message::<Req>(move |state, ctx, request, incoming| {
            let outcome = match handler(state, request) {
                Ok(reply) => incoming.reply_typed(&reply),
                Err(error) => incoming.reply_error(error),
            };
            if let Err(error) = outcome {
                // The reply could not be encoded or queued: tell the asker why if the
                // transport still can; else it times out or loses the connection.
                let _ = incoming.reply_error(error.to_string());
                crate::peer_warn!(
                    warnings,
                    ctx.now(),
                    sender = ?incoming.sender(),
                    "cannot answer user message id {} ({}): {error}",
                    Req::ID,
                    type_name::<Req>()
                );
            }
        })
    }

    /// Calls `handler` with each `M` sent one-way. An `M` asked instead is answered with
    /// an error saying it is one-way, and the handler does not see it: the asker learns
    /// at once that no answer will come, rather than at its timeout.
    ///
    /// Fails if a handler for `M`'s id is registered already, naming both types.
    pub fn on_one_way<M: UserMessage>(
        self,
        mut handler: impl FnMut(&mut S, &Archived<M>) + Send + 'static,
    ) -> Result<Self, RpcError> {
        self.on_message::<M>(move |state, _ctx, message, incoming| {
            if incoming.is_ask() {
                let _ = incoming.reply_error(format!(
                    "user message id {} ({}) is one-way: send it, do not ask it",
                    M::ID,
                    type_name::<M>()
                ));
                return;
            }
            handler(state, message);
        })
    }

    /// Calls `handler` with each `M`, one-way or asked, and the [`Incoming`] it came as:
    /// to answer later ([`Incoming::reply_handle`], [`ReplyHandle::reply_typed`]), to
    /// reach the sender, or to take `Bytes` views of the frame.
    ///
    /// Fails if a handler for `M`'s id is registered already, naming both types.
    pub fn on_message<M: UserMessage>(
        mut self,
        mut handler: impl FnMut(&mut S, &mut EndpointContext<'_>, &Archived<M>, &Incoming<'_>)
            + Send
            + 'static,
    ) -> Result<Self, RpcError> {
        if let Some(first) = self.handlers.get(&M::ID) {
            return Err(RpcError::DuplicateMessageId {
                id: M::ID,
                first: first.type_name,
                second: type_name::<M>(),
            });
        }
        let handler: Handler<S> = Box::new(move |state, ctx, incoming, body| {
            let message = validate::<M>(body)?;
            handler(state, ctx, message, incoming);
            Ok(())
        });
        self.handlers.insert(
            M::ID,
            Registered {
                type_name: type_name::<M>(),
                handler,
            },
        );
        Ok(self)
    }

    /// The state the handlers share.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// Refuses `incoming` for `error`: an error reply to an ask, a warning (within the
    /// budget) for a one-way message.
    fn refuse(&mut self, ctx: &EndpointContext<'_>, incoming: &Incoming<'_>, error: String) {
        if incoming.is_ask() {
            let _ = incoming.reply_error(error);
        } else {
            crate::peer_warn!(
                self.warnings,
                ctx.now(),
                sender = ?incoming.sender(),
                endpoint = ctx.name(),
                "dropping a message: {error}"
            );
        }
    }
}

impl<S: Send + 'static> Endpoint for Service<S> {
    fn receive(&mut self, ctx: &mut EndpointContext<'_>, incoming: Incoming<'_>) {
        let ArchivedMessage::Custom { tag, body } = incoming.message() else {
            let kind = incoming.message().kind().name();
            let error = format!(
                "endpoint {} takes user messages only, not a {kind} message",
                ctx.name()
            );
            return self.refuse(ctx, &incoming, error);
        };
        let id = tag.to_native();
        let Some(registered) = self.handlers.get_mut(&id) else {
            let error = format!(
                "endpoint {} has no handler for user message id {id}",
                ctx.name()
            );
            return self.refuse(ctx, &incoming, error);
        };
        if let Err(error) = (registered.handler)(&mut self.state, ctx, &incoming, body.as_slice()) {
            self.refuse(ctx, &incoming, error.to_string());
        }
    }
}
