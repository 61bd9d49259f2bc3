//! The executors registered with the driver (the seeds' `executorDataMap`) and the
//! numbers of the connections they registered on.

use std::net::SocketAddr;
use std::time::Instant;

use flint_wire::SharedStr;

use super::output::PeerId;

/// A registered executor (the seeds' `ExecutorData`).
#[derive(Debug)]
pub(crate) struct ExecutorData {
    /// Its id (the key it is registered under).
    pub id: SharedStr,
    /// The connection it registered on, which messages to it take.
    pub peer: PeerId,
    /// The remote address of that connection (`None`: this process).
    pub address: Option<SocketAddr>,
    pub host: SharedStr,
    /// Cores it has, as registered.
    pub total_cores: u32,
    /// Cores not taken by launched tasks, plus the prefetch slots not taken
    /// (`executor.taskPrefetch` × `task.cpus`): what an offer on it can give.
    pub free_slots: u32,
    /// Whether it waits in `pending_offers`.
    pub offer_pending: bool,
    /// Its connection's backlog, from a launch that found `rpc.outbox.maxBytes` queued
    /// on it until the connection is seen empty.
    pub backlog: Option<Backlog>,
}

/// A connection that was found full, and has not been seen empty since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backlog {
    /// When the peer was last seen taking bytes (or, until it has been, when its
    /// connection was found full): the
    /// executor is removed once `network.timeout` has passed since then with bytes
    /// still queued. A peer that takes what it is sent, however slowly, is not.
    pub progress_at: Instant,
    /// The connection's bytes written when last looked at, if it has been.
    pub written: Option<u64>,
    /// Whether the executor gets no offers: from a launch that found the connection
    /// full until fewer than the low-water mark of bytes are queued on it.
    pub paused: bool,
}

impl ExecutorData {
    /// Whether offers to it are paused for its backlog.
    pub fn is_paused(&self) -> bool {
        self.backlog.is_some_and(|b| b.paused)
    }
}

/// A registration, as the RegisterExecutor handler reads it.
#[derive(Debug)]
pub(crate) struct Registration {
    pub executor_id: SharedStr,
    pub host: SharedStr,
    pub cores: u32,
    /// The remote address of the connection it came on (`None`: this process).
    pub address: Option<SocketAddr>,
    /// The executor's endpoint as the log names it (the seeds' `executorRef`).
    pub endpoint: String,
}

/// The numbers of the connections executors registered on. A number is held by its
/// executor's registration and by each fetch of a result from it, and given out again
/// once none holds it.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    /// Holders of each number (0: free).
    holders: Vec<u32>,
    free: Vec<u32>,
}

impl Peers {
    /// A new number, held once.
    pub fn open(&mut self) -> PeerId {
        if let Some(index) = self.free.pop() {
            self.holders[index as usize] = 1;
            return PeerId(index);
        }
        let index = u32::try_from(self.holders.len()).expect("fewer than 2^32 connections");
        self.holders.push(1);
        PeerId(index)
    }

    /// One more holder.
    pub fn hold(&mut self, peer: PeerId) {
        self.holders[peer.index()] += 1;
    }

    /// One holder fewer; true when none is left (the number is free again).
    #[must_use]
    pub fn release(&mut self, peer: PeerId) -> bool {
        let holders = &mut self.holders[peer.index()];
        debug_assert!(*holders > 0, "{peer:?} released more than held");
        *holders = holders.saturating_sub(1);
        if *holders > 0 {
            return false;
        }
        self.free.push(peer.0);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_is_given_again_only_once_every_holder_released_it() {
        let mut peers = Peers::default();
        let a = peers.open();
        let b = peers.open();
        assert_ne!(a, b);
        peers.hold(a);
        assert!(!peers.release(a), "a fetch still holds it");
        assert_ne!(peers.open(), a);
        assert!(peers.release(a));
        assert_eq!(peers.open(), a, "free again");
    }
}
