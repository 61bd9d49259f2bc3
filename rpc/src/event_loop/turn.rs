//! One turn of the loop: what it handles and in which order, the deadlines it looks at
//! (timers, asks, connections), the commands other threads handed it, and the shutdown.

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::{Events, Token};
use tracing::{error, info};

use super::close::CloseReason;
use super::connection::Connection;
use super::{EventLoop, Turn, LISTENER, WAKER};
use crate::endpoint::Endpoint;
use crate::error::RpcError;
use crate::outbox::{ConnKey, OutboxKind};
use crate::shared::Command;
use crate::timer::deadline_after;

impl EventLoop {
    /// One turn of the loop, on whichever thread holds it: takes what the poller has
    /// ready without waiting and, when there is any or a deadline is due, handles it:
    /// reads and dispatches, fires timers, times asks out, runs commands and batch ends.
    /// A turn with nothing ready costs one `epoll_wait` and a clock read.
    pub(crate) fn turn(&mut self) -> Turn {
        if self.stopping {
            return Turn::Stopping;
        }
        if let Err(e) = self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
            if e.kind() != io::ErrorKind::Interrupted {
                error!("event loop poll failed: {e}");
                self.stopping = true;
                return Turn::Stopping;
            }
            self.events.clear();
        }
        let now = Instant::now();
        let due = self.next_deadline.is_some_and(|deadline| deadline <= now)
            || !self.unfinished_reads.is_empty();
        // Producers wake only a sleeping loop: an awake one looks for their work itself.
        let commands = self.shared.handoff.take_pending();
        if self.events.is_empty() && !due && !commands {
            return Turn::Idle;
        }
        self.now = now;
        self.round += 1;
        // Who was left over comes first; a connection read in this turn already waits
        // for the next one.
        self.resume_reads();
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        for event in events.iter() {
            self.handle_event(event);
        }
        self.events = events;
        self.fire_timers(now);
        self.expire(now);
        self.process_commands();
        // What batch ends send (locally too) is carried out before the turn ends.
        while self.endpoints.end_batch(now) {
            self.process_commands();
        }
        if self.stopping {
            return Turn::Stopping;
        }
        self.next_deadline = self.compute_next_deadline();
        Turn::Worked
    }

    /// When the loop must turn even if nothing is ready: at its next deadline, or at once
    /// while a connection has bytes left to read.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        if self.unfinished_reads.is_empty() {
            self.next_deadline
        } else {
            Some(self.now)
        }
    }

    fn handle_event(&mut self, event: &mio::event::Event) {
        match event.token() {
            WAKER => {}
            LISTENER => {
                if !self.stopping {
                    self.accept()
                }
            }
            Token(key) => {
                let key = key as ConnKey;
                let closed = event.is_read_closed() || event.is_error();
                if closed {
                    if let Some(conn) = self.connections.get_mut(&key) {
                        conn.peer_closed = true;
                    }
                }
                let readable = event.is_readable() || closed;
                if self.connection_ready(key, event.is_writable() || event.is_error()) && readable {
                    self.read(key);
                }
                self.flush(key);
            }
        }
    }

    /// Writes what every connection's outbox holds, frames queued with
    /// [`EndpointRef::send_deferred`](crate::EndpointRef::send_deferred) and not flushed
    /// yet included: for the loop thread about to sleep while a thread lent to the loop
    /// is busy with something else (a task runner in a long task), whose own flush may be
    /// far off. Writing a frame before its sender's flush only means fewer frames per
    /// write.
    pub(crate) fn flush_queued(&mut self) {
        let mut keys = std::mem::take(&mut self.queued_keys);
        keys.extend(
            self.connections
                .iter()
                .filter(|(_, conn)| conn.outbox.queued() > 0)
                .map(|(&key, _)| key),
        );
        let open = self.connections.len();
        for key in keys.drain(..) {
            self.flush(key);
        }
        self.queued_keys = keys;
        // A connection closed by a failed write ran handlers (ask callbacks,
        // on_disconnected): what they handed to the loop from within this turn woke
        // nobody, and is taken now, and the timers they set move the next deadline.
        if self.connections.len() != open {
            self.process_commands();
            self.next_deadline = self.compute_next_deadline();
        }
    }

    /// Whether a connection still has bytes to send, or is still being set up to send
    /// them.
    fn has_pending_output(&self) -> bool {
        self.connections
            .values()
            .any(|c| !c.state.is_open() || c.outbox.queued() > 0)
    }

    /// The earliest deadline of the timers and the asks, the retry of a failed accept,
    /// and the lower bound on connections' deadlines (which may be early: the turn at it
    /// looks at every connection and moves it on); tells the ask table that the loop
    /// turns by then without being woken.
    fn compute_next_deadline(&mut self) -> Option<Instant> {
        let mut next = self.endpoints.timers.next_deadline();
        if let Some(retry) = self.accept_retry_at {
            next = Some(next.map_or(retry, |n| n.min(retry)));
        }
        if let Some(floor) = self.conn_deadline_floor {
            next = Some(next.map_or(floor, |n| n.min(floor)));
        }
        let mut asks = self.shared.asks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(deadline) = asks.next_deadline() {
            next = Some(next.map_or(deadline, |n| n.min(deadline)));
        }
        // Under the same lock: an ask registered from here on that is due before `next`
        // wakes the loop.
        asks.loop_sleeps_until(next);
        next
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some((timer, index)) = self.endpoints.timers.pop_due(now) {
            self.endpoints
                .call(index, now, |endpoint, ctx| endpoint.on_timer(ctx, timer));
        }
    }

    fn expire(&mut self, now: Instant) {
        if !self.stopping && self.accept_retry_at.is_some_and(|at| at <= now) {
            self.accept_retry_at = None;
            self.accept();
        }
        self.shared
            .asks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_expired(now, &mut self.ended_asks);
        for ask in self.ended_asks.drain(..) {
            let error = ask.completion.timeout_error(ask.timeout);
            ask.completion.complete(Err(error));
        }
        if self.conn_deadline_floor.is_none_or(|floor| floor > now) {
            return;
        }
        #[cfg(all(test, not(loom)))]
        self.shared
            .deadline_checks
            .fetch_add(self.connections.len() as u64, Ordering::Relaxed);
        let settings = &self.shared.settings;
        let late: Vec<(ConnKey, CloseReason)> = self
            .connections
            .iter()
            .filter_map(|(&key, c)| Some((key, c.overdue(now, settings)?)))
            .collect();
        for (key, reason) in late {
            // A peer's bytes may wait in the kernel past a reading deadline while the
            // loop did not look (it stalled, and this poll returned other sockets' events
            // first): read them before holding the silence against the peer.
            let reason = match reason {
                CloseReason::StalledFrame { .. } if self.waiting_peer_sent_more(key, now) => {
                    continue
                }
                CloseReason::StalledFrame { .. }
                | CloseReason::SlowFrame { .. }
                | CloseReason::Idle(_) => {
                    self.read(key);
                    // It filled this turn's read budget: not a peer that trickles, and the
                    // rest is read at the next turn, which comes at once.
                    if self.unfinished_reads.contains(&key) {
                        continue;
                    }
                    let settings = &self.shared.settings;
                    match self.connections.get(&key).map(|c| c.overdue(now, settings)) {
                        Some(Some(reason)) => reason,
                        _ => continue,
                    }
                }
                reason => reason,
            };
            self.close(key, reason);
        }
        // Exact again: the earliest deadline of those left (it may have moved on since
        // the floor was set, or its connection closed).
        self.conn_deadline_floor = self
            .connections
            .values()
            .filter_map(Connection::deadline)
            .min();
    }

    fn process_commands(&mut self) {
        loop {
            self.shared.handoff.drain(&mut self.commands);
            if self.commands.is_empty() {
                return;
            }
            let mut commands = std::mem::take(&mut self.commands);
            for command in commands.drain(..) {
                self.command(command);
            }
            self.commands = commands;
        }
    }

    fn command(&mut self, command: Command) {
        let now = self.now;
        match command {
            Command::Flush(outbox) => match outbox.kind() {
                OutboxKind::Local => self.deliver_local(),
                _ if self.connections.contains_key(&outbox.key()) => self.flush(outbox.key()),
                // Also while stopping: what on_stop sends may need a connection, which the
                // shutdown's bound covers.
                OutboxKind::Outgoing(address) if !outbox.is_closed() => {
                    self.connect(address, outbox, now)
                }
                _ => {}
            },
            Command::Register(name, endpoint, done) => {
                let result = if self.stopping {
                    Err(RpcError::Stopped)
                } else {
                    // RpcEnvHandle::register packs nothing else.
                    let endpoint = endpoint
                        .downcast::<Box<dyn Endpoint>>()
                        .expect("a registration carries a Box<dyn Endpoint>");
                    self.endpoints.register(name, *endpoint, now)
                };
                done.complete(result);
            }
            Command::Unregister(name) => {
                if let Some(&index) = self.endpoints.by_name.get(&name) {
                    self.endpoints.stop(index);
                }
            }
            Command::Stop => self.stopping = true,
            #[cfg(all(test, not(loom)))]
            Command::PanicForTest => panic!("the loop thread panics, as a test asked"),
        }
    }

    /// Stops every endpoint, gives queued frames a bounded time to leave, closes the
    /// connections and fails what is still waiting. Only the loop thread calls it.
    pub(crate) fn shutdown(&mut self) {
        // Already set when a Stop command ended the loop; not when its thread gave up on
        // a failed poll. Registrations still queued are refused either way: an endpoint
        // started now would never be stopped.
        self.stopping = true;
        // Sends are still accepted while the endpoints stop, so that what on_stop sends
        // (a last word to a peer) leaves with the rest; refused from then on.
        self.now = Instant::now();
        for index in 0..self.endpoints.slots.len() {
            self.endpoints.stop(index);
        }
        self.shared.stopped.store(true, Ordering::Release);
        // Give queued frames a bounded time to leave, finishing connects and handshakes
        // under way, so that what was sent before stop() and from on_stop is delivered.
        let deadline = deadline_after(Instant::now(), self.shared.settings.shutdown_flush);
        self.process_commands();
        let mut events = Events::with_capacity(256);
        loop {
            let keys: Vec<ConnKey> = self.connections.keys().copied().collect();
            for key in keys {
                self.flush(key);
            }
            let now = Instant::now();
            self.now = now;
            if !self.has_pending_output() || now >= deadline {
                break;
            }
            let wait = if self.unfinished_reads.is_empty() {
                deadline - now
            } else {
                Duration::ZERO
            };
            // Asleep on the poller as far as producers know, so that what they hand over
            // meanwhile (a flush from on_stop's sends) wakes this wait.
            let poll = &mut self.poll;
            match self
                .shared
                .handoff
                .sleep_unless_pending(|| poll.poll(&mut events, Some(wait)))
            {
                Some(Err(_)) => break,
                Some(Ok(())) => {}
                None => events.clear(),
            }
            self.round += 1;
            self.resume_reads();
            for event in events.iter() {
                self.handle_event(event);
            }
            self.shared.handoff.take_pending();
            self.process_commands();
        }
        let keys: Vec<ConnKey> = self.connections.keys().copied().collect();
        for key in keys {
            self.close(key, CloseReason::Stopping);
        }
        // Whatever is still queued or asked cannot be served any more.
        self.shared.refuse_the_rest();
        info!(address = %self.shared.address, "RPC environment stopped");
    }
}
