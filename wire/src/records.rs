//! Records as shuffles carry them: each one a 4-byte little-endian length and that many
//! bytes, laid end to end. A keyed record is one record whose bytes are its key's length,
//! its key and its value, so that whatever cuts a block between records never parts a
//! key from its value.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | length `n` of the record, little endian |
//! | 4 | n | the record's bytes, opaque |
//!
//! and within a keyed record's bytes:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | length `k` of the key, little endian |
//! | 4 | k | the key |
//! | 4 + k | rest | the value |
//!
//! Reading never copies: [`Records`] and [`KeyedRecords`] hand out slices of the block
//! they read. A block comes from another process, so a length that runs past the block's
//! end is an error ([`MalformedRecords`]), never a panic.
//!
//! ```
//! use bytes::BytesMut;
//! use flint_wire::records::{put_keyed, put_record, KeyedRecords, Records};
//!
//! let mut block = BytesMut::new();
//! put_record(&mut block, b"first");
//! put_record(&mut block, b"");
//! let read: Vec<&[u8]> = Records::new(&block).collect::<Result<_, _>>()?;
//! assert_eq!(read, [&b"first"[..], &b""[..]]);
//!
//! let mut block = BytesMut::new();
//! put_keyed(&mut block, b"word", &7u64.to_le_bytes());
//! let (key, value) = KeyedRecords::new(&block).next().unwrap()?;
//! assert_eq!((key, value), (&b"word"[..], &7u64.to_le_bytes()[..]));
//! # Ok::<(), flint_wire::records::MalformedRecords>(())
//! ```

use bytes::{BufMut, BytesMut};

/// Bytes before each record or field: its length.
pub const LENGTH_PREFIX: usize = 4;

/// A block whose records do not fit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed records: a record at byte {offset} runs past the block's end ({len} bytes)")]
pub struct MalformedRecords {
    /// Where the bad record starts.
    pub offset: usize,
    /// The block's length.
    pub len: usize,
}

/// The bytes a record of `len` bytes takes in a block.
pub const fn record_len(len: usize) -> usize {
    LENGTH_PREFIX + len
}

/// Appends one record. Records longer than 4 GiB - 1 are not supported; the writer
/// checks them ([`fits`]).
#[inline]
pub fn put_record(block: &mut BytesMut, record: &[u8]) {
    debug_assert!(fits(record.len()));
    block.reserve(LENGTH_PREFIX + record.len());
    block.put_u32_le(record.len() as u32);
    block.put_slice(record);
}

/// Appends one keyed record: a record of its key's length, its key and its value.
#[inline]
pub fn put_keyed(block: &mut BytesMut, key: &[u8], value: &[u8]) {
    let inner = LENGTH_PREFIX + key.len() + value.len();
    debug_assert!(fits(inner));
    block.reserve(LENGTH_PREFIX + inner);
    block.put_u32_le(inner as u32);
    block.put_u32_le(key.len() as u32);
    block.put_slice(key);
    block.put_slice(value);
}

/// The bytes a keyed record of `key` and `value` bytes takes in a block.
pub const fn keyed_record_len(key: usize, value: usize) -> usize {
    2 * LENGTH_PREFIX + key + value
}

/// Whether a record of `len` bytes can be written.
pub const fn fits(len: usize) -> bool {
    len <= u32::MAX as usize
}

/// The records of a block, in order, as slices of it.
#[derive(Debug, Clone)]
pub struct Records<'a> {
    block: &'a [u8],
    at: usize,
}

impl<'a> Records<'a> {
    /// Reads `block`.
    pub fn new(block: &'a [u8]) -> Self {
        Records { block, at: 0 }
    }

    fn field(&mut self) -> Option<Result<&'a [u8], MalformedRecords>> {
        let rest = &self.block[self.at..];
        if rest.is_empty() {
            return None;
        }
        let malformed = MalformedRecords {
            offset: self.at,
            len: self.block.len(),
        };
        let Some((prefix, rest)) = rest.split_first_chunk::<LENGTH_PREFIX>() else {
            self.at = self.block.len();
            return Some(Err(malformed));
        };
        let len = u32::from_le_bytes(*prefix) as usize;
        if rest.len() < len {
            self.at = self.block.len();
            return Some(Err(malformed));
        }
        self.at += LENGTH_PREFIX + len;
        Some(Ok(&rest[..len]))
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<&'a [u8], MalformedRecords>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.field()
    }
}

