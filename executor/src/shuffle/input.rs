//! What a reduce task reads of a shuffle: pieces of whole records.

use bytes::Bytes;
use flint_wire::records::{KeyedRecords, MalformedRecords, Records};

/// A task's partition of a shuffle, from every map output: pieces of whole records,
/// each a view of a received frame or of a local block, read in place.
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// use flint_executor::shuffle::ShuffleInput;
/// use flint_wire::records::put_keyed;
///
/// let mut block = BytesMut::new();
/// put_keyed(&mut block, b"fig", &3u64.to_le_bytes());
/// put_keyed(&mut block, b"fig", &4u64.to_le_bytes());
/// let input = ShuffleInput::new(vec![block.freeze()]);
/// let mut total = 0;
/// for record in input.keyed_records() {
///     let (_word, count) = record?;
///     total += u64::from_le_bytes(count.try_into().unwrap());
/// }
/// assert_eq!(total, 7);
/// # Ok::<(), flint_wire::records::MalformedRecords>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ShuffleInput {
    pieces: Vec<Bytes>,
}

impl ShuffleInput {
    /// The input made of `pieces`, each holding whole records.
    pub fn new(pieces: Vec<Bytes>) -> Self {
        ShuffleInput { pieces }
    }

    /// The pieces, as they arrived.
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// Bytes of records, length prefixes included.
    pub fn len_bytes(&self) -> u64 {
        self.pieces.iter().map(|piece| piece.len() as u64).sum()
    }

    /// Every record, piece after piece (records of one map output in the order they
    /// were written; map outputs in no particular order).
    pub fn records(&self) -> impl Iterator<Item = Result<&[u8], MalformedRecords>> + '_ {
        self.pieces.iter().flat_map(|piece| Records::new(piece))
    }

    /// Every keyed record, as (key, value).
    pub fn keyed_records(
        &self,
    ) -> impl Iterator<Item = Result<(&[u8], &[u8]), MalformedRecords>> + '_ {
        self.pieces
            .iter()
            .flat_map(|piece| KeyedRecords::new(piece))
    }
}
