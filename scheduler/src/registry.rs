//! The scheduler's view of the cluster: live executors, their hosts and racks (the
//! seeds' `executorIdToHost`, `hostToExecutors` and `hostsByRack`). The seeds'
//! `executorIdToRunningTaskIds` is not kept: the running attempts say where they run, and
//! the rare question of what runs on one executor walks them (see
//! [`crate::TaskScheduler::running_tasks_on`]), so that a launch updates one map less.

use std::collections::BTreeSet;

use flint_wire::SharedStr;

use crate::fx_hash::FxHashMap;

/// A live executor.
#[derive(Debug)]
pub(crate) struct ExecutorRecord {
    pub host: SharedStr,
    pub cores: u32,
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
}

impl ExecutorRegistry {
    /// Registers an executor; false if it was already registered. The cores of a
    /// known executor stay as registered: an offer's free cores say nothing about them.
    pub fn add(&mut self, executor_id: &SharedStr, host: &SharedStr, cores: u32) -> bool {
        if self.executors.contains_key(executor_id) {
            return false;
        }
        self.executors.insert(
            executor_id.clone(),
            ExecutorRecord {
                host: host.clone(),
                cores,
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
        true
    }

    /// Removes an executor, and its host and rack if it was their last; returns its
    /// record.
    pub fn remove(&mut self, executor_id: &str) -> Option<ExecutorRecord> {
        let record = self.executors.remove(executor_id)?;
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
    pub fn set_rack(&mut self, host: &SharedStr, rack: &SharedStr) {
        self.rack_of_host.insert(host.clone(), rack.clone());
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