/// The keyed records of a block, in order, as (key, value) slices of it.
#[derive(Debug, Clone)]
pub struct KeyedRecords<'a>(Records<'a>);

impl<'a> KeyedRecords<'a> {
    /// Reads `block`.
    pub fn new(block: &'a [u8]) -> Self {
        KeyedRecords(Records::new(block))
    }
}

impl<'a> Iterator for KeyedRecords<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), MalformedRecords>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let start = self.0.at;
        let record = match self.0.field()? {
            Ok(record) => record,
            Err(e) => return Some(Err(e)),
        };
        let malformed = MalformedRecords {
            offset: start,
            len: self.0.block.len(),
        };
        let Some((prefix, rest)) = record.split_first_chunk::<LENGTH_PREFIX>() else {
            return Some(Err(malformed));
        };
        let key_len = u32::from_le_bytes(*prefix) as usize;
        if key_len > rest.len() {
            return Some(Err(malformed));
        }
        Some(Ok(rest.split_at(key_len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_matches_the_documented_bytes() {
        let mut block = BytesMut::new();
        put_record(&mut block, b"ab");
        put_keyed(&mut block, b"k", b"");
        assert_eq!(
            &block[..],
            b"\x02\x00\x00\x00ab\x05\x00\x00\x00\x01\x00\x00\x00k"
        );
        assert_eq!(record_len(2), 6);
        assert_eq!(keyed_record_len(1, 0), 9);
        // A keyed record is one record: whatever cuts between records keeps it whole.
        assert_eq!(Records::new(&block).count(), 2);
    }

    #[test]
    fn a_record_past_the_end_is_an_error_not_a_panic() {
        for (bytes, offset) in [
            (&b"\x05\x00\x00\x00abc"[..], 0),
            (b"\x01\x00", 0),
            (b"\x01\x00\x00\x00a\xff\xff\xff\xff", 5),
        ] {
            let read: Vec<_> = Records::new(bytes).collect();
            assert_eq!(
                read.last(),
                Some(&Err(MalformedRecords {
                    offset,
                    len: bytes.len()
                }))
            );
        }
        // A record too short for a key length, and one whose key runs past it.
        for record in [&b"abc"[..], b"\x09\x00\x00\x00key"] {
            let mut block = BytesMut::new();
            put_record(&mut block, record);
            let read: Vec<_> = KeyedRecords::new(&block).collect();
            assert_eq!(
                read,
                [Err(MalformedRecords {
                    offset: 0,
                    len: block.len()
                })]
            );
        }
    }

    proptest! {
        #[test]
        fn records_round_trip(records in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..20)) {
            let mut block = BytesMut::new();
            for record in &records {
                put_record(&mut block, record);
            }
            let read: Vec<&[u8]> = Records::new(&block).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(read.len(), records.len());
            for (read, written) in read.iter().zip(&records) {
                prop_assert_eq!(*read, &written[..]);
            }
        }

        #[test]
        fn keyed_records_round_trip(pairs in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..20), proptest::collection::vec(any::<u8>(), 0..20)), 0..20)) {
            let mut block = BytesMut::new();
            for (key, value) in &pairs {
                put_keyed(&mut block, key, value);
            }
            let read: Vec<(&[u8], &[u8])> = KeyedRecords::new(&block).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(read.len(), pairs.len());
            for ((k, v), (key, value)) in read.iter().zip(&pairs) {
                prop_assert_eq!(*k, &key[..]);
                prop_assert_eq!(*v, &value[..]);
            }
        }

        #[test]
        fn any_bytes_read_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let records = Records::new(&bytes).count();
            prop_assert!(records <= bytes.len() / LENGTH_PREFIX + 1);
            let _ = KeyedRecords::new(&bytes).count();
        }
    }
}
