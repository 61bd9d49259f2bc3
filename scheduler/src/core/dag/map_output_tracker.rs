//! The driver's record of where every map output waits (the seeds'
//! `MapOutputTrackerMaster`).

use std::collections::BTreeMap;

use flint_wire::{BlockManagerId, MapStatus};
use tracing::debug;

/// One shuffle's outputs, by map partition.
#[derive(Debug, Clone)]
struct ShuffleOutputs {
    outputs: Vec<Option<MapStatus>>,
    available: u32,
    /// Reduce partitions: every status has a size for each.
    reduces: u32,
}

impl ShuffleOutputs {
    fn remove_where(&mut self, lost: impl Fn(&BlockManagerId) -> bool) -> usize {
        let mut removed = 0;
        for slot in &mut self.outputs {
            if slot.as_ref().is_some_and(|s| lost(&s.location)) {
                *slot = None;
                removed += 1;
            }
        }
        self.available -= removed as u32;
        removed
    }
}

/// Every registered shuffle's map outputs: for each map partition, the block manager
/// holding its output and the exact bytes it holds for each reduce partition.
///
/// The epoch moves on whenever outputs are lost (and when a map stage completes):
/// tasks carry the epoch of their submission, and an executor whose cached statuses
/// are older than a task's epoch fetches them again
/// ([`flint_wire::MapStatusCache`]).
#[derive(Debug, Clone, Default)]
pub struct MapOutputTracker {
    shuffles: BTreeMap<u32, ShuffleOutputs>,
    epoch: u64,
}

impl MapOutputTracker {
    /// A tracker with no shuffle, at epoch 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Moves the epoch on, so that executors drop statuses cached before now.
    pub fn increment_epoch(&mut self) {
        self.epoch += 1;
        debug!("Increasing epoch to {}", self.epoch);
    }

    /// Registers a shuffle of `num_maps` map partitions into `num_reduces` reduce
    /// partitions, none of them computed yet (the seeds' `registerShuffle`); false if
    /// it is registered already.
    pub fn register_shuffle(&mut self, shuffle_id: u32, num_maps: u32, num_reduces: u32) -> bool {
        if self.shuffles.contains_key(&shuffle_id) {
            return false;
        }
        self.shuffles.insert(
            shuffle_id,
            ShuffleOutputs {
                outputs: vec![None; num_maps as usize],
                available: 0,
                reduces: num_reduces,
            },
        );
        true
    }

    /// Forgets a shuffle and its outputs, once no job will read it again; false if it
    /// was not registered.
    pub fn unregister_shuffle(&mut self, shuffle_id: u32) -> bool {
        self.shuffles.remove(&shuffle_id).is_some()
    }

    /// Whether the shuffle is registered.
    pub fn contains_shuffle(&self, shuffle_id: u32) -> bool {
        self.shuffles.contains_key(&shuffle_id)
    }

    /// The shuffle's number of map partitions, if it is registered.
    pub fn num_maps(&self, shuffle_id: u32) -> Option<u32> {
        self.shuffles
            .get(&shuffle_id)
            .map(|s| s.outputs.len() as u32)
    }

    /// The shuffle's number of reduce partitions, if it is registered.
    pub fn num_reduces(&self, shuffle_id: u32) -> Option<u32> {
        self.shuffles.get(&shuffle_id).map(|s| s.reduces)
    }

    /// Records where map partition `map_index` of the shuffle wrote its output,
    /// replacing any earlier record; false for a shuffle or partition not registered, or
    /// a status without one size per reduce partition (reducers would read past it).
    pub fn register_map_output(
        &mut self,
        shuffle_id: u32,
        map_index: u32,
        status: MapStatus,
    ) -> bool {
        let Some(shuffle) = self.shuffles.get_mut(&shuffle_id) else {
            return false;
        };
        if status.sizes.len() != shuffle.reduces as usize {
            return false;
        }
        let Some(slot) = shuffle.outputs.get_mut(map_index as usize) else {
            return false;
        };
        if slot.is_none() {
            shuffle.available += 1;
        }
        *slot = Some(status);
        true
    }

