//! Frames made in one call, for tests that write raw bytes to a peer or hand a decoded
//! frame to the code under test.

use bytes::BytesMut;
use flint_wire::{Encoder, Frame, FrameDecoder, Message, Route};

/// `message` to `route` as one frame's bytes on the wire. No limit applies but the
/// wire's own.
pub fn frame_bytes(route: &Route, message: &Message) -> BytesMut {
    let mut out = BytesMut::new();
    Encoder::new(usize::MAX)
        .encode(route, message, &mut out)
        .unwrap();
    out
}

/// `message` to `route` as a decoded frame, as a receiver holds it: its archived message
/// is read in place, and its blobs are views of it.
pub fn frame_of(route: &Route, message: &Message) -> Frame {
    let mut decoder = FrameDecoder::new(usize::MAX);
    decoder.feed(&frame_bytes(route, message)).unwrap();
    decoder.next_frame().unwrap().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_of_a_message_carries_it() {
        let route = Route::OneWay {
            endpoint: "sink".into(),
        };
        let message = Message::Custom {
            tag: 7,
            body: bytes::Bytes::from_static(b"body"),
        };
        let frame = frame_of(&route, &message);
        assert_eq!(frame.kind(), message.kind());
        let flint_wire::ArchivedMessage::Custom { tag, body } = &frame.envelope().unwrap().message
        else {
            panic!("not the custom message")
        };
        assert_eq!((tag.to_native(), body.as_slice()), (7, &b"body"[..]));
        assert!(frame_bytes(&route, &message).len() > frame.payload().len());
    }
}
