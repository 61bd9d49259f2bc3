//! The incremental frame decoder.

use std::io::{self, Read};

use crate::check_error::CheckError;
use bytes::{Bytes, BytesMut};

use crate::error::{WireError, MAX_SIZE_KEY};
use crate::header::{
    frame_crc, padded_frame_len, FrameHeader, CRC_START, FRAME_ALIGN, HEADER_LEN,
    MAX_FRAME_PAYLOAD, TAG_LEN,
};
use crate::kind::MessageKind;
use crate::message::ArchivedEnvelope;
use crate::read_uninit::ReadUninit;

/// Smallest and largest number of bytes asked of a reader in one [`FrameDecoder::read_from`].
const MIN_READ: usize = 4 * 1024;
const MAX_READ: usize = 256 * 1024;
/// The most room reserved for a frame on the word of its header alone.
const PREALLOCATE_MAX: usize = 256 * 1024;

/// One whole frame, its payload a view of the decoder's receive buffer.
#[derive(Debug, Clone)]
pub struct Frame {
    header: FrameHeader,
    payload: Bytes,
}

impl Frame {
    /// The checked header.
    pub fn header(&self) -> &FrameHeader {
        &self.header
    }

    /// The message kind the header announces.
    pub fn kind(&self) -> MessageKind {
        self.header.kind
    }

    /// The payload bytes (the archived envelope), without padding.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// Validates the payload (bytecheck) and returns the archived envelope, read in place.
    ///
    /// Fails if the bytes are not a valid archive or if the archived message's kind is
    /// not the one the header announced.
    pub fn envelope(&self) -> Result<&ArchivedEnvelope, WireError> {
        validate_envelope(self.header.kind, &self.payload)
    }

    /// A `Bytes` view of `part`, which must lie inside this frame's payload (for example an
    /// archived blob such as a task's serialized form). No bytes are copied.
    ///
    /// # Panics
    ///
    /// If `part` is not inside the payload; parts borrowed from [`Frame::envelope`] are.
    pub fn bytes_of(&self, part: &[u8]) -> Bytes {
        if part.is_empty() {
            return Bytes::new();
        }
        self.payload.slice_ref(part)
    }
}

/// Validates `payload` as an archived envelope whose message is of kind `kind`.
///
/// This is the check every untrusted payload goes through; the fuzz target
/// `validate` drives it directly.
pub fn validate_envelope(
    kind: MessageKind,
    payload: &[u8],
) -> Result<&ArchivedEnvelope, WireError> {
    // The low-level validator: no archived type here uses shared pointers, so the
    // bookkeeping of the high-level one buys nothing. CheckError says which check failed
    // and where, in every build.
    let envelope =
        rkyv::api::low::access::<ArchivedEnvelope, CheckError>(payload).map_err(|error| {
            WireError::InvalidPayload {
                kind: kind.name(),
                // Told to the peer (Refused): offsets into its payload, not our addresses.
                reason: error.relative_to(payload.as_ptr()).to_string(),
            }
        })?;
    let found = envelope.message.kind();
    if found != kind {
        return Err(WireError::KindMismatch {
            header: kind.name(),
            payload: found.name(),
        });
    }
    Ok(envelope)
}

/// Opens sealed frames ([`crate::FLAG_SEALED`]) in place for a [`FrameDecoder`] whose
/// connection encrypts ([`FrameDecoder::set_opener`]). The cipher is the transport's
/// (flint-rpc's is AES-256-GCM with per-direction session keys and the frames' sequence
/// numbers as nonces); this crate only lays the frames out and hands each one over.
pub trait FrameOpener: Send + std::fmt::Debug {
    /// Checks and opens one whole sealed frame in place. `frame` is all of it: the header
    /// (`header`, parsed; the associated data), then the payload and padding (ciphertext,
    /// to be replaced by the plaintext), then the [`TAG_LEN`]-byte tag. Frames come in
    /// stream order, each once. An error ([`WireError::OutOfSequence`],
    /// [`WireError::Forged`]) closes the decoder.
    fn open(&mut self, header: &FrameHeader, frame: &mut [u8]) -> Result<(), WireError>;
}

