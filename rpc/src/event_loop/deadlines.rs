//! Where a connection's deadlines are decided: by when it must be connected
//! (`rpc.connect.timeout`), authenticated (`authenticate.timeout`), have sent more of the
//! frame under way (`network.timeout`, then [`MIN_FRAME_RATE`]), or have sent anything at
//! all (`rpc.io.idleTimeout`); and how a wait for the receive budget
//! (`rpc.io.maxReceiveBytes`) bends them, since that wait is not the peer's doing.
//!
//! [`ConnState`] is that state without the socket: it reads no clock and does no I/O.
//! The loop tells it what happened and when (bytes in, a frame whole, a reservation made
//! or refused), passing `now` and byte counts, and asks it when the connection must next
//! be looked at ([`ConnState::deadline`]) and, then, whether it must close and why
//! ([`ConnState::overdue`]). So every timeout rule is tested here on made-up instants,
//! and the socket tests only show that the loop wires it up.

use std::time::{Duration, Instant};

use super::close::CloseReason;
use crate::auth::Handshake;
use crate::settings::Settings;
use crate::timer::deadline_after;

/// The slowest a frame may arrive, on average, once `network.timeout` has passed since
/// its first bytes: by any moment, each second past `network.timeout` must have brought
/// a MiB of it. Without it, a peer that sends a byte now and then, never stalling for
/// `network.timeout`, would hold its connection (one of `rpc.io.maxConnections`) for
/// good, and a large frame's reservation in the receive budget with it; with it, holding
/// a frame open longer than `network.timeout` costs a peer the bandwidth of sending it.
/// 1 MiB/s is 8 Mbit/s, slower than any link a cluster's control plane runs on. The loop
/// reads a connection [`READ_BUDGET`](super::read_write::READ_BUDGET) at a time, and
/// turns again at once while one has more, so only a loop that managed fewer than four
/// turns a second would fall below it itself, and a peer whose bytes wait unread is read
/// before it is held to it. A loop that stalls for longer than `network.timeout` (an
/// endpoint that blocks it) can still cut off peers with frames under way, as their
/// asks and heartbeats would time out.
pub(super) const MIN_FRAME_RATE: u64 = 1 << 20;

/// The time a byte of a frame buys at [`MIN_FRAME_RATE`], in nanoseconds (10^9 / 2^20,
/// rounded up).
const NANOS_PER_BYTE: u64 = 1_000_000_000_u64.div_ceil(MIN_FRAME_RATE);

/// When the frame under way on a connection started to arrive, and when it is too slow
/// unless more of it has come by then.
#[derive(Debug, Clone, Copy)]
struct FrameClock {
    started: Instant,
    due: Instant,
}

impl FrameClock {
    /// The clock of a frame whose first bytes came at `started` and of which `received`
    /// bytes are in: `network.timeout` after its start, plus the time those bytes buy.
    fn new(started: Instant, settings: &Settings, received: usize) -> Self {
        let earned = Duration::from_nanos((received as u64).saturating_mul(NANOS_PER_BYTE));
        FrameClock {
            started,
            due: deadline_after(
                started,
                settings.stalled_frame_timeout.saturating_add(earned),
            ),
        }
    }
}

/// Whether a connection this environment opens is connected yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not yet; given up at `deadline` (rpc.connect.timeout).
    Connecting {
        deadline: Instant,
    },
    Open,
}

/// A connection's state apart from its socket: its phase, its handshake, the frame under
/// way and its place in the receive budget, and the deadlines they set.
pub(super) struct ConnState {
    phase: Phase,
    /// Present while the peer has not yet proved it knows the secret.
    handshake: Option<Handshake>,
    /// When the handshake must be done by (authenticate.timeout), while it is under way.
    handshake_deadline: Option<Instant>,
    /// When the peer must have sent more by (network.timeout), while part of a frame is
    /// buffered: a peer that stops in the middle of a frame would otherwise hold what it
    /// sent, up to `rpc.message.maxSize`, for as long as it keeps the connection open.
    frame_deadline: Option<Instant>,
    /// When a connection from a peer must have sent something, or taken something it was
    /// sent, by (rpc.io.idleTimeout), moved on by every read and every write that made
    /// progress; `None` for connections this environment opened, and when silent peers
    /// are kept. Without it, peers that connect and say nothing would hold
    /// all of `rpc.io.maxConnections`.
    idle_deadline: Option<Instant>,
    /// Bytes of the receive budget held for the large frame under way (0: none).
    reserved: usize,
    /// When the frame under way must be in by, however steadily it comes (see
    /// [`MIN_FRAME_RATE`]); `None` between frames.
    frame_clock: Option<FrameClock>,
    /// The next frame is large and the receive budget has no room for it: the
    /// connection is not read until the budget admits it. Its peer is held only to the
    /// stalled-frame deadline meanwhile, and only if it has sent nothing more (see
    /// [`ConnState::waiting_peer_sent_more`]): the wait is not its doing.
    awaiting_budget: bool,
}