    /// Records the outputs of map partitions `0..statuses.len()` at once (the seeds'
    /// `registerMapOutputs`); false, recording nothing, for a shuffle not registered or
    /// more statuses than map partitions.
    pub fn register_map_outputs(&mut self, shuffle_id: u32, statuses: Vec<MapStatus>) -> bool {
        if self
            .num_maps(shuffle_id)
            .is_none_or(|maps| statuses.len() > maps as usize)
        {
            return false;
        }
        for (map_index, status) in statuses.into_iter().enumerate() {
            self.register_map_output(shuffle_id, map_index as u32, status);
        }
        true
    }

    /// Forgets map partition `map_index`'s output if it is still recorded at
    /// `location` (a newer attempt may have written it elsewhere since), moving the
    /// epoch on; true if it was.
    pub fn unregister_map_output(
        &mut self,
        shuffle_id: u32,
        map_index: u32,
        location: &BlockManagerId,
    ) -> bool {
        let Some(shuffle) = self.shuffles.get_mut(&shuffle_id) else {
            return false;
        };
        let Some(slot) = shuffle.outputs.get_mut(map_index as usize) else {
            return false;
        };
        if slot.as_ref().is_none_or(|s| &s.location != location) {
            return false;
        }
        *slot = None;
        shuffle.available -= 1;
        self.increment_epoch();
        true
    }

    /// Forgets every output held by the executor (its process, and so its blocks, is
    /// gone), moving the epoch on; the number forgotten.
    pub fn remove_outputs_on_executor(&mut self, executor_id: &str) -> usize {
        debug!("Removing outputs for executor {executor_id}");
        let removed = self
            .shuffles
            .values_mut()
            .map(|s| s.remove_where(|at| &*at.executor_id == executor_id))
            .sum();
        self.increment_epoch();
        removed
    }

    /// Whether any shuffle has an output recorded on the executor.
    pub fn has_outputs_on(&self, executor_id: &str) -> bool {
        self.shuffles.values().any(|s| {
            s.outputs
                .iter()
                .flatten()
                .any(|status| &*status.location.executor_id == executor_id)
        })
    }

    /// Forgets every output held on the host (the whole host is gone), moving the
    /// epoch on; the number forgotten.
    pub fn remove_outputs_on_host(&mut self, host: &str) -> usize {
        debug!("Removing outputs for host {host}");
        let removed = self
            .shuffles
            .values_mut()
            .map(|s| s.remove_where(|at| at.host == host))
            .sum();
        self.increment_epoch();
        removed
    }

    /// How many of the shuffle's map partitions have an output.
    pub fn num_available_outputs(&self, shuffle_id: u32) -> u32 {
        self.shuffles.get(&shuffle_id).map_or(0, |s| s.available)
    }

    /// Whether the shuffle is registered and every map partition has an output: its
    /// readers may run.
    pub fn is_available(&self, shuffle_id: u32) -> bool {
        self.shuffles
            .get(&shuffle_id)
            .is_some_and(|s| s.available as usize == s.outputs.len())
    }

    /// The map partitions without an output, in order (all of them for a shuffle not
    /// registered: nothing of it is known).
    pub fn missing_partitions(&self, shuffle_id: u32) -> Vec<u32> {
        self.shuffles.get(&shuffle_id).map_or_else(Vec::new, |s| {
            (0..s.outputs.len() as u32)
                .filter(|&i| s.outputs[i as usize].is_none())
                .collect()
        })
    }

    /// The shuffle's statuses by map partition (`None` where the output is missing),
    /// as the driver serves them to executors that read the shuffle.
    pub fn statuses(&self, shuffle_id: u32) -> Option<&[Option<MapStatus>]> {
        self.shuffles.get(&shuffle_id).map(|s| s.outputs.as_slice())
    }