/// Counters of a decoder's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Whole frames yielded.
    pub frames: u64,
    /// Bytes taken in.
    pub bytes: u64,
    /// Payloads that were not at an aligned address and were copied to one. Frames are
    /// padded so that this stays zero with any allocator that aligns to 16 bytes.
    pub realigned: u64,
}

/// Turns a byte stream, arriving in any chunking, into whole checked [`Frame`]s.
///
/// A header is checked, its announced payload size against the limit included, by the
/// first [`FrameDecoder::next_frame`] or [`FrameDecoder::read_from`] that finds its 16
/// bytes in, before either waits for or reads more of the frame: what the payload may
/// already have in the buffer then is what came with the header (at most one read, or
/// what was fed). After any error the decoder is closed: it takes no more bytes and
/// yields no more frames.
///
/// Any interleaving of `feed`, `read_from` and `next_frame` yields the same frames and
/// the same error as feeding the whole stream at once.
///
/// ```
/// use bytes::BytesMut;
/// use flint_wire::{Encoder, FrameDecoder, Message, Route};
///
/// let mut out = BytesMut::new();
/// let route = Route::Reply { request_id: 7 };
/// Encoder::new(1024).encode(&route, &Message::Ack { ok: true }, &mut out).unwrap();
///
/// let mut decoder = FrameDecoder::new(1024);
/// for byte in out.iter() {
///     decoder.feed(std::slice::from_ref(byte)).unwrap();
/// }
/// let frame = decoder.next_frame().unwrap().expect("one whole frame");
/// assert!(decoder.next_frame().unwrap().is_none());
/// # let _ = frame;
/// ```
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_payload: usize,
    /// What sets `max_payload`, for errors.
    limit_name: &'static str,
    pending: Option<FrameHeader>,
    failure: Option<WireError>,
    read_size: usize,
    /// The bounds of `read_size`: [`MIN_READ`] and [`MAX_READ`] but for fuzzing.
    min_read: usize,
    max_read: usize,
    /// Whether the last read filled less than the room it offered.
    last_read_short: bool,
    stats: DecoderStats,
    /// Opens sealed frames, once the connection encrypts: then every frame must be sealed,
    /// and none may be before.
    opener: Option<Box<dyn FrameOpener>>,
}

impl FrameDecoder {
    /// A decoder that refuses payloads above `max_payload` bytes (`rpc.message.maxSize`),
    /// and above [`MAX_FRAME_PAYLOAD`] whatever `max_payload` says.
    pub fn new(max_payload: usize) -> Self {
        FrameDecoder {
            buf: BytesMut::new(),
            max_payload: max_payload.min(MAX_FRAME_PAYLOAD),
            limit_name: MAX_SIZE_KEY,
            pending: None,
            failure: None,
            read_size: MIN_READ,
            min_read: MIN_READ,
            max_read: MAX_READ,
            last_read_short: false,
            stats: DecoderStats::default(),
            opener: None,
        }
    }

    /// From the next header on, every frame must be sealed ([`crate::FLAG_SEALED`]) and
    /// is opened in place by `opener` before it is checked further and yielded; a frame
    /// in clear is [`WireError::Unsealed`]. Until this is called a sealed frame is
    /// [`WireError::UnexpectedSeal`]. Both are found from the header alone. A transport
    /// calls this between two frames, as its handshake ends.
    ///
    /// Sealed frames keep the layout of the others (the tag comes after the padding, and
    /// is 16 bytes), so their payloads are read in place and aligned all the same.
    pub fn set_opener(&mut self, opener: Box<dyn FrameOpener>) {
        self.opener = Some(opener);
    }

    /// Whether frames must be sealed ([`FrameDecoder::set_opener`]).
    pub fn is_opening(&self) -> bool {
        self.opener.is_some()
    }

