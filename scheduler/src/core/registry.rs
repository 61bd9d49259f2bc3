//! The scheduler's view of the cluster: live executors, their hosts and racks (the
//! seeds' `executorIdToHost`, `hostToExecutors` and `hostsByRack`), and the running
//! tasks by id and by executor (`taskIdToTaskSetManager`, `executorIdToRunningTaskIds`
//! and `executorIdToTaskCount`).
//!
//! Launches and status updates are the hot path, so [`RunningTasks`] touches no hash
//! map and allocates nothing per task: a task id finds its node through an [`IdWindow`],
//! and the nodes of one executor's tasks form a doubly linked list threaded through
//! reused slots, its head found by the executor's dense slot number. The slot is looked
//! up by name once per offer, not per task.

use std::collections::BTreeSet;

use flint_wire::SharedStr;

use crate::core::fx_hash::FxHashMap;
use crate::core::id_window::IdWindow;

/// The end of a list, or no slot.
pub(crate) const NIL: u32 = u32::MAX;

/// A live executor.
#[derive(Debug)]
pub(crate) struct ExecutorRecord {
    pub host: SharedStr,
    pub cores: u32,
    /// Its dense number, the index of its running-task list in [`RunningTasks`].
    pub slot: u32,
}

/// Live executors, by id, host and rack.
#[derive(Debug, Default)]
pub(crate) struct ExecutorRegistry {
    executors: FxHashMap<SharedStr, ExecutorRecord>,
    /// Sorted sets, so that anything that walks them does so in the same order on every
    /// run of a seeded simulation.
    executors_by_host: FxHashMap<SharedStr, BTreeSet<SharedStr>>,
    hosts_by_rack: FxHashMap<SharedStr, BTreeSet<SharedStr>>,
    rack_of_host: FxHashMap<SharedStr, SharedStr>,
    /// Slots of removed executors, for reuse: slots stay as few as the most executors
    /// ever alive at once.
    free_slots: Vec<u32>,
    next_slot: u32,
}

impl ExecutorRegistry {
    /// Registers an executor; returns its slot, and whether it is new. The cores of a
    /// known executor stay as registered: an offer's free cores say nothing about them.
    pub fn add(&mut self, executor_id: &SharedStr, host: &SharedStr, cores: u32) -> (u32, bool) {
        if let Some(record) = self.executors.get(executor_id) {
            return (record.slot, false);
        }
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.next_slot += 1;
            self.next_slot - 1
        });
        self.executors.insert(
            executor_id.clone(),
            ExecutorRecord {
                host: host.clone(),
                cores,
                slot,
            },
        );
        self.executors_by_host
            .entry(host.clone())
            .or_default()
            .insert(executor_id.clone());
        if let Some(rack) = self.rack_of_host.get(host) {
            self.hosts_by_rack
                .entry(rack.clone())
                .or_default()
                .insert(host.clone());
        }
        (slot, true)
    }

    /// Removes an executor, and its host and rack if it was their last; returns its
    /// record. Its slot goes to the next executor added: the caller must first end the
    /// tasks still listed as running there.
    pub fn remove(&mut self, executor_id: &str) -> Option<ExecutorRecord> {
        let record = self.executors.remove(executor_id)?;
        self.free_slots.push(record.slot);
        if let Some(on_host) = self.executors_by_host.get_mut(&record.host) {
            on_host.remove(executor_id);
            if on_host.is_empty() {
                self.executors_by_host.remove(&record.host);
                if let Some(rack) = self.rack_of_host.get(&record.host) {
                    if let Some(hosts) = self.hosts_by_rack.get_mut(rack) {
                        hosts.remove(&record.host);
                        if hosts.is_empty() {
                            self.hosts_by_rack.remove(rack);
                        }
                    }
                }
            }
        }
        Some(record)
    }

    /// Says that `host` is in `rack` (racks are unknown unless said).
    /// A host said to be in another rack leaves its old one.
    pub fn set_rack(&mut self, host: &SharedStr, rack: &SharedStr) {
        if let Some(old) = self.rack_of_host.insert(host.clone(), rack.clone()) {
            if let Some(hosts) = self.hosts_by_rack.get_mut(&old) {
                hosts.remove(host);
                if hosts.is_empty() {
                    self.hosts_by_rack.remove(&old);
                }
            }
        }
        if self.executors_by_host.contains_key(host) {
            self.hosts_by_rack
                .entry(rack.clone())
                .or_default()
                .insert(host.clone());
        }
    }

    pub fn get(&self, executor_id: &str) -> Option<&ExecutorRecord> {
        self.executors.get(executor_id)
    }

    pub fn is_executor_alive(&self, executor_id: &str) -> bool {
        self.executors.contains_key(executor_id)
    }

    pub fn has_executors_alive_on_host(&self, host: &str) -> bool {
        self.executors_by_host.contains_key(host)
    }

    pub fn has_host_alive_on_rack(&self, rack: &str) -> bool {
        self.hosts_by_rack.contains_key(rack)
    }

    pub fn rack_of(&self, host: &str) -> Option<&SharedStr> {
        self.rack_of_host.get(host)
    }

    pub fn executors_by_host(&self) -> &FxHashMap<SharedStr, BTreeSet<SharedStr>> {
        &self.executors_by_host
    }

    pub fn len(&self) -> usize {
        self.executors.len()
    }

    pub fn total_cores(&self) -> usize {
        self.executors.values().map(|e| e.cores as usize).sum()
    }
}

