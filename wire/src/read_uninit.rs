//! Reading into memory that was never initialized, so that a receive buffer is not
//! zeroed before every read.
//!
//! [`crate::FrameDecoder::read_from`] takes any [`std::io::Read`], whose `read` wants
//! initialized memory: the decoder zeroes the room it offers before each read, up to
//! 256 KiB, most of which a read on a busy connection does not fill. On the event
//! loop's hot path that zeroing measured about a twentieth of all instructions on both
//! the driver and an executor, and it pushes the frames being decoded out of the cache.
//! [`crate::FrameDecoder::read_uninit_from`] takes a [`ReadUninit`] instead: a source,
//! such as a socket's `recv(2)`, that only writes into the room it is given.

use std::io;
use std::mem::MaybeUninit;

/// A source of bytes that writes into uninitialized memory.
///
/// # Safety
///
/// An implementation that returns `Ok(n)` must have initialized the first `n` bytes of
/// `buf`, and `n` must not exceed `buf.len()`. The decoder treats those bytes as
/// initialized on that promise alone.
pub unsafe trait ReadUninit {
    /// Reads at most `buf.len()` bytes into `buf`; returns how many came (0 at the end
    /// of the stream), like [`std::io::Read::read`].
    fn read_uninit(&mut self, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize>;
}

// SAFETY: the first `n` bytes of `buf` are written one by one through
// `MaybeUninit::write` before `n` is returned, and `n <= buf.len()`.
unsafe impl ReadUninit for &[u8] {
    fn read_uninit(&mut self, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        let n = self.len().min(buf.len());
        for (slot, &byte) in buf.iter_mut().zip(&self[..n]) {
            slot.write(byte);
        }
        *self = &self[n..];
        Ok(n)
    }
}

// SAFETY: `socket2::Socket::recv` hands the buffer to recv(2), which writes the bytes
// it returns the count of into the front of the buffer and never reads it or writes
// uninitialized bytes (socket2 documents that promise on `recv`); the count is at most
// the buffer's length, as recv(2) is told that length.
#[cfg(feature = "socket2")]
unsafe impl ReadUninit for socket2::SockRef<'_> {
    fn read_uninit(&mut self, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        self.recv(buf)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::fuzzing::sample_frames;
    use crate::{FrameDecoder, MessageKind};

    /// Reads `stream` into a decoder through `read_uninit_from`, `chunks[i]` bytes at a
    /// time (cycling), decoding after every `decode_every`-th read, and returns the
    /// frames' bytes.
    fn read_in_chunks(stream: &[u8], chunks: &[usize], decode_every: usize) -> Vec<Vec<u8>> {
        let mut decoder = FrameDecoder::new(1 << 20);
        let mut frames = Vec::new();
        let mut at = 0;
        let mut reads = 0;
        while at < stream.len() {
            let chunk = chunks[reads % chunks.len()].max(1);
            let mut source = &stream[at..stream.len().min(at + chunk)];
            let got = decoder.read_uninit_from(&mut source).unwrap();
            assert!(got > 0 && got <= chunk);
            at += got;
            reads += 1;
            if reads % decode_every == 0 || at == stream.len() {
                while let Some(frame) = decoder.next_frame().unwrap() {
                    assert_eq!(frame.payload().as_ptr() as usize % crate::FRAME_ALIGN, 0);
                    frames.push(frame);
                }
            }
        }
        decoder.finish().unwrap();
        assert_eq!(
            frames.iter().map(|f| f.kind()).collect::<Vec<_>>(),
            MessageKind::ALL
        );
        frames.iter().map(|f| f.payload().to_vec()).collect()
    }

    fn payloads() -> (Vec<u8>, Vec<Vec<u8>>) {
        let frames = sample_frames();
        let stream = frames.iter().flat_map(|(_, f)| f.to_vec()).collect();
        let payloads = frames
            .iter()
            .map(|(_, f)| {
                let mut decoder = FrameDecoder::new(1 << 20);
                decoder.feed(f).unwrap();
                decoder.next_frame().unwrap().unwrap().payload().to_vec()
            })
            .collect();
        (stream, payloads)
    }

    // Small enough for miri: `cargo +nightly miri test -p flint-wire read_uninit`.
    #[test]
    fn reads_into_uninitialized_room_yield_the_bytes_sent() {
        let (stream, expected) = payloads();
        assert_eq!(read_in_chunks(&stream, &[7, 1, 300, 64], 1), expected);
        // Several reads before the frames are taken: the pending frame's rest is asked
        // for while more than it is already buffered.
        assert_eq!(read_in_chunks(&stream, &[13, 5000], 3), expected);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_chunking_and_decode_rhythm_yields_the_bytes_sent(
            chunks in proptest::collection::vec(1usize..9000, 1..16),
            decode_every in 1usize..6,
        ) {
            let (stream, expected) = payloads();
            prop_assert_eq!(read_in_chunks(&stream, &chunks, decode_every), expected);
        }
    }
}