    /// The payload limit in bytes (at most [`MAX_FRAME_PAYLOAD`]).
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Sets the payload limit for the headers not checked yet (one already pending keeps
    /// the limit it passed), and the name size errors give it.
    ///
    /// A transport can hold a peer it does not trust yet to small frames: flint-rpc allows
    /// only handshake-sized frames until the peer has authenticated, so that a stranger
    /// cannot make it buffer frames of up to `rpc.message.maxSize`.
    ///
    /// ```
    /// use flint_wire::{FrameDecoder, WireError};
    ///
    /// let mut decoder = FrameDecoder::new(128 << 20);
    /// decoder.set_max_payload(256, "the handshake frame limit");
    /// let mut header = [0u8; 16];
    /// header[..4].copy_from_slice(b"FLNT");
    /// header[8] = flint_wire::PROTOCOL_VERSION;
    /// header[9] = flint_wire::MessageKind::AuthChallenge as u8;
    /// header[12..].copy_from_slice(&1024u32.to_le_bytes());
    /// decoder.feed(&header).unwrap();
    /// let error = decoder.next_frame().unwrap_err();
    /// assert!(matches!(error, WireError::FrameTooLarge { limit: 256, .. }));
    /// assert!(error.to_string().contains("exceeds the handshake frame limit (256 bytes)"));
    /// ```
    pub fn set_max_payload(&mut self, max_payload: usize, limit_name: &'static str) {
        self.max_payload = max_payload.min(MAX_FRAME_PAYLOAD);
        self.limit_name = limit_name;
    }

    /// Counters of the work done so far.
    pub fn stats(&self) -> DecoderStats {
        self.stats
    }

    /// Whether the last read ([`FrameDecoder::read_from`] or
    /// [`FrameDecoder::read_uninit_from`]) took fewer bytes than it offered room for; one
    /// that failed took none.
    ///
    /// A stream socket's `recv` returns less than asked only when it held no more at that
    /// moment, so a reader woken by edge-triggered readiness (mio's, on Linux) can wait for
    /// the next event after a short read instead of reading once more only to be told that
    /// the socket would block: data arriving after the read raises a new event. Netty and
    /// Tokio stop reading on a short read for the same reason; it saves a system call per
    /// wake-up on a connection that carries one small message at a time.
    ///
    /// ```
    /// use flint_wire::FrameDecoder;
    ///
    /// let mut decoder = FrameDecoder::new(1024);
    /// let mut socket: &[u8] = &[1, 2, 3];
    /// assert_eq!(decoder.read_from(&mut socket).unwrap(), 3);
    /// assert!(decoder.last_read_was_short());
    /// ```
    pub fn last_read_was_short(&self) -> bool {
        self.last_read_short
    }

    /// The whole length (header and padding included) of the frame whose header was
    /// checked and whose bytes are still to come, if one is: what the receive buffer will
    /// grow to hold before it yields that frame. A transport that bounds the memory of
    /// all its connections together reserves this before reading on.
    ///
    /// ```
    /// use flint_wire::FrameDecoder;
    ///
    /// let mut decoder = FrameDecoder::new(1 << 20);
    /// let mut header = [0u8; 16];
    /// header[..4].copy_from_slice(b"FLNT");
    /// header[8] = flint_wire::PROTOCOL_VERSION;
    /// header[9] = flint_wire::MessageKind::LaunchTask as u8;
    /// header[12..].copy_from_slice(&1000u32.to_le_bytes());
    /// decoder.feed(&header).unwrap();
    /// assert_eq!(decoder.pending_frame_len(), None, "not checked before next_frame");
    /// assert!(decoder.next_frame().unwrap().is_none());
    /// assert_eq!(decoder.pending_frame_len(), Some(16 + 1008));
    /// ```
    pub fn pending_frame_len(&self) -> Option<usize> {
        self.pending.map(|header| header.frame_len())
    }

    /// Makes room, in one allocation, for all of the pending frame and one read beyond
    /// it, for a caller that has accounted for that memory (see
    /// [`FrameDecoder::pending_frame_len`]). Without it, the buffer of a large frame grows
    /// by doubling as the bytes arrive, copying what is in at each step and, at the last,
    /// holding half as much again as the frame; that is the right choice for a frame whose
    /// bytes may never come, the wrong one for a frame the caller has decided to take.
    ///
    /// ```
    /// use flint_wire::FrameDecoder;
    ///
    /// let mut decoder = FrameDecoder::new(16 << 20);
    /// let mut header = [0u8; 16];
    /// header[..4].copy_from_slice(b"FLNT");
    /// header[8] = flint_wire::PROTOCOL_VERSION;
    /// header[9] = flint_wire::MessageKind::LaunchTask as u8;
    /// header[12..].copy_from_slice(&(8u32 << 20).to_le_bytes());
    /// decoder.feed(&header).unwrap();
    /// assert!(decoder.next_frame().unwrap().is_none());
    /// decoder.preallocate_pending_frame();
    /// assert!(decoder.buffer_capacity() >= decoder.pending_frame_len().unwrap());
    /// ```
    pub fn preallocate_pending_frame(&mut self) {
        let Some(header) = self.pending else {
            return;
        };
        let room = header.frame_len().saturating_add(self.max_read);
        if self.buf.capacity() >= room {
            return;
        }
        let mut grown = BytesMut::with_capacity(room);
        grown.extend_from_slice(&self.buf);
        self.buf = grown;
    }

    /// Bytes received but not yet yielded as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Bytes the receive buffer holds room for (its memory, for accounting).
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The error that closed this decoder, if one did.
    pub fn failure(&self) -> Option<&WireError> {
        self.failure.as_ref()
    }

    fn closed(&self) -> Result<(), WireError> {
        match &self.failure {
            Some(error) => Err(WireError::Closed(Box::new(error.clone()))),
            None => Ok(()),
        }
    }

    fn fail(&mut self, error: WireError) -> WireError {
        self.buf = BytesMut::new();
        self.pending = None;
        self.failure = Some(error.clone());
        error
    }

    /// Takes in bytes (copying them into the receive buffer).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        self.closed()?;
        self.buf.extend_from_slice(bytes);
        self.stats.bytes += bytes.len() as u64;
        Ok(())
    }