impl ConnState {
    /// An open connection that has sent and received nothing yet, with no deadline.
    pub(super) fn open() -> Self {
        ConnState {
            phase: Phase::Open,
            handshake: None,
            handshake_deadline: None,
            frame_deadline: None,
            idle_deadline: None,
            reserved: 0,
            frame_clock: None,
            awaiting_budget: false,
        }
    }

    /// A connection this environment started to open at `now`: given up at
    /// `rpc.connect.timeout` unless [`ConnState::connected`] by then.
    pub(super) fn connecting(now: Instant, settings: &Settings) -> Self {
        ConnState {
            phase: Phase::Connecting {
                deadline: deadline_after(now, settings.connect_timeout),
            },
            ..ConnState::open()
        }
    }

    /// Whether the connection is connected (always, for one from a peer).
    pub(super) fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// The connection this environment opened is connected.
    pub(super) fn connected(&mut self) {
        self.phase = Phase::Open;
    }

    /// Holds a connection from a peer, accepted at `now`, to `rpc.io.idleTimeout` (when
    /// silent peers are not kept): it must send something, or take something it was
    /// sent, before then, and again within the timeout of each time it did.
    pub(super) fn watch_idleness(&mut self, now: Instant, settings: &Settings) {
        self.idle_deadline = settings
            .idle_timeout
            .map(|timeout| deadline_after(now, timeout));
    }

    /// The peer is to prove, from `now`, that it knows the secret: by
    /// `authenticate.timeout`, the deadline this returns.
    pub(super) fn start_handshake(
        &mut self,
        handshake: Handshake,
        now: Instant,
        settings: &Settings,
    ) -> Instant {
        let deadline = deadline_after(now, settings.auth_timeout);
        self.handshake = Some(handshake);
        self.handshake_deadline = Some(deadline);
        deadline
    }

    /// The handshake under way, if the peer has not authenticated yet.
    pub(super) fn handshake_mut(&mut self) -> Option<&mut Handshake> {
        self.handshake.as_mut()
    }

    /// Whether the peer has yet to prove it knows the secret: until then only handshake
    /// frames go either way.
    pub(super) fn is_authenticating(&self) -> bool {
        self.handshake.is_some()
    }

    /// The peer proved it knows the secret.
    pub(super) fn end_handshake(&mut self) {
        self.handshake = None;
        self.handshake_deadline = None;
    }

    /// Bytes came from the peer, or it took some it was sent, at `now`: a connection from
    /// a peer is not idle before `now` + `idle_timeout` (rpc.io.idleTimeout).
    pub(super) fn moved_at(&mut self, now: Instant, settings: &Settings) {
        if let (Some(deadline), Some(timeout)) =
            (self.idle_deadline.as_mut(), settings.idle_timeout)
        {
            *deadline = deadline_after(now, timeout);
        }
    }

    /// Bytes arrived at `now`, and every whole frame among them was taken: `buffered`
    /// bytes of the next frame are in (none: the connection is between frames). Returns
    /// the frame's new stall deadline, if one is under way.
    pub(super) fn partial_frame(
        &mut self,
        now: Instant,
        buffered: usize,
        settings: &Settings,
    ) -> Option<Instant> {
        // The peer has network.timeout from now to send the rest of a frame it is in the
        // middle of.
        self.frame_deadline =
            (buffered > 0).then(|| deadline_after(now, settings.stalled_frame_timeout));
        // The frame's own clock, from its first bytes (which nothing sent later moves),
        // its due time moved on by the bytes in. Never before `frame_deadline` when first
        // set, and only later after that.
        if self.frame_deadline.is_some() {
            let started = self.frame_clock.map_or(now, |clock| clock.started);
            self.frame_clock = Some(FrameClock::new(started, settings, buffered));
        }
        self.frame_deadline
    }

