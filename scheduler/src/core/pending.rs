//! The pending-task lists of one task set, per locality level.
//!
//! Each list is a stack of task indices; tasks are pushed highest index first so that the
//! lowest is launched first. A task sits in every list it belongs to (its executors',
//! hosts', racks' and the all-tasks list), and launching it from one leaves stale entries
//! in the others: those are dropped lazily when they reach the top, as in Spark. That
//! keeps a pending task at a few bytes per list and a launch at O(1).

use flint_wire::SharedStr;

use crate::core::fx_hash::FxHashMap;
use crate::core::locality::TaskLocation;
use crate::core::registry::ExecutorRegistry;

/// One task set's pending tasks.
#[derive(Debug, Default)]
pub(crate) struct PendingTasks {
    pub for_executor: FxHashMap<SharedStr, Vec<u32>>,
    pub for_host: FxHashMap<SharedStr, Vec<u32>>,
    pub for_rack: FxHashMap<SharedStr, Vec<u32>>,
    pub no_prefs: Vec<u32>,
    pub all: Vec<u32>,
}

impl PendingTasks {
    /// Room for `tasks` tasks, `without_prefs` of them with no preferred location: a
    /// task set of a million tasks then fills its lists without copying them as they
    /// grow (a tenth of its submission's time went to that).
    pub fn with_capacity(tasks: usize, without_prefs: usize) -> Self {
        PendingTasks {
            no_prefs: Vec::with_capacity(without_prefs),
            all: Vec::with_capacity(tasks),
            ..PendingTasks::default()
        }
    }

    /// Adds task `index` to the lists its preferred locations name.
    pub fn add(&mut self, index: u32, locations: &[TaskLocation], registry: &ExecutorRegistry) {
        for location in locations {
            if let TaskLocation::Executor { executor_id, .. } = location {
                self.for_executor
                    .entry(executor_id.clone())
                    .or_default()
                    .push(index);
            }
            let host = location.host();
            self.for_host.entry(host.clone()).or_default().push(index);
            if let Some(rack) = registry.rack_of(host) {
                self.for_rack.entry(rack.clone()).or_default().push(index);
            }
        }
        if locations.is_empty() {
            self.no_prefs.push(index);
        }
        self.all.push(index);
    }
}

/// Takes the topmost task of `list` that still needs launching and is not excluded,
/// dropping the stale entries it passes.
#[inline]
pub(crate) fn dequeue(
    list: &mut Vec<u32>,
    needs_launch: impl Fn(u32) -> bool,
    excluded: impl Fn(u32) -> bool,
) -> Option<u32> {
    let mut i = list.len();
    while i > 0 {
        i -= 1;
        let index = list[i];
        if excluded(index) {
            continue;
        }
        list.remove(i);
        if needs_launch(index) {
            return Some(index);
        }
    }
    None
}

/// Whether `list` has a task that still needs launching, dropping stale entries on top.
pub(crate) fn has_pending(list: &mut Vec<u32>, needs_launch: impl Fn(u32) -> bool) -> bool {
    while let Some(&index) = list.last() {
        if needs_launch(index) {
            return true;
        }
        list.pop();
    }
    false
}

/// Whether any list of `lists` has a task that still needs launching; empty lists are
/// dropped.
pub(crate) fn any_pending(
    lists: &mut FxHashMap<SharedStr, Vec<u32>>,
    needs_launch: impl Fn(u32) -> bool,
) -> bool {
    let mut found = false;
    lists.retain(|_, list| {
        if found {
            return true;
        }
        found = has_pending(list, &needs_launch);
        found || !list.is_empty()
    });
    found
}