    /// Reads once from `reader` straight into the receive buffer and returns how many
    /// bytes came (0 at end of stream). The size of a read adapts: it doubles while reads
    /// fill it and falls back when they do not, between 4 KiB and 256 KiB; while a large
    /// frame is pending it asks for as much of the rest as one read may take.
    ///
    /// A header already buffered in full is checked before anything is read, so at most
    /// one read of a frame's bytes arrives before its header is checked. If it fails, the
    /// decoder closes and this returns the [`WireError`] as an `InvalidData` error; a
    /// closed decoder reads nothing and returns an `InvalidData` error.
    ///
    /// Reads never take the receive buffer beyond [`FrameDecoder::buffer_bound`] (a frame at
    /// the limit plus one read). A caller that keeps reading without taking frames with
    /// [`FrameDecoder::next_frame`] can reach it: then nothing is read and this returns an
    /// `InvalidInput` error, and reading works again once the waiting frames are taken.
    /// Calling `next_frame` until it returns `None` after each read, as an event loop does,
    /// never reaches it.
    ///
    /// `Read::read` wants initialized memory, so the room offered is zeroed first; a
    /// socket is better read with [`FrameDecoder::read_uninit_from`], which skips that.
    pub fn read_from<R: Read + ?Sized>(&mut self, reader: &mut R) -> io::Result<usize> {
        let want = self.prepare_read()?;
        let start = self.buf.len();
        self.reserve_within_bound(want);
        self.buf.resize(start + want, 0);
        let result = reader.read(&mut self.buf[start..]);
        let got = result.as_ref().map_or(0, |&n| n.min(want));
        self.buf.truncate(start + got);
        self.account_read(want, got);
        result
    }

    /// As [`FrameDecoder::read_from`] (same checks, same bounds), from a source that
    /// writes into uninitialized memory (a socket's `recv`), so that the room offered to
    /// the read is not zeroed first.
    pub fn read_uninit_from<R: ReadUninit + ?Sized>(
        &mut self,
        reader: &mut R,
    ) -> io::Result<usize> {
        let want = self.prepare_read()?;
        let start = self.buf.len();
        self.reserve_within_bound(want);
        let room = &mut self.buf.spare_capacity_mut()[..want];
        let result = reader.read_uninit(room);
        let got = result.as_ref().map_or(0, |&n| n.min(want));
        // SAFETY: `room` is the buffer's spare capacity from `start` on, and `ReadUninit`
        // promises that the first `got` bytes of it were initialized (`got` is at most
        // `want`, the length of `room`, which `reserve` made room for).
        #[allow(unsafe_code)]
        unsafe {
            self.buf.set_len(start + got)
        };
        self.account_read(want, got);
        result
    }

