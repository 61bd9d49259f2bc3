//! A map-side combiner: values merged by key before they are shuffled, so that a map
//! task writes one record per key instead of one per value (the seeds' map-side
//! aggregation, as `reduceByKey` does).

use rustc_hash::FxHashMap;

use super::{ShuffleError, ShuffleWriter};

/// Values by key, merged as they are added; [`Combiner::write_to`] writes one keyed
/// record per key. A key is copied once, when it is first added.
///
/// ```
/// use flint_executor::shuffle::Combiner;
///
/// let mut counts = Combiner::new();
/// for word in "to be or not to be".split(' ') {
///     counts.add(word.as_bytes(), 1u64, |total, one| *total += one);
/// }
/// assert_eq!(counts.len(), 4);
/// assert_eq!(counts.get(b"be"), Some(&2));
/// ```
#[derive(Debug, Clone)]
pub struct Combiner<V> {
    values: FxHashMap<Box<[u8]>, V>,
}

impl<V> Default for Combiner<V> {
    fn default() -> Self {
        Combiner {
            values: FxHashMap::default(),
        }
    }
}

impl<V> Combiner<V> {
    /// No key yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `value` under `key`: merged into the value already there with `merge`, or
    /// kept as the first.
    #[inline]
    pub fn add(&mut self, key: &[u8], value: V, merge: impl FnOnce(&mut V, V)) {
        match self.values.get_mut(key) {
            Some(existing) => merge(existing, value),
            None => {
                self.values.insert(key.into(), value);
            }
        }
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.values.get(key)
    }

    /// Distinct keys.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no key was added.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Writes one keyed record per key, to the partition of the key's hash, its value
    /// as `encode` writes it.
    pub fn write_to<B: AsRef<[u8]>>(
        self,
        writer: &mut ShuffleWriter,
        mut encode: impl FnMut(&V) -> B,
    ) -> Result<(), ShuffleError> {
        for (key, value) in self.values {
            writer.write_keyed(&key, encode(&value).as_ref())?;
        }
        Ok(())
    }
}