    /// A frame is whole: the next one's clock starts with its own first bytes. Returns
    /// the bytes of the receive budget the frame held, to be given back (0: none).
    pub(super) fn frame_arrived(&mut self) -> usize {
        self.frame_clock = None;
        std::mem::take(&mut self.reserved)
    }

    /// How long, at `now`, the frame under way has been: since its first bytes, or since
    /// the receive budget let it in after a wait (zero between frames). A frame its peer
    /// abandons after long enough holding room counts against its host (see
    /// [`Unfinished`](crate::receive_budget::Unfinished)).
    pub(super) fn frame_under_way(&self, now: Instant) -> Duration {
        self.frame_clock.map_or(Duration::ZERO, |clock| {
            now.saturating_duration_since(clock.started)
        })
    }

    /// Bytes of the receive budget held for the frame under way (0: none).
    pub(super) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Whether the connection waits, unread, for room in the receive budget.
    pub(super) fn awaiting_budget(&self) -> bool {
        self.awaiting_budget
    }

    /// The receive budget holds `bytes` for the frame under way.
    pub(super) fn reserve(&mut self, bytes: usize) {
        self.reserved = bytes;
    }

    /// The receive budget has no room for the frame under way: the connection waits,
    /// unread.
    pub(super) fn wait_for_budget(&mut self) {
        self.awaiting_budget = true;
    }

    /// The receive budget admitted the waiting connection with `bytes` held for its
    /// frame.
    pub(super) fn admitted(&mut self, bytes: usize) {
        self.awaiting_budget = false;
        self.reserved = bytes;
    }

    /// An admitted connection is read on from `now`, with `buffered` bytes of its frame
    /// in: held to the reading deadlines from now, as if it had just read, since the
    /// wait was not its peer's doing. Returns its new deadline.
    pub(super) fn read_on_after_wait(
        &mut self,
        now: Instant,
        buffered: usize,
        settings: &Settings,
    ) -> Option<Instant> {
        self.frame_clock = Some(FrameClock::new(now, settings, buffered));
        self.frame_deadline = Some(deadline_after(now, settings.stalled_frame_timeout));
        self.moved_at(now, settings);
        self.deadline()
    }

    /// At its frame's stall deadline, a connection waiting for the receive budget with
    /// `unread` bytes from its peer in the kernel: if there are any, it is held back by
    /// this side, not silent, and its deadline moves on (true). A waiting peer with
    /// nothing unread has sent nothing since its frame's header; closing it at the
    /// deadline keeps a peer that sends a header and falls silent from holding the
    /// queue, and the budget once admitted.
    pub(super) fn waiting_peer_sent_more(
        &mut self,
        now: Instant,
        unread: usize,
        settings: &Settings,
    ) -> bool {
        if !self.awaiting_budget || unread == 0 {
            return false;
        }
        self.frame_deadline = Some(deadline_after(now, settings.stalled_frame_timeout));
        true
    }