    /// Makes room for `want` more bytes (which `prepare_read` keeps within
    /// [`FrameDecoder::buffer_bound`]). Small buffers grow as `BytesMut` grows them; a
    /// large frame's, which a `Vec` would double past the bound (a 128 MiB frame into 256
    /// MiB), grows the same way but only up to the bound.
    fn reserve_within_bound(&mut self, want: usize) {
        let needed = self.buf.len() + want;
        if needed <= PREALLOCATE_MAX || self.buf.try_reclaim(want) {
            self.buf.reserve(want);
            return;
        }
        let capacity = needed
            .max(self.buf.capacity().saturating_mul(2))
            .min(self.buffer_bound().max(needed));
        let mut grown = BytesMut::with_capacity(capacity);
        grown.extend_from_slice(&self.buf);
        self.buf = grown;
    }

    /// The checks before a read, and the bytes to ask of it: the adaptive read size, or
    /// more to take the rest of a large pending frame in as few reads as allowed, never
    /// beyond [`FrameDecoder::buffer_bound`].
    fn prepare_read(&mut self) -> io::Result<usize> {
        self.closed()
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        // Only a caller that read without taking frames gets here with a whole header
        // unparsed; after `next_frame` returned `None` the header is pending or incomplete.
        if self.pending.is_none() {
            self.take_header()
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        }
        let want = match self.pending {
            // The buffer may already hold all of a pending frame and more if frames were
            // not taken between reads.
            Some(header) => {
                let missing = header.frame_len().saturating_sub(self.buf.len());
                self.read_size.max(missing.min(self.max_read))
            }
            None => self.read_size,
        };
        let want = want.min(self.buffer_bound().saturating_sub(self.buf.len()));
        if want == 0 {
            // A read into no room would return 0, which callers take for end of stream.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "receive buffer full ({} bytes, whole frames waiting): take frames with \
                     next_frame before reading more",
                    self.buf.len()
                ),
            ));
        }
        Ok(want)
    }

    /// Counts a read of `got` bytes out of `want` asked, and adapts the read size.
    fn account_read(&mut self, want: usize, got: usize) {
        self.stats.bytes += got as u64;
        self.last_read_short = got < want;
        self.read_size = if got == want {
            (want * 2).min(self.max_read)
        } else {
            (self.read_size / 2).max(self.min_read)
        };
    }

    /// The most bytes [`FrameDecoder::read_from`] lets the receive buffer hold: one frame
    /// with a payload at the limit (or the pending frame, if a lowered limit left it
    /// larger), plus one read of at most 256 KiB. ([`FrameDecoder::feed`] takes whatever
    /// it is given.)
    pub fn buffer_bound(&self) -> usize {
        let tag = if self.opener.is_some() { TAG_LEN } else { 0 };
        let frame = padded_frame_len(self.max_payload) + tag;
        let pending = self.pending.map_or(0, |header| header.frame_len());
        frame.max(pending).saturating_add(self.max_read)
    }

    /// Reads of `min..=max` bytes instead of 4 KiB to 256 KiB, so that a fuzz input of a
    /// few KiB can reach the buffer's bound. Not part of the API.
    #[doc(hidden)]
    pub fn with_read_sizes(mut self, min: usize, max: usize) -> Self {
        self.min_read = min.max(1);
        self.max_read = max.max(self.min_read);
        self.read_size = self.min_read;
        self
    }

    /// Signals the end of the stream: an error if it ended inside a frame.
    pub fn finish(&mut self) -> Result<(), WireError> {
        self.closed()?;
        if self.buf.is_empty() {
            Ok(())
        } else {
            let buffered = self.buf.len();
            Err(self.fail(WireError::Truncated { buffered }))
        }
    }

    /// The next whole frame, `None` if more bytes are needed, or the error that closed the
    /// decoder.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        self.closed()?;
        let header = match self.pending {
            Some(header) => header,
            None => match self.take_header()? {
                Some(header) => header,
                None => return Ok(None),
            },
        };
        let frame_len = header.frame_len();
        if self.buf.len() < frame_len {
            return Ok(None);
        }
        self.pending = None;
        let mut frame = self.buf.split_to(frame_len);
        if frame_len > self.max_read {
            self.detach_rest();
        }
        let payload_end = HEADER_LEN + header.payload_len as usize;
        let sealed = header.is_sealed();
        if sealed {
            // Opened in place, where it will be read: the payload keeps its alignment.
            let opened = match self.opener.as_mut() {
                Some(opener) => opener.open(&header, &mut frame),
                // `take_header` refused it already; kept for the decoder's own sake.
                None => Err(WireError::UnexpectedSeal {
                    kind: header.kind.name(),
                }),
            };
            if let Err(error) = opened {
                return Err(self.fail(error));
            }
        }
        let padding_end = padded_frame_len(header.payload_len as usize);
        if frame[payload_end..padding_end]
            .iter()
            .any(|&byte| byte != 0)
        {
            return Err(self.fail(WireError::BadPadding(header.kind.name())));
        }
        // A sealed frame's tag covers more than a CRC would, and it has none.
        if !sealed {
            let computed = frame_crc(&frame[CRC_START..payload_end]);
            if computed != header.crc {
                return Err(self.fail(WireError::ChecksumMismatch {
                    expected: header.crc,
                    computed,
                }));
            }
        }
        let frame = frame.freeze();
        let mut payload = frame.slice(HEADER_LEN..payload_end);
        if payload.as_ptr() as usize % FRAME_ALIGN != 0 {
            payload = realign(&payload);
            self.stats.realigned += 1;
        }
        self.stats.frames += 1;
        Ok(Some(Frame { header, payload }))
    }
}

