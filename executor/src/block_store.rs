//! The executor's in-memory block store: task results too large to travel in their
//! status update wait here until the driver fetches them in chunks.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use flint_wire::BlockId;

/// Why a chunk of a block cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockStoreError {
    /// No block of that id is held (never stored, or removed).
    #[error("Block {0} not found")]
    NotFound(BlockId),
    /// The chunk would start after the block's end.
    #[error("offset {offset} is past the end of block {block_id}, which has {size} bytes")]
    OffsetPastEnd {
        /// The block.
        block_id: BlockId,
        /// The requested offset.
        offset: u64,
        /// The block's size.
        size: u64,
    },
}

#[derive(Debug, Default)]
struct Blocks {
    blocks: HashMap<BlockId, Bytes>,
    bytes: u64,
}

/// Blocks by id, in memory, shared by the task runners (which put results) and the
/// executor's endpoint (which serves chunks). Chunks are views of the stored bytes, never
/// copies.
///
/// ```
/// use bytes::Bytes;
/// use flint_executor::BlockStore;
/// use flint_wire::BlockId;
///
/// let store = BlockStore::new();
/// let id = BlockId::TaskResult { task_id: 9 };
/// store.put(id, Bytes::from_static(b"0123456789"));
/// let (chunk, total) = store.chunk(id, 4, 3)?;
/// assert_eq!((&chunk[..], total), (&b"456"[..], 10));
/// assert_eq!(store.bytes_held(), 10);
/// assert!(store.remove(id).is_some());
/// assert!(store.chunk(id, 0, 3).is_err());
/// # Ok::<(), flint_executor::BlockStoreError>(())
/// ```
#[derive(Debug, Default)]
pub struct BlockStore {
    inner: Mutex<Blocks>,
}

impl BlockStore {
    /// An empty store.
    pub fn new() -> Self {
        BlockStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Blocks> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `data` as `block_id`, returning the block it replaces.
    pub fn put(&self, block_id: BlockId, data: Bytes) -> Option<Bytes> {
        let mut inner = self.lock();
        inner.bytes += data.len() as u64;
        let old = inner.blocks.insert(block_id, data);
        if let Some(old) = &old {
            inner.bytes -= old.len() as u64;
        }
        old
    }

    /// The whole block.
    pub fn get(&self, block_id: BlockId) -> Option<Bytes> {
        self.lock().blocks.get(&block_id).cloned()
    }

    /// Up to `max_len` bytes of the block from `offset` (fewer at its end; none at its
    /// very end), with the block's total size.
    pub fn chunk(
        &self,
        block_id: BlockId,
        offset: u64,
        max_len: usize,
    ) -> Result<(Bytes, u64), BlockStoreError> {
        let inner = self.lock();
        let block = inner
            .blocks
            .get(&block_id)
            .ok_or(BlockStoreError::NotFound(block_id))?;
        let size = block.len() as u64;
        if offset > size {
            return Err(BlockStoreError::OffsetPastEnd {
                block_id,
                offset,
                size,
            });
        }
        // offset <= size, which is a usize.
        let start = offset as usize;
        let end = start + max_len.min(block.len() - start);
        Ok((block.slice(start..end), size))
    }

    /// Removes the block, returning it.
    pub fn remove(&self, block_id: BlockId) -> Option<Bytes> {
        let mut inner = self.lock();
        let old = inner.blocks.remove(&block_id);
        if let Some(old) = &old {
            inner.bytes -= old.len() as u64;
        }
        old
    }

    /// How many blocks are held.
    pub fn len(&self) -> usize {
        self.lock().blocks.len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes held, over all blocks.
    pub fn bytes_held(&self) -> u64 {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(task_id: u64) -> BlockId {
        BlockId::TaskResult { task_id }
    }

    #[test]
    fn chunks_cover_the_block_and_are_views() {
        let store = BlockStore::new();
        let data = Bytes::from((0..1000u32).map(|i| i as u8).collect::<Vec<_>>());
        store.put(id(1), data.clone());
        let mut fetched = Vec::new();
        let mut offset = 0u64;
        let mut chunks = 0;
        loop {
            let (chunk, total) = store.chunk(id(1), offset, 128).unwrap();
            assert_eq!(total, 1000);
            if chunk.is_empty() {
                break;
            }
            let range = data.as_ptr_range();
            assert!(range.contains(&chunk.as_ptr()), "a view, not a copy");
            offset += chunk.len() as u64;
            fetched.extend_from_slice(&chunk);
            chunks += 1;
            assert!(chunks <= 8, "1000 bytes in 128-byte chunks take 8 chunks");
        }
        assert_eq!(fetched, data);
        assert_eq!(chunks, 8);
    }

    #[test]
    fn offsets_past_the_end_and_unknown_blocks_are_errors() {
        let store = BlockStore::new();
        store.put(id(1), Bytes::from_static(b"abc"));
        assert_eq!(store.chunk(id(1), 3, 10).unwrap(), (Bytes::new(), 3));
        let error = store.chunk(id(1), 4, 10).unwrap_err();
        assert_eq!(
            error,
            BlockStoreError::OffsetPastEnd {
                block_id: id(1),
                offset: 4,
                size: 3
            }
        );
        assert!(error
            .to_string()
            .contains("past the end of block taskresult_1"));
        assert!(store.chunk(id(1), u64::MAX, 10).is_err());
        let error = store.chunk(id(2), 0, 10).unwrap_err();
        assert_eq!(error.to_string(), "Block taskresult_2 not found");
        assert_eq!(store.chunk(id(1), 1, 0).unwrap().0.len(), 0);
    }

    #[test]
    fn accounting_follows_puts_and_removes() {
        let store = BlockStore::new();
        assert!(store.is_empty());
        assert!(store.put(id(1), Bytes::from(vec![0; 100])).is_none());
        assert!(store.put(id(2), Bytes::from(vec![0; 50])).is_none());
        assert_eq!((store.len(), store.bytes_held()), (2, 150));
        assert_eq!(
            store.put(id(1), Bytes::from(vec![0; 10])).unwrap().len(),
            100
        );
        assert_eq!((store.len(), store.bytes_held()), (2, 60));
        assert_eq!(store.remove(id(2)).unwrap().len(), 50);
        assert!(store.remove(id(2)).is_none());
        assert_eq!((store.len(), store.bytes_held()), (1, 10));
        assert_eq!(store.get(id(1)).unwrap().len(), 10);
    }

    proptest! {
        #[test]
        fn any_chunking_reassembles_the_block(
            len in 0usize..2000,
            chunk in 1usize..700,
        ) {
            let store = BlockStore::new();
            let data = Bytes::from(crate::registry::pattern(len));
            store.put(id(3), data.clone());
            let mut fetched = Vec::new();
            for _ in 0..=len {
                let (piece, total) = store.chunk(id(3), fetched.len() as u64, chunk).unwrap();
                prop_assert_eq!(total, len as u64);
                prop_assert!(piece.len() <= chunk);
                if piece.is_empty() {
                    break;
                }
                fetched.extend_from_slice(&piece);
            }
            prop_assert_eq!(&fetched[..], &data[..]);
        }
    }
}