/// One running task: where it is in its executor's list.
#[derive(Debug, Clone, Copy)]
struct Node {
    task_id: u64,
    /// The key of its task set.
    key: u32,
    /// The slot of its executor.
    executor: u32,
    prev: u32,
    /// The next node of the executor's list; of a free node, the next free node.
    next: u32,
}

/// One executor's running tasks: the ends of its list, in launch (and so id) order.
#[derive(Debug, Clone, Copy)]
struct ExecutorTasks {
    head: u32,
    tail: u32,
    count: u32,
}

const NO_TASKS: ExecutorTasks = ExecutorTasks {
    head: NIL,
    tail: NIL,
    count: 0,
};

/// The running tasks: each one's task set, and each executor's tasks and their number.
///
/// Inserting and removing a task is O(1) and, once the slots have grown to the most tasks
/// ever running at once, allocates nothing.
#[derive(Debug)]
pub(crate) struct RunningTasks {
    /// Task id to node.
    by_id: IdWindow,
    nodes: Vec<Node>,
    /// The first free node, `NIL` if none.
    free: u32,
    free_count: usize,
    /// By executor slot.
    executors: Vec<ExecutorTasks>,
}

impl Default for RunningTasks {
    fn default() -> Self {
        RunningTasks {
            by_id: IdWindow::default(),
            nodes: Vec::new(),
            free: NIL,
            free_count: 0,
            executors: Vec::new(),
        }
    }
}

impl RunningTasks {
    /// Running tasks, on every executor.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The key of the task set of a running task.
    #[inline]
    pub fn key_of(&self, task_id: u64) -> Option<u32> {
        self.by_id
            .get(task_id)
            .map(|node| self.nodes[node as usize].key)
    }

    #[inline]
    pub fn contains(&self, task_id: u64) -> bool {
        self.by_id.contains(task_id)
    }

    /// Records a launch of `task_id` (above every id launched before it, so that lists
    /// stay in id order) of task set `key` on the executor in `executor` slot.
    #[inline]
    pub fn insert(&mut self, task_id: u64, key: u32, executor: u32) {
        let slot = executor as usize;
        if slot >= self.executors.len() {
            self.executors.resize(slot + 1, NO_TASKS);
        }
        let tail = self.executors[slot].tail;
        let node = Node {
            task_id,
            key,
            executor,
            prev: tail,
            next: NIL,
        };
        let index = if self.free == NIL {
            self.nodes.push(node);
            u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 - 1 running tasks")
        } else {
            let index = self.free;
            self.free = self.nodes[index as usize].next;
            self.free_count -= 1;
            self.nodes[index as usize] = node;
            index
        };
        let replaced = self.by_id.insert(task_id, index);
        debug_assert!(replaced.is_none(), "task {task_id} launched twice");
        let list = &mut self.executors[slot];
        if tail == NIL {
            list.head = index;
        } else {
            self.nodes[tail as usize].next = index;
        }
        list.tail = index;
        list.count += 1;
    }

    /// Forgets a running task; returns the key of its task set.
    #[inline]
    pub fn remove(&mut self, task_id: u64) -> Option<u32> {
        let index = self.by_id.remove(task_id)?;
        let Node {
            key,
            executor,
            prev,
            next,
            ..
        } = self.nodes[index as usize];
        let list = &mut self.executors[executor as usize];
        if prev == NIL {
            list.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        list.count -= 1;
        self.nodes[index as usize].next = self.free;
        self.free = index;
        self.free_count += 1;
        Some(key)
    }

    /// The number of tasks running on the executor in `executor` slot.
    pub fn count_on(&self, executor: u32) -> usize {
        self.executors
            .get(executor as usize)
            .map_or(0, |list| list.count as usize)
    }

    /// The tasks running on the executor in `executor` slot, in id order.
    pub fn on_executor(&self, executor: u32) -> impl Iterator<Item = u64> + '_ {
        let mut next = self
            .executors
            .get(executor as usize)
            .map_or(NIL, |list| list.head);
        std::iter::from_fn(move || {
            if next == NIL {
                return None;
            }
            let node = &self.nodes[next as usize];
            next = node.next;
            Some(node.task_id)
        })
    }