impl FrameDecoder {
    /// Moves the bytes after a large frame to a buffer of their own. The large frame's
    /// allocation was grown for it, and its views keep all of it alive: a small frame
    /// split from the same allocation, kept by its reader (a task's result), would keep
    /// it alive too, however little it holds itself.
    #[cold]
    fn detach_rest(&mut self) {
        let mut rest = BytesMut::with_capacity(self.buf.len().max(self.min_read));
        rest.extend_from_slice(&self.buf);
        self.buf = rest;
    }

    /// Parses and checks the header at the front of the buffer, if all 16 bytes of it are
    /// in, and makes it the pending one. Call only with no header pending.
    #[inline]
    fn take_header(&mut self) -> Result<Option<FrameHeader>, WireError> {
        let Some(prefix) = self.buf.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let header = match FrameHeader::parse(prefix, self.max_payload) {
            Ok(header) => header,
            Err(WireError::FrameTooLarge {
                announced, limit, ..
            }) => {
                let limit_name = self.limit_name;
                return Err(self.fail(WireError::FrameTooLarge {
                    announced,
                    limit,
                    limit_name,
                }));
            }
            Err(error) => return Err(self.fail(error)),
        };
        // A connection seals all of its frames after the handshake, or none.
        if header.is_sealed() != self.opener.is_some() {
            let kind = header.kind.name();
            return Err(self.fail(if header.is_sealed() {
                WireError::UnexpectedSeal { kind }
            } else {
                WireError::Unsealed { kind }
            }));
        }
        // Room for the frame, up to a cap: beyond it the buffer grows with what actually
        // arrives, so a peer that announces a large frame and then trickles costs only
        // what it sent.
        let want = header.frame_len().min(PREALLOCATE_MAX);
        if self.buf.capacity() < want {
            self.buf.reserve(want - self.buf.len());
        }
        self.pending = Some(header);
        Ok(Some(header))
    }
}

/// Copies a payload to a [`FRAME_ALIGN`]-aligned allocation. Only reached when the
/// allocator hands out buffers at addresses that are not multiples of 16.
fn realign(payload: &[u8]) -> Bytes {
    let mut aligned = rkyv::util::AlignedVec::<FRAME_ALIGN>::with_capacity(payload.len());
    aligned.extend_from_slice(payload);
    Bytes::from_owner(aligned)
}