    /// When the connection must have got further by: connected, authenticated, sent more
    /// of the frame under way (fast enough, see [`MIN_FRAME_RATE`]), or sent anything at
    /// all. A connection waiting for the receive budget is not read: its only reading
    /// deadline is the frame's, at which the loop looks whether its peer sent more
    /// meanwhile.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Connecting { deadline } => Some(deadline),
            Phase::Open if self.awaiting_budget => [self.handshake_deadline, self.frame_deadline]
                .into_iter()
                .flatten()
                .min(),
            Phase::Open => [
                self.handshake_deadline,
                self.frame_deadline,
                self.frame_clock.map(|clock| clock.due),
                self.idle_deadline,
            ]
            .into_iter()
            .flatten()
            .min(),
        }
    }

    /// Why the connection must be closed at `now`, if one of its deadlines has passed;
    /// `buffered` and `frame_len` (the frame under way's length, if its header is in)
    /// only go into the reason.
    pub(super) fn overdue(
        &self,
        now: Instant,
        settings: &Settings,
        buffered: usize,
        frame_len: Option<usize>,
    ) -> Option<CloseReason> {
        let passed = |deadline: Option<Instant>| deadline.is_some_and(|d| d <= now);
        match self.phase {
            Phase::Connecting { deadline } => {
                (deadline <= now).then_some(CloseReason::ConnectTimeout(settings.connect_timeout))
            }
            Phase::Open if passed(self.handshake_deadline) => {
                Some(CloseReason::AuthTimeout(settings.auth_timeout))
            }
            Phase::Open if self.awaiting_budget && !passed(self.frame_deadline) => None,
            Phase::Open if passed(self.frame_deadline) => Some(CloseReason::StalledFrame {
                timeout: settings.stalled_frame_timeout,
                buffered,
            }),
            Phase::Open if passed(self.frame_clock.map(|clock| clock.due)) => {
                Some(CloseReason::SlowFrame {
                    frame_len,
                    buffered,
                })
            }
            Phase::Open if passed(self.idle_deadline) => {
                settings.idle_timeout.map(CloseReason::Idle)
            }
            Phase::Open => None,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::auth::random_nonce;
    use crate::conf::Conf;
    use std::sync::Arc;

    const SEC: Duration = Duration::from_secs(1);
    const MIB: usize = 1 << 20;

    /// rpc.connect.timeout 5 s, authenticate.timeout 3 s, network.timeout 10 s,
    /// rpc.io.idleTimeout 20 s.
    fn settings() -> Settings {
        let mut settings = Settings::from_conf(&Conf::new()).unwrap();
        settings.connect_timeout = 5 * SEC;
        settings.auth_timeout = 3 * SEC;
        settings.stalled_frame_timeout = 10 * SEC;
        settings.idle_timeout = Some(20 * SEC);
        settings
    }

    fn at(start: Instant, secs: u64) -> Instant {
        start + SEC * secs as u32
    }

    /// A connection from a peer, accepted at `start`.
    fn accepted(start: Instant, settings: &Settings) -> ConnState {
        let mut state = ConnState::open();
        state.watch_idleness(start, settings);
        state
    }

    fn handshake() -> Handshake {
        Handshake::accepting(Arc::from(&b"secret"[..]), random_nonce().unwrap(), false)
    }

    /// Why `state` closes at `now`, in a word (the byte counts only go into the reason).
    fn overdue(state: &ConnState, now: Instant, settings: &Settings) -> Option<&'static str> {
        state
            .overdue(now, settings, 100, Some(MIB))
            .map(|reason| match reason {
                CloseReason::ConnectTimeout(_) => "connect",
                CloseReason::AuthTimeout(_) => "auth",
                CloseReason::StalledFrame { .. } => "stalled",
                CloseReason::SlowFrame { .. } => "slow",
                CloseReason::Idle(_) => "idle",
                _ => "other",
            })
    }

    #[test]
    fn a_connection_not_made_within_the_connect_timeout_is_given_up() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = ConnState::connecting(start, &settings);
        assert!(!state.is_open());
        assert_eq!(state.deadline(), Some(at(start, 5)));
        assert_eq!(overdue(&state, at(start, 4), &settings), None);
        assert_eq!(overdue(&state, at(start, 5), &settings), Some("connect"));
        // Connected: a connection this environment opened is not held to idleness.
        state.connected();
        assert!(state.is_open());
        assert_eq!(state.deadline(), None);
        assert_eq!(overdue(&state, at(start, 3600), &settings), None);
    }

    #[test]
    fn a_peer_that_does_not_authenticate_within_the_handshake_timeout_is_cut_off() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        assert_eq!(
            state.start_handshake(handshake(), start, &settings),
            at(start, 3)
        );
        assert!(state.is_authenticating() && state.handshake_mut().is_some());
        assert_eq!(state.deadline(), Some(at(start, 3)));
        assert_eq!(overdue(&state, at(start, 2), &settings), None);
        // Bytes of the handshake do not put it off.
        state.moved_at(at(start, 2), &settings);
        state.partial_frame(at(start, 2), 10, &settings);
        assert_eq!(overdue(&state, at(start, 3), &settings), Some("auth"));
        // Done in time: the peer is held to the other deadlines only.
        state.end_handshake();
        assert!(!state.is_authenticating());
        assert_eq!(overdue(&state, at(start, 3), &settings), None);
        assert_eq!(state.deadline(), Some(at(start, 12)));
    }

    #[test]
    fn a_silent_peer_is_cut_off_at_the_idle_timeout_and_each_move_puts_it_off() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        assert_eq!(state.deadline(), Some(at(start, 20)));
        assert_eq!(overdue(&state, at(start, 19), &settings), None);
        assert_eq!(overdue(&state, at(start, 20), &settings), Some("idle"));
        // A read, or a write it took, at 15 s.
        state.moved_at(at(start, 15), &settings);
        assert_eq!(state.deadline(), Some(at(start, 35)));
        assert_eq!(overdue(&state, at(start, 34), &settings), None);
        assert_eq!(overdue(&state, at(start, 35), &settings), Some("idle"));
    }

    #[test]
    fn silent_peers_are_kept_when_the_idle_timeout_is_off() {
        let start = Instant::now();
        let settings = Settings {
            idle_timeout: None,
            ..settings()
        };
        let mut state = accepted(start, &settings);
        state.moved_at(at(start, 1), &settings);
        assert_eq!(state.deadline(), None);
        assert_eq!(overdue(&state, at(start, 3600), &settings), None);
    }

    #[test]
    fn a_peer_that_stops_in_the_middle_of_a_frame_is_cut_off_at_the_network_timeout() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        // Part of a frame at 1 s, then nothing.
        assert_eq!(
            state.partial_frame(at(start, 1), 100, &settings),
            Some(at(start, 11))
        );
        assert_eq!(state.deadline(), Some(at(start, 11)));
        assert_eq!(overdue(&state, at(start, 10), &settings), None);
        assert_eq!(overdue(&state, at(start, 11), &settings), Some("stalled"));
        assert!(matches!(
            state.overdue(at(start, 11), &settings, 100, None),
            Some(CloseReason::StalledFrame { timeout, buffered: 100 }) if timeout == 10 * SEC
        ));
        // More of it at 6 s puts the stall deadline off, not the frame's clock, which
        // started with its first bytes: past 11 s, the frame is late for its size.
        state.moved_at(at(start, 6), &settings);
        assert_eq!(
            state.partial_frame(at(start, 6), 200, &settings),
            Some(at(start, 16))
        );
        assert_eq!(overdue(&state, at(start, 11), &settings), None);
        assert_eq!(overdue(&state, at(start, 12), &settings), Some("slow"));
        // The frame came whole at 7 s instead, nothing of the next one: no frame deadline.
        assert_eq!(state.frame_arrived(), 0);
        assert_eq!(state.partial_frame(at(start, 7), 0, &settings), None);
        assert_eq!(state.deadline(), Some(at(start, 26)), "the idle deadline");
    }

    #[test]
    fn past_the_network_timeout_a_frame_must_come_at_1_mib_a_second() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        // A byte a second from 0 s, never stalling: the frame is due 10 s after its first
        // bytes, plus the little time its bytes buy.
        let mut received = 0;
        for second in 0..=10 {
            received += 1;
            state.moved_at(at(start, second), &settings);
            state.partial_frame(at(start, second), received, &settings);
            assert_eq!(overdue(&state, at(start, second), &settings), None);
        }
        let earned = Duration::from_nanos(received as u64 * NANOS_PER_BYTE);
        assert_eq!(state.deadline(), Some(at(start, 10) + earned));
        assert_eq!(
            overdue(&state, at(start, 10) + earned, &settings),
            Some("slow")
        );
        assert!(matches!(
            state.overdue(at(start, 11), &settings, received, Some(MIB)),
            Some(CloseReason::SlowFrame {
                frame_len: Some(MIB),
                buffered: 11
            })
        ));
        // A frame coming at 2 MiB/s is kept long past the network timeout: each MiB in
        // buys it a second.
        let mut state = accepted(start, &settings);
        for second in 0..=60 {
            state.moved_at(at(start, second), &settings);
            state.partial_frame(
                at(start, second),
                (second + 1) as usize * 2 * MIB,
                &settings,
            );
            assert_eq!(overdue(&state, at(start, second), &settings), None);
        }
        // One coming at half a MiB a second falls behind: at 22 s, its 11.5 MiB have
        // bought it 11.5 s past the 10 s, and it is late.
        let mut state = accepted(start, &settings);
        let cut = (0..=60).find(|&second| {
            state.moved_at(at(start, second), &settings);
            state.partial_frame(
                at(start, second),
                (second + 1) as usize * MIB / 2,
                &settings,
            );
            overdue(&state, at(start, second), &settings).is_some()
        });
        assert_eq!(cut, Some(22));
        assert_eq!(overdue(&state, at(start, 22), &settings), Some("slow"));
    }

    #[test]
    fn each_frame_s_clock_starts_with_its_own_first_bytes() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        // Frames in pieces for a minute, part of the next one always in: no frame is older
        // than 5 s when it is whole.
        for second in (0..60).step_by(5) {
            state.moved_at(at(start, second), &settings);
            state.partial_frame(at(start, second), 10, &settings);
            assert_eq!(overdue(&state, at(start, second + 4), &settings), None);
            assert_eq!(state.frame_arrived(), 0);
            state.partial_frame(at(start, second + 4), 10, &settings);
        }
        assert_eq!(overdue(&state, at(start, 60), &settings), None);
    }

    #[test]
    fn a_frame_s_reservation_is_given_back_when_it_is_whole() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        state.partial_frame(start, 100, &settings);
        state.reserve(2 * MIB);
        assert_eq!(state.reserved(), 2 * MIB);
        assert_eq!(state.frame_arrived(), 2 * MIB);
        assert_eq!(state.reserved(), 0);
        assert_eq!(state.frame_arrived(), 0, "given back once");
    }

    #[test]
    fn a_connection_waiting_for_the_receive_budget_is_held_only_to_its_frame_deadline() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        // The header of a large frame at 1 s; no room in the budget.
        state.moved_at(at(start, 1), &settings);
        state.partial_frame(at(start, 1), 64, &settings);
        state.wait_for_budget();
        assert!(state.awaiting_budget());
        // Not read meanwhile: neither its idleness nor its frame's clock counts, only
        // its frame's stall deadline, at which the loop looks whether it sent more.
        assert_eq!(state.deadline(), Some(at(start, 11)));
        assert_eq!(overdue(&state, at(start, 10), &settings), None);
        // It did (bytes wait unread in the kernel): held back by this side, not silent.
        assert!(state.waiting_peer_sent_more(at(start, 11), 4096, &settings));
        assert_eq!(state.deadline(), Some(at(start, 21)));
        assert!(state.waiting_peer_sent_more(at(start, 21), 4096, &settings));
        // Past its idle deadline (21 s) and its frame's clock (11 s), it still waits.
        assert_eq!(overdue(&state, at(start, 30), &settings), None);
        // Its peer sent nothing more: cut off at the frame deadline.
        assert!(!state.waiting_peer_sent_more(at(start, 31), 0, &settings));
        assert_eq!(overdue(&state, at(start, 31), &settings), Some("stalled"));
    }

    /// What the receive budget weighs when a peer abandons a frame: how long it has
    /// been under way, from its first bytes, or from its admission after a wait.
    #[test]
    fn a_frame_is_under_way_from_its_first_bytes_or_its_admission() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        assert_eq!(state.frame_under_way(at(start, 5)), Duration::ZERO);
        state.partial_frame(at(start, 1), 64, &settings);
        // More bytes do not move its start.
        state.partial_frame(at(start, 3), 4096, &settings);
        assert_eq!(state.frame_under_way(at(start, 4)), 3 * SEC);
        state.wait_for_budget();
        assert_eq!(
            state.frame_under_way(at(start, 9)),
            8 * SEC,
            "while it waits"
        );
        state.admitted(4 * MIB);
        state.read_on_after_wait(at(start, 10), 4096, &settings);
        assert_eq!(state.frame_under_way(at(start, 12)), 2 * SEC);
        state.frame_arrived();
        assert_eq!(state.frame_under_way(at(start, 13)), Duration::ZERO);
    }

    #[test]
    fn an_admitted_connection_is_timed_from_its_admission() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        state.partial_frame(at(start, 1), 64, &settings);
        state.wait_for_budget();
        assert!(state.waiting_peer_sent_more(at(start, 11), 1, &settings));
        // Admitted at 15 s, with 4 MiB held: its frame's clock, its stall deadline and
        // its idleness start then, as if it had just read.
        state.admitted(4 * MIB);
        assert!(!state.awaiting_budget());
        assert_eq!(state.reserved(), 4 * MIB);
        assert_eq!(
            state.read_on_after_wait(at(start, 15), 64, &settings),
            Some(at(start, 25))
        );
        assert_eq!(overdue(&state, at(start, 24), &settings), None);
        assert_eq!(overdue(&state, at(start, 25), &settings), Some("stalled"));
        // A connection that does not wait is not asked whether its peer sent more.
        assert!(!state.waiting_peer_sent_more(at(start, 16), 1, &settings));
    }

    #[test]
    fn the_handshake_timeout_comes_first_even_for_a_waiting_connection() {
        let (start, settings) = (Instant::now(), settings());
        let mut state = accepted(start, &settings);
        state.start_handshake(handshake(), start, &settings);
        state.partial_frame(start, 64, &settings);
        state.wait_for_budget();
        assert_eq!(state.deadline(), Some(at(start, 3)));
        assert_eq!(overdue(&state, at(start, 3), &settings), Some("auth"));
    }
}