    /// One map partition's status, if it has an output.
    pub fn output(&self, shuffle_id: u32, map_index: u32) -> Option<&MapStatus> {
        self.shuffles
            .get(&shuffle_id)?
            .outputs
            .get(map_index as usize)?
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(executor: &str, host: &str) -> BlockManagerId {
        BlockManagerId {
            executor_id: executor.into(),
            host: host.into(),
            port: 0,
        }
    }

    fn status(executor: &str, host: &str, sizes: &[u64]) -> MapStatus {
        MapStatus {
            location: at(executor, host),
            sizes: sizes.to_vec(),
        }
    }

    #[test]
    fn outputs_register_and_a_shuffle_is_available_once_every_map_has_one() {
        let mut t = MapOutputTracker::new();
        assert!(t.register_shuffle(3, 2, 2));
        assert!(!t.register_shuffle(3, 5, 2), "registered twice");
        assert_eq!(t.num_reduces(3), Some(2));
        assert_eq!((t.num_maps(3), t.is_available(3)), (Some(2), false));
        assert!(t.register_map_output(3, 1, status("1", "a", &[10, 20])));
        assert!(
            !t.register_map_output(3, 0, status("1", "a", &[10, 20, 30])),
            "a size for a reduce partition the shuffle does not have"
        );
        assert!(
            !t.register_map_output(3, 2, status("1", "a", &[])),
            "no map 2"
        );
        assert!(
            !t.register_map_output(4, 0, status("1", "a", &[])),
            "no shuffle 4"
        );
        assert_eq!(t.missing_partitions(3), [0]);
        // Registering the same partition again replaces, it does not count twice.
        assert!(t.register_map_output(3, 1, status("2", "b", &[11, 21])));
        assert_eq!(t.num_available_outputs(3), 1);
        assert!(t.register_map_output(3, 0, status("1", "a", &[5, 0])));
        assert!(t.is_available(3));
        let statuses = t.statuses(3).unwrap();
        assert_eq!(statuses[1].as_ref().unwrap().sizes, [11, 21]);
        assert_eq!(t.output(3, 0).unwrap().location, at("1", "a"));
        assert_eq!(t.epoch(), 0, "registering loses nothing");

        // An empty shuffle is available at once; an unknown one misses everything.
        assert!(t.register_shuffle(9, 0, 4));
        assert!(t.is_available(9));
        assert!(!t.is_available(10));
        assert!(!t.register_map_outputs(10, vec![]), "no shuffle 10");
    }

    #[test]
    fn every_loss_moves_the_epoch_on() {
        let mut t = MapOutputTracker::new();
        t.register_shuffle(0, 3, 1);
        t.register_shuffle(1, 2, 1);
        assert!(t.register_map_outputs(
            0,
            vec![
                status("1", "a", &[1]),
                status("2", "a", &[2]),
                status("3", "b", &[3])
            ]
        ));
        assert!(t.register_map_outputs(1, vec![status("1", "a", &[4])]));
        assert!(!t.register_map_outputs(1, vec![status("1", "a", &[]); 3]));

        // A stale location unregisters nothing and keeps the epoch.
        assert!(!t.unregister_map_output(0, 0, &at("9", "z")));
        assert_eq!(t.epoch(), 0);
        assert!(t.unregister_map_output(0, 0, &at("1", "a")));
        assert_eq!((t.epoch(), t.missing_partitions(0)), (1, vec![0]));

        assert_eq!(t.remove_outputs_on_executor("1"), 1, "shuffle 1's map 0");
        assert_eq!(t.epoch(), 2);
        assert_eq!(t.remove_outputs_on_executor("1"), 0);
        assert_eq!(
            t.epoch(),
            3,
            "a loss moves the epoch on even when nothing was left"
        );
        assert_eq!(t.remove_outputs_on_host("a"), 1);
        assert_eq!(t.epoch(), 4);
        assert_eq!(t.missing_partitions(0), [0, 1]);
        assert_eq!(t.num_available_outputs(0), 1);
        assert!(t.unregister_shuffle(0));
        assert!(!t.contains_shuffle(0));
    }
}
