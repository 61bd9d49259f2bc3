//! Pieces of a block as they arrive (fetched in chunks cut anywhere) turned into pieces
//! of whole records, which a task reads with [`flint_wire::records::Records`].

use bytes::{Bytes, BytesMut};
use flint_wire::records::{MalformedRecords, LENGTH_PREFIX};

/// Reassembles a block's records from pieces cut at any byte.
///
/// A piece's whole records are handed on as a view of it; only a record cut between two
/// pieces is copied, into a buffer of its own. Chunks of a fetched block are as large as a
/// message allows, so at most one record a chunk is copied.
///
/// The block's size is known before its first piece (the map status announces it), and
/// the pieces come from another executor: a record whose length prefix says it ends past
/// the block's end, or a piece past that end, is refused with [`MalformedRecords`]
/// before anything is reserved for it. A cut record's buffer never holds more than the
/// block has room for.
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// use flint_executor::shuffle::RecordPieces;
/// use flint_wire::records::{put_record, Records};
///
/// let mut block = BytesMut::new();
/// put_record(&mut block, b"hello");
/// put_record(&mut block, b"world");
/// let block = block.freeze();
///
/// let mut pieces = RecordPieces::new(block.len() as u64);
/// let mut whole = Vec::new();
/// pieces.push(block.slice(..12), &mut whole)?; // "hello" and 3 bytes of the next
/// pieces.push(block.slice(12..), &mut whole)?;
/// pieces.finish()?;
/// let records: Vec<&[u8]> = whole.iter().flat_map(|p| Records::new(p)).collect::<Result<_, _>>()?;
/// assert_eq!(records, [&b"hello"[..], &b"world"[..]]);
/// # Ok::<(), flint_wire::records::MalformedRecords>(())
/// ```
#[derive(Debug)]
pub struct RecordPieces {
    /// The start of a record cut at the end of the last piece.
    carry: BytesMut,
    /// Where in the block the carried record starts.
    carry_at: usize,
    /// Bytes of the block seen.
    seen: usize,
    /// The block's announced size.
    size: usize,
}

impl RecordPieces {
    /// Nothing seen yet of a block of `size` bytes.
    pub fn new(size: u64) -> Self {
        RecordPieces {
            carry: BytesMut::new(),
            carry_at: 0,
            seen: 0,
            // A block larger than the address space cannot arrive whole anyway.
            size: usize::try_from(size).unwrap_or(usize::MAX),
        }
    }

    /// Takes the next piece of the block, and pushes the pieces of whole records it
    /// completes onto `out`. A piece that goes past the block's end, or a record that
    /// would, is an error.
    pub fn push(&mut self, mut piece: Bytes, out: &mut Vec<Bytes>) -> Result<(), MalformedRecords> {
        let start = self.seen;
        let end = start
            .checked_add(piece.len())
            .filter(|&end| end <= self.size)
            .ok_or(MalformedRecords {
                offset: if self.carry.is_empty() {
                    start
                } else {
                    self.carry_at
                },
                len: self.size,
            })?;
        self.seen = end;
        if !self.carry.is_empty() {
            let taken = self.complete_carry(&piece)?;
            piece = piece.slice(taken..);
            if self.carry_is_whole() {
                out.push(self.carry.split().freeze());
            } else {
                return Ok(());
            }
        }
        let whole = whole_records_len(&piece);
        if whole > 0 {
            out.push(piece.slice(..whole));
        }
        if whole < piece.len() {
            self.carry_at = end - (piece.len() - whole);
            self.carry.extend_from_slice(&piece[whole..]);
            self.check_carried_record()?;
        }
        Ok(())
    }

    /// Says the block has ended: a record left unfinished is an error.
    pub fn finish(&mut self) -> Result<(), MalformedRecords> {
        if self.carry.is_empty() {
            return Ok(());
        }
        self.carry.clear();
        Err(MalformedRecords {
            offset: self.carry_at,
            len: self.seen,
        })
    }

    /// The length the carried record will have once whole, when its prefix is in.
    fn carried_record_len(&self) -> Option<usize> {
        let prefix = self.carry.first_chunk::<LENGTH_PREFIX>()?;
        Some(LENGTH_PREFIX + u32::from_le_bytes(*prefix) as usize)
    }

    fn carry_is_whole(&self) -> bool {
        self.carried_record_len() == Some(self.carry.len())
    }

    /// Refuses a carried record whose prefix says it ends past the block's end.
    fn check_carried_record(&self) -> Result<(), MalformedRecords> {
        match self.carried_record_len() {
            Some(total) if total > self.size - self.carry_at => Err(MalformedRecords {
                offset: self.carry_at,
                len: self.size,
            }),
            _ => Ok(()),
        }
    }

    /// Moves the bytes the carried record still lacks from the front of `piece` into the
    /// carry; returns how many.
    fn complete_carry(&mut self, piece: &[u8]) -> Result<usize, MalformedRecords> {
        let mut taken = 0;
        if self.carry.len() < LENGTH_PREFIX {
            taken = (LENGTH_PREFIX - self.carry.len()).min(piece.len());
            self.carry.extend_from_slice(&piece[..taken]);
            // The prefix's length is the peer's word: checked against the block before
            // anything is reserved for it.
            self.check_carried_record()?;
        }
        if let Some(total) = self.carried_record_len() {
            let more = (total - self.carry.len()).min(piece.len() - taken);
            self.carry.reserve(total - self.carry.len());
            self.carry.extend_from_slice(&piece[taken..taken + more]);
            taken += more;
        }
        Ok(taken)
    }
}

