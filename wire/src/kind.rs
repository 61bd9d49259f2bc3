//! Message kinds: the header's kind byte, one per [`Message`] variant.

use crate::message::{ArchivedMessage, Message};

macro_rules! message_kinds {
    ($($variant:ident = $code:literal),* $(,)?) => {
        /// The kind byte of a frame header: which [`Message`] variant the payload holds.
        ///
        /// Codes are part of the protocol: they never change meaning within a version.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum MessageKind {
            $(
                #[doc = concat!("Code ", stringify!($code), ": [`Message::", stringify!($variant), "`].")]
                $variant = $code,
            )*
        }

        impl MessageKind {
            /// Every kind, in code order.
            pub const ALL: &'static [MessageKind] = &[$(MessageKind::$variant),*];

            /// The kind with this code, if the protocol defines one.
            pub fn from_code(code: u8) -> Option<Self> {
                match code {
                    $($code => Some(MessageKind::$variant),)*
                    _ => None,
                }
            }

            /// The kind's name, as messages and logs print it.
            pub fn name(self) -> &'static str {
                match self {
                    $(MessageKind::$variant => stringify!($variant),)*
                }
            }
        }

        impl Message {
            /// This message's kind.
            pub fn kind(&self) -> MessageKind {
                match self {
                    $(Message::$variant { .. } => MessageKind::$variant,)*
                }
            }
        }

        impl ArchivedMessage {
            /// This archived message's kind.
            pub fn kind(&self) -> MessageKind {
                match self {
                    $(ArchivedMessage::$variant { .. } => MessageKind::$variant,)*
                }
            }
        }
    };
}

message_kinds! {
    RegisterExecutor = 1,
    RegisteredExecutor = 2,
    RegisterExecutorFailed = 3,
    LaunchTask = 4,
    StatusUpdate = 5,
    KillTask = 6,
    KillExecutorsOnHost = 7,
    ReviveOffers = 8,
    StopDriver = 9,
    StopExecutors = 10,
    StopExecutor = 11,
    RemoveExecutor = 12,
    RemoveWorker = 13,
    Shutdown = 14,
    Heartbeat = 20,
    HeartbeatResponse = 21,
    FetchBlockChunk = 30,
    BlockChunk = 31,
    RemoveBlock = 32,
    Ack = 40,
    Empty = 41,
    Custom = 50,
    AuthChallenge = 60,
    AuthResponse = 61,
    AuthProof = 62,
    Refused = 63,
    GetMapOutputStatuses = 70,
    MapOutputStatuses = 71,
    FetchShuffleBlock = 72,
    ShuffleBlock = 73,
    RemoveShuffle = 74,
    GetBroadcastInfo = 80,
    BroadcastInfo = 81,
    FetchBroadcastPiece = 82,
    BroadcastPiece = 83,
    BroadcastPieceStored = 84,
    UnpersistBroadcast = 85,
    GetBlockServerStats = 86,
    BlockServerStats = 87,
    LaunchTasks = 90,
    StatusUpdates = 91,
}

impl std::fmt::Display for MessageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