    /// Room for `additional` more running tasks without reallocating.
    pub fn reserve(&mut self, additional: usize) {
        self.by_id.reserve(additional);
        self.nodes
            .reserve(additional.saturating_sub(self.free_count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn executor_slots_are_reused_after_removal() {
        let mut registry = ExecutorRegistry::default();
        let (a, b) = (SharedStr::from("a"), SharedStr::from("b"));
        let host = SharedStr::from("h");
        assert_eq!(registry.add(&a, &host, 1), (0, true));
        assert_eq!(registry.add(&b, &host, 1), (1, true));
        assert_eq!(registry.add(&a, &host, 4), (0, false));
        assert_eq!(registry.get("a").unwrap().cores, 1);
        assert_eq!(registry.remove("a").unwrap().slot, 0);
        assert_eq!(registry.add(&SharedStr::from("c"), &host, 1), (0, true));
        assert_eq!(registry.add(&a, &host, 1), (2, true));
    }

    #[test]
    fn a_host_moved_to_another_rack_leaves_the_old_one() {
        let mut registry = ExecutorRegistry::default();
        let host = SharedStr::from("h");
        registry.add(&SharedStr::from("a"), &host, 1);
        registry.set_rack(&host, &SharedStr::from("r1"));
        assert!(registry.has_host_alive_on_rack("r1"));
        registry.set_rack(&host, &SharedStr::from("r2"));
        assert!(!registry.has_host_alive_on_rack("r1"));
        assert!(registry.has_host_alive_on_rack("r2"));
        assert_eq!(registry.rack_of("h").map(|r| &**r), Some("r2"));
    }

    #[test]
    fn lists_follow_launches_and_ends_in_id_order() {
        let mut running = RunningTasks::default();
        for task_id in 0..10 {
            running.insert(task_id, 7, (task_id % 3) as u32);
        }
        assert_eq!(running.on_executor(0).collect::<Vec<_>>(), [0, 3, 6, 9]);
        assert_eq!(running.count_on(1), 3);
        assert_eq!(running.count_on(5), 0, "a slot never used");
        assert_eq!(running.on_executor(5).count(), 0);
        // Removing the head, a middle node and the tail.
        for task_id in [0, 6, 9] {
            assert_eq!(running.remove(task_id), Some(7));
        }
        assert_eq!(running.remove(6), None);
        assert_eq!(running.on_executor(0).collect::<Vec<_>>(), [3]);
        assert_eq!(running.count_on(0), 1);
        running.insert(10, 8, 0);
        assert_eq!(running.on_executor(0).collect::<Vec<_>>(), [3, 10]);
        assert_eq!(running.key_of(10), Some(8));
        assert_eq!(running.key_of(9), None);
        assert_eq!(running.len(), 8);
    }

    #[test]
    fn nodes_are_reused_so_a_steady_state_allocates_nothing() {
        let mut running = RunningTasks::default();
        // 4 executors with 25 tasks each, tasks ending in launch order.
        let mut next = 0u64;
        for _ in 0..100 {
            running.insert(next, 0, (next % 4) as u32);
            next += 1;
        }
        let capacity = running.nodes.capacity();
        for _ in 0..10_000 {
            running.remove(next - 100);
            running.insert(next, 0, (next % 4) as u32);
            next += 1;
        }
        assert_eq!(running.nodes.len(), 100);
        assert_eq!(running.nodes.capacity(), capacity);
        for executor in 0..4 {
            assert_eq!(running.count_on(executor), 25);
        }
    }

    proptest! {
        #[test]
        fn behaves_as_a_map_of_executors_to_sorted_task_sets(
            ops in proptest::collection::vec((any::<bool>(), 0u32..5, 0usize..64), 0..400)
        ) {
            let mut running = RunningTasks::default();
            let mut model: BTreeMap<u64, u32> = BTreeMap::new();
            let mut next = 0u64;
            for (launch, executor, pick) in ops {
                if launch {
                    running.insert(next, executor + 100, executor);
                    model.insert(next, executor);
                    next += 1;
                } else if let Some(&task_id) = model.keys().nth(pick % model.len().max(1)) {
                    let executor = model.remove(&task_id).unwrap();
                    prop_assert_eq!(running.remove(task_id), Some(executor + 100));
                }
                prop_assert_eq!(running.len(), model.len());
                for executor in 0..5 {
                    let expected: Vec<u64> = model
                        .iter()
                        .filter(|(_, &e)| e == executor)
                        .map(|(&t, _)| t)
                        .collect();
                    prop_assert_eq!(running.on_executor(executor).collect::<Vec<_>>(), expected.clone());
                    prop_assert_eq!(running.count_on(executor), expected.len());
                }
            }
        }
    }
}
