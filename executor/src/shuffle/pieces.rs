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
/// let (mut pieces, mut whole) = (RecordPieces::new(), Vec::new());
/// pieces.push(block.slice(..12), &mut whole); // "hello" and 3 bytes of the next
/// pieces.push(block.slice(12..), &mut whole);
/// pieces.finish()?;
/// let records: Vec<&[u8]> = whole.iter().flat_map(|p| Records::new(p)).collect::<Result<_, _>>()?;
/// assert_eq!(records, [&b"hello"[..], &b"world"[..]]);
/// # Ok::<(), flint_wire::records::MalformedRecords>(())
/// ```
#[derive(Debug, Default)]
pub struct RecordPieces {
    /// The start of a record cut at the end of the last piece.
    carry: BytesMut,
    /// Bytes of the block seen, for errors.
    seen: usize,
}

impl RecordPieces {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next piece of the block, and pushes the pieces of whole records it
    /// completes onto `out`.
    pub fn push(&mut self, mut piece: Bytes, out: &mut Vec<Bytes>) {
        self.seen += piece.len();
        if !self.carry.is_empty() {
            let taken = self.complete_carry(&piece);
            piece = piece.slice(taken..);
            if self.carry_is_whole() {
                out.push(self.carry.split().freeze());
            } else {
                return;
            }
        }
        let whole = whole_records_len(&piece);
        if whole > 0 {
            out.push(piece.slice(..whole));
        }
        if whole < piece.len() {
            self.carry.extend_from_slice(&piece[whole..]);
        }
    }

    /// Says the block has ended: a record left unfinished is an error.
    pub fn finish(&mut self) -> Result<(), MalformedRecords> {
        if self.carry.is_empty() {
            return Ok(());
        }
        let offset = self.seen - self.carry.len();
        self.carry.clear();
        Err(MalformedRecords {
            offset,
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

    /// Moves the bytes the carried record still lacks from the front of `piece` into the
    /// carry; returns how many.
    fn complete_carry(&mut self, piece: &[u8]) -> usize {
        let mut taken = 0;
        if self.carry.len() < LENGTH_PREFIX {
            taken = (LENGTH_PREFIX - self.carry.len()).min(piece.len());
            self.carry.extend_from_slice(&piece[..taken]);
        }
        if let Some(total) = self.carried_record_len() {
            let more = (total - self.carry.len()).min(piece.len() - taken);
            self.carry.reserve(total - self.carry.len());
            self.carry.extend_from_slice(&piece[taken..taken + more]);
            taken += more;
        }
        taken
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
        let (mut pieces, mut out) = (RecordPieces::new(), Vec::new());
        pieces.push(block.clone(), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].as_ptr(), block.as_ptr(), "a view, not a copy");
        assert!(pieces.finish().is_ok());
    }

    #[test]
    fn a_block_that_ends_inside_a_record_is_an_error() {
        let (mut pieces, mut out) = (RecordPieces::new(), Vec::new());
        pieces.push(Bytes::from_static(b"\x05\x00\x00\x00ab"), &mut out);
        assert!(out.is_empty());
        assert_eq!(pieces.finish(), Err(MalformedRecords { offset: 0, len: 6 }));
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
            let (mut pieces, mut out) = (RecordPieces::new(), Vec::new());
            for pair in cuts.windows(2) {
                pieces.push(block.slice(pair[0]..pair[1]), &mut out);
            }
            prop_assert!(pieces.finish().is_ok());
            prop_assert_eq!(read(&out), records);
        }
    }
}