/// The length of the longest run of whole records at the start of `bytes`.
fn whole_records_len(bytes: &[u8]) -> usize {
    let mut at = 0;
    while let Some(prefix) = bytes[at..].first_chunk::<LENGTH_PREFIX>() {
        let end = at + LENGTH_PREFIX + u32::from_le_bytes(*prefix) as usize;
        if end > bytes.len() {
            break;
        }
        at = end;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use flint_wire::records::{put_record, Records};
    use proptest::prelude::*;

    fn read(pieces: &[Bytes]) -> Vec<Vec<u8>> {
        pieces
            .iter()
            .flat_map(|piece| Records::new(piece).map(|r| r.unwrap().to_vec()))
            .collect()
    }

    #[test]
    fn whole_pieces_pass_as_views() {
        let mut block = BytesMut::new();
        put_record(&mut block, b"abc");
        let block = block.freeze();
        let (mut pieces, mut out) = (RecordPieces::new(block.len() as u64), Vec::new());
        pieces.push(block.clone(), &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].as_ptr(), block.as_ptr(), "a view, not a copy");
        assert!(pieces.finish().is_ok());
    }

    #[test]
    fn a_block_that_ends_inside_a_record_is_an_error() {
        // Announced with room for the record, ended short of it.
        let (mut pieces, mut out) = (RecordPieces::new(9), Vec::new());
        pieces
            .push(Bytes::from_static(b"\x05\x00\x00\x00ab"), &mut out)
            .unwrap();
        assert!(out.is_empty());
        assert_eq!(pieces.finish(), Err(MalformedRecords { offset: 0, len: 6 }));
    }

    #[test]
    fn a_length_prefix_past_the_blocks_end_is_refused_before_anything_is_reserved() {
        // A whole record, then the prefix of one that claims 4 GiB, cut inside the
        // prefix: the claim is complete only with the second piece.
        let mut block = BytesMut::new();
        put_record(&mut block, b"ok");
        let block = block.freeze();
        let size = 1_000;
        let (mut pieces, mut out) = (RecordPieces::new(size), Vec::new());
        let mut first = BytesMut::from(&block[..]);
        first.extend_from_slice(b"\xff\xff");
        pieces.push(first.freeze(), &mut out).unwrap();
        assert_eq!(read(&out), [b"ok".to_vec()]);
        let error = pieces
            .push(Bytes::from_static(b"\xff\xffhostile"), &mut out)
            .unwrap_err();
        assert_eq!(
            error,
            MalformedRecords {
                offset: block.len(),
                len: size as usize
            }
        );
        assert!(
            pieces.carry.capacity() < size as usize,
            "reserved {} bytes for a record the block cannot hold",
            pieces.carry.capacity()
        );

        // The same prefix whole in one piece.
        let (mut pieces, mut out) = (RecordPieces::new(size), Vec::new());
        let error = pieces
            .push(Bytes::from_static(b"\xff\xff\xff\xffhostile"), &mut out)
            .unwrap_err();
        assert_eq!(error.offset, 0);
        assert!(out.is_empty());
        assert!(pieces.carry.capacity() < size as usize);
    }

    #[test]
    fn a_record_that_fits_the_block_only_reserves_its_own_length() {
        // A record cut in its prefix whose length is what the block has left: taken.
        let mut block = BytesMut::new();
        put_record(&mut block, &[7; 100]);
        let block = block.freeze();
        let (mut pieces, mut out) = (RecordPieces::new(block.len() as u64), Vec::new());
        pieces.push(block.slice(..2), &mut out).unwrap();
        pieces.push(block.slice(2..50), &mut out).unwrap();
        assert!(pieces.carry.capacity() <= block.len() + 64);
        pieces.push(block.slice(50..), &mut out).unwrap();
        pieces.finish().unwrap();
        assert_eq!(read(&out), [vec![7; 100]]);
        // One byte more than the block holds is refused.
        let short = RecordPieces::new(block.len() as u64 - 1);
        let (mut pieces, mut out) = (short, Vec::new());
        assert!(pieces.push(block.slice(..4), &mut out).is_err());
    }

    #[test]
    fn a_piece_past_the_blocks_end_is_an_error() {
        let mut block = BytesMut::new();
        put_record(&mut block, b"abc");
        let (mut pieces, mut out) = (RecordPieces::new(4), Vec::new());
        assert_eq!(
            pieces.push(block.freeze(), &mut out),
            Err(MalformedRecords { offset: 0, len: 4 })
        );
        assert!(out.is_empty());
    }

    proptest! {
        #[test]
        fn any_cutting_gives_back_the_records(
            records in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..30), 0..15),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
        ) {
            let mut block = BytesMut::new();
            for record in &records {
                put_record(&mut block, record);
            }
            let block = block.freeze();
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(block.len() + 1)).collect();
            cuts.push(0);
            cuts.push(block.len());
            cuts.sort_unstable();
            let (mut pieces, mut out) = (RecordPieces::new(block.len() as u64), Vec::new());
            for pair in cuts.windows(2) {
                prop_assert!(pieces.push(block.slice(pair[0]..pair[1]), &mut out).is_ok());
            }
            prop_assert!(pieces.finish().is_ok());
            prop_assert_eq!(read(&out), records);
        }
    }
}
