//! The piece-fetch state machine of one broadcast on one executor: which piece to ask
//! for next, of whom, what to make of what arrives, and when to give up. No sockets, no
//! clock: the caller passes `now` and carries out the [`Request`]s.
//!
//! As the seeds' `TorrentBroadcast`: pieces are asked for in a random order, each of a
//! random executor that holds it when one does, of the driver otherwise; a piece whose
//! checksum or length is wrong, or whose ask failed or timed out, is asked again. A
//! piece is asked of one peer at most: the driver's list of holders can be stale (an
//! executor lost, or that dropped the value), and however many of those it names, the
//! driver, which holds every piece, is asked next. The driver is asked at most
//! `max_attempts` times before the fetch fails.
//!
//! Each arrival, failure and timeout costs O(1) (amortized): the next piece to ask for
//! is found by a cursor in the order and queues of pieces to ask again, and deadlines
//! by a queue of the asks in the order they were made.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use super::BroadcastError;

/// How a broadcast is cut: its size, its piece size and each piece's CRC32, as the
/// driver declared them, checked against the executor's own bound before anything is
/// allocated for the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    broadcast_id: u64,
    total_size: u64,
    piece_size: u32,
    checksums: Vec<u32>,
}

impl Layout {
    /// The layout the driver declared for `broadcast_id`; refused when the size is above
    /// `max_size` (`broadcast.maxSize`), or when the pieces and checksums do not agree.
    /// `checksums` yields at most one checksum more than the size calls for before the
    /// disagreement is seen: a hostile list is never copied whole.
    pub fn new(
        broadcast_id: u64,
        total_size: u64,
        piece_size: u32,
        checksums: impl ExactSizeIterator<Item = u32>,
        max_size: u64,
    ) -> Result<Layout, BroadcastError> {
        if total_size > max_size {
            return Err(BroadcastError::TooLarge {
                broadcast_id,
                size: total_size,
                limit: max_size,
            });
        }
        let bad = |why: String| BroadcastError::BadLayout { broadcast_id, why };
        if piece_size == 0 && total_size > 0 {
            return Err(bad("pieces of 0 bytes".to_owned()));
        }
        let pieces = if total_size == 0 {
            0
        } else {
            total_size.div_ceil(u64::from(piece_size))
        };
        if pieces > u64::from(flint_wire::MAX_BROADCAST_PIECES) {
            return Err(bad(format!(
                "{pieces} pieces of {piece_size} bytes, more than {}",
                flint_wire::MAX_BROADCAST_PIECES
            )));
        }
        if checksums.len() as u64 != pieces {
            return Err(bad(format!(
                "{} checksums for {pieces} pieces of {piece_size} bytes in {total_size} bytes",
                checksums.len()
            )));
        }
        Ok(Layout {
            broadcast_id,
            total_size,
            piece_size,
            checksums: checksums.collect(),
        })
    }

    /// The layout of `value` cut in pieces of `piece_size` bytes (the driver's side, and
    /// tests').
    pub fn of(broadcast_id: u64, value: &[u8], piece_size: u32) -> Layout {
        let piece_size = piece_size.max(1);
        Layout {
            broadcast_id,
            total_size: value.len() as u64,
            piece_size,
            checksums: value
                .chunks(piece_size as usize)
                .map(crc32fast::hash)
                .collect(),
        }
    }

    /// The broadcast.
    pub fn broadcast_id(&self) -> u64 {
        self.broadcast_id
    }

    /// Its size in bytes.
    pub fn total_size(&self) -> u64 {
        self.total_size
    }

    /// The size of every piece but the last.
    pub fn piece_size(&self) -> u32 {
        self.piece_size
    }

    /// How many pieces.
    pub fn pieces(&self) -> u32 {
        self.checksums.len() as u32
    }

    /// Where piece `piece` lies in the value.
    pub fn range(&self, piece: u32) -> Range<u64> {
        let start = u64::from(piece) * u64::from(self.piece_size);
        start..(start + u64::from(self.piece_size)).min(self.total_size)
    }

    /// Why `data` is not piece `piece`, if it is not.
    pub fn check(&self, piece: u32, data: &[u8]) -> Result<(), String> {
        let Some(&expected) = self.checksums.get(piece as usize) else {
            return Err(format!("the broadcast has no piece {piece}"));
        };
        let range = self.range(piece);
        let len = range.end - range.start;
        if data.len() as u64 != len {
            return Err(format!("{} bytes where {len} were expected", data.len()));
        }
        let crc = crc32fast::hash(data);
        if crc != expected {
            return Err(format!(
                "checksum mismatch: CRC32 {crc:08x} where {expected:08x} was declared"
            ));
        }
        Ok(())
    }
}

/// Who a piece is asked of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The driver's broadcast manager, which holds every piece.
    Driver,
    /// Another executor's block server, by its index among the holders given to
    /// [`FetchPlan::new`].
    Peer(usize),
}

/// An ask to carry out: piece `piece` of `source`, to be answered by `deadline` (then
/// [`FetchPlan::on_timeout`] counts it failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The piece.
    pub piece: u32,
    /// Of whom.
    pub source: Source,
    /// When it is given up on.
    pub deadline: Instant,
}

/// What an arrival came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arrival {
    /// The piece is right: keep it.
    Accepted,
    /// Not the answer awaited (late, after its ask was given up, or unasked): ignore it.
    Stale,
    /// The piece is wrong (checksum, length): dropped, and asked again.
    Rejected(String),
}

/// The limits of a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanLimits {
    /// Asks out at once.
    pub max_in_flight: usize,
    /// Attempts of one piece of the driver before the fetch fails (besides the one of
    /// a peer that may come first).
    pub max_attempts: u32,
    /// How long an ask may take.
    pub ask_timeout: Duration,
    /// How long a piece waits before it is asked of the driver again, after the driver
    /// failed it.
    pub retry_wait: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Wanted,
    InFlight { source: Source, deadline: Instant },
    Done,
}

#[derive(Debug, Clone)]
struct Piece {
    status: Status,
    /// Failed asks, of peers and of the driver.
    attempts: u32,
    /// Failed asks of the driver: what `max_attempts` bounds.
    driver_failures: u32,
    /// Whether a peer was asked: the next ask goes to the driver.
    peer_asked: bool,
    /// Peers that hold it.
    holders: Vec<usize>,
}

/// The fetch of one broadcast's pieces. See the module docs.
#[derive(Debug)]
pub struct FetchPlan {
    layout: Layout,
    pieces: Vec<Piece>,
    /// The pieces in the order they are asked for the first time.
    order: Vec<u32>,
    /// The first piece of `order` not asked for yet.
    cursor: usize,
    /// Pieces a peer failed: asked again (of the driver) at once.
    again: VecDeque<u32>,
    /// Pieces the driver failed, with when they are asked of it again; in that order,
    /// since the wait is the same for all and `now` does not go back.
    waiting: VecDeque<(Instant, u32)>,
    /// The asks made, in order and so by deadline; those answered meanwhile are
    /// skipped as they come to the front.
    asks: VecDeque<(Instant, u32, Source)>,
    limits: PlanLimits,
    in_flight: usize,
    done: u32,
    rng: u64,
}

impl FetchPlan {
    /// A fetch of `layout`'s pieces; `holders[i]` are the pieces peer `i` holds (numbers
    /// out of range are ignored); `seed` decides the random choices.
    pub fn new(layout: Layout, holders: &[Vec<u32>], limits: PlanLimits, seed: u64) -> Self {
        let count = layout.pieces();
        let mut pieces = vec![
            Piece {
                status: Status::Wanted,
                attempts: 0,
                driver_failures: 0,
                peer_asked: false,
                holders: Vec::new(),
            };
            count as usize
        ];
        for (peer, held) in holders.iter().enumerate() {
            for &piece in held {
                if let Some(p) = pieces.get_mut(piece as usize) {
                    if !p.holders.contains(&peer) {
                        p.holders.push(peer);
                    }
                }
            }
        }
        let mut plan = FetchPlan {
            layout,
            pieces,
            order: (0..count).collect(),
            cursor: 0,
            again: VecDeque::new(),
            waiting: VecDeque::new(),
            asks: VecDeque::new(),
            limits: PlanLimits {
                max_in_flight: limits.max_in_flight.max(1),
                max_attempts: limits.max_attempts.max(1),
                ..limits
            },
            in_flight: 0,
            done: 0,
            rng: seed,
        };
        // Fisher-Yates: every executor asks in its own order, so that they soon hold
        // different pieces to serve each other.
        for i in (1..plan.order.len()).rev() {
            let j = (plan.random() % (i as u64 + 1)) as usize;
            plan.order.swap(i, j);
        }
        plan
    }

    /// SplitMix64.
    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The layout fetched.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether every piece arrived right.
    pub fn is_complete(&self) -> bool {
        self.done == self.layout.pieces()
    }

    /// Asks out now.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Counts piece `piece` as held already (by an earlier fetch of the same value
    /// that was given up): it is not asked for. Only before the first request.
    pub fn mark_held(&mut self, piece: u32) {
        if let Some(p) = self.pieces.get_mut(piece as usize) {
            if p.status == Status::Wanted {
                p.status = Status::Done;
                self.done += 1;
            }
        }
    }

    /// The next ask to make now, if the limit on asks out allows one and a piece is
    /// waiting to be asked for.
    pub fn next_request(&mut self, now: Instant) -> Option<Request> {
        if self.in_flight >= self.limits.max_in_flight {
            return None;
        }
        let piece_number = if let Some(piece) = self.again.pop_front() {
            piece
        } else if self.waiting.front().is_some_and(|&(at, _)| at <= now) {
            self.waiting.pop_front()?.1
        } else {
            loop {
                let &piece = self.order.get(self.cursor)?;
                self.cursor += 1;
                if self.pieces[piece as usize].status == Status::Wanted {
                    break piece;
                }
            }
        };
        let holders = {
            let piece = &self.pieces[piece_number as usize];
            if piece.peer_asked {
                0
            } else {
                piece.holders.len()
            }
        };
        let source = if holders == 0 {
            Source::Driver
        } else {
            let i = (self.random() % holders as u64) as usize;
            Source::Peer(self.pieces[piece_number as usize].holders[i])
        };
        let deadline = now + self.limits.ask_timeout;
        let piece = &mut self.pieces[piece_number as usize];
        piece.status = Status::InFlight { source, deadline };
        piece.peer_asked |= source != Source::Driver;
        self.in_flight += 1;
        self.asks.push_back((deadline, piece_number, source));
        Some(Request {
            piece: piece_number,
            source,
            deadline,
        })
    }

    /// What `source` answered for `piece`: checked against the layout.
    pub fn on_arrival(
        &mut self,
        now: Instant,
        piece: u32,
        source: Source,
        data: &[u8],
    ) -> Result<Arrival, BroadcastError> {
        if !self.awaits(piece, source) {
            return Ok(Arrival::Stale);
        }
        match self.layout.check(piece, data) {
            Ok(()) => {
                self.pieces[piece as usize].status = Status::Done;
                self.in_flight -= 1;
                self.done += 1;
                self.drop_answered_asks();
                Ok(Arrival::Accepted)
            }
            Err(why) => {
                self.fail(now, piece, source, &why)?;
                Ok(Arrival::Rejected(why))
            }
        }
    }

    /// The ask of `piece` of `source` failed (an error reply, a closed connection, an
    /// answer that is no piece).
    pub fn on_failure(
        &mut self,
        now: Instant,
        piece: u32,
        source: Source,
        why: &str,
    ) -> Result<(), BroadcastError> {
        if self.awaits(piece, source) {
            self.fail(now, piece, source, why)?;
        }
        Ok(())
    }

    /// Gives up on the asks whose deadline passed.
    pub fn on_timeout(&mut self, now: Instant) -> Result<(), BroadcastError> {
        self.drop_answered_asks();
        while let Some(&(deadline, piece, source)) = self.asks.front() {
            if deadline > now {
                break;
            }
            self.asks.pop_front();
            if self.is_live(deadline, piece, source) {
                let why = format!("no answer within {:?}", self.limits.ask_timeout);
                self.fail(now, piece, source, &why)?;
            }
        }
        Ok(())
    }

    /// When [`FetchPlan::on_timeout`] or [`FetchPlan::next_request`] has something to do
    /// without an arrival: the first deadline of an ask out, or the end of a wait.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = self.asks.front().map(|&(deadline, ..)| deadline);
        let wait = self.waiting.front().map(|&(at, _)| at);
        deadline.into_iter().chain(wait).min()
    }

    /// Whether the ask `(deadline, piece, source)` is still out.
    fn is_live(&self, deadline: Instant, piece: u32, source: Source) -> bool {
        matches!(
            self.pieces[piece as usize].status,
            Status::InFlight { source: s, deadline: d } if s == source && d == deadline
        )
    }

    /// Keeps the front of `asks` an ask still out, so that [`FetchPlan::poll_timeout`]
    /// is its deadline.
    fn drop_answered_asks(&mut self) {
        while let Some(&(deadline, piece, source)) = self.asks.front() {
            if self.is_live(deadline, piece, source) {
                break;
            }
            self.asks.pop_front();
        }
    }

    fn awaits(&self, piece: u32, source: Source) -> bool {
        matches!(
            self.pieces.get(piece as usize).map(|p| &p.status),
            Some(Status::InFlight { source: s, .. }) if *s == source
        )
    }

    fn fail(
        &mut self,
        now: Instant,
        piece_number: u32,
        source: Source,
        why: &str,
    ) -> Result<(), BroadcastError> {
        self.in_flight -= 1;
        let limits = self.limits;
        let piece = &mut self.pieces[piece_number as usize];
        piece.status = Status::Wanted;
        piece.attempts += 1;
        if source == Source::Driver {
            piece.driver_failures += 1;
            if piece.driver_failures >= limits.max_attempts {
                return Err(BroadcastError::PieceFailed {
                    broadcast_id: self.layout.broadcast_id,
                    piece: piece_number,
                    attempts: piece.attempts,
                    last: why.to_owned(),
                });
            }
            // The driver holds every piece: it is asked again, after a wait.
            self.waiting
                .push_back((now + limits.retry_wait, piece_number));
        } else {
            // A peer failed it: the driver next, at once, whatever the other holders.
            self.again.push_back(piece_number);
        }
        self.drop_answered_asks();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: PlanLimits = PlanLimits {
        max_in_flight: 2,
        max_attempts: 3,
        ask_timeout: Duration::from_secs(10),
        retry_wait: Duration::from_millis(500),
    };

    fn value(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn piece<'v>(layout: &Layout, value: &'v [u8], n: u32) -> &'v [u8] {
        let r = layout.range(n);
        &value[r.start as usize..r.end as usize]
    }

    #[test]
    fn a_layout_beyond_the_bound_or_inconsistent_is_refused_before_any_allocation() {
        let too_large = Layout::new(1, 1 << 40, 4 << 20, [].into_iter(), 1 << 30).unwrap_err();
        assert!(
            too_large.to_string().contains("broadcast.maxSize"),
            "{too_large}"
        );
        let counts = Layout::new(1, 10, 4, [1, 2].into_iter(), 100).unwrap_err();
        assert!(
            counts.to_string().contains("2 checksums for 3 pieces"),
            "{counts}"
        );
        assert!(Layout::new(1, 10, 0, [].into_iter(), 100).is_err());
        // Tiny pieces of a large value: refused before a checksum is read.
        let tiny = Layout::new(1, 1 << 30, 1, std::iter::repeat_n(0, 1 << 30), 1 << 30);
        assert!(
            tiny.as_ref()
                .is_err_and(|e| e.to_string().contains("1073741824 pieces")),
            "{tiny:?}"
        );
        let empty = Layout::new(1, 0, 0, [].into_iter(), 100).unwrap();
        assert_eq!(empty.pieces(), 0);
        let ok = Layout::new(1, 10, 4, [1, 2, 3].into_iter(), 10).unwrap();
        assert_eq!((ok.range(0), ok.range(2)), (0..4, 8..10));
    }

    #[test]
    fn every_piece_is_asked_once_in_a_random_order_within_the_in_flight_limit() {
        let data = value(100);
        let layout = Layout::of(7, &data, 10);
        let now = Instant::now();
        let mut plan = FetchPlan::new(layout.clone(), &[], LIMITS, 42);
        let mut asked = Vec::new();
        while !plan.is_complete() {
            let mut batch = Vec::new();
            while let Some(request) = plan.next_request(now) {
                assert_eq!(request.source, Source::Driver, "no peer holds anything");
                batch.push(request.piece);
            }
            assert!(!batch.is_empty() && batch.len() <= LIMITS.max_in_flight);
            for &p in &batch {
                let arrival = plan.on_arrival(now, p, Source::Driver, piece(&layout, &data, p));
                assert_eq!(arrival, Ok(Arrival::Accepted));
            }
            asked.extend(batch);
        }
        let mut sorted = asked.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_ne!(asked, sorted, "seed 42 does not ask in order");
        let other = {
            let mut plan = FetchPlan::new(layout, &[], LIMITS, 43);
            std::iter::from_fn(|| plan.next_request(now).map(|r| r.piece)).collect::<Vec<_>>()
        };
        assert_ne!(other, asked[..2], "another seed, another order");
        assert_eq!(plan.poll_timeout(), None);
    }

    #[test]
    fn peers_that_hold_a_piece_are_asked_before_the_driver() {
        let data = value(40);
        let layout = Layout::of(7, &data, 10);
        let now = Instant::now();
        // Peer 0 holds pieces 0 and 1, peer 1 piece 1; nobody piece 2 or 3 (and 9 is no
        // piece).
        let holders = [vec![0, 1, 9], vec![1]];
        let limits = PlanLimits {
            max_in_flight: 4,
            ..LIMITS
        };
        let mut plan = FetchPlan::new(layout, &holders, limits, 1);
        let mut sources = std::iter::from_fn(|| plan.next_request(now))
            .map(|r| (r.piece, r.source))
            .collect::<Vec<_>>();
        sources.sort_unstable_by_key(|(p, _)| *p);
        assert_eq!(sources[0], (0, Source::Peer(0)));
        assert!(matches!(sources[1], (1, Source::Peer(_))));
        assert_eq!(sources[2], (2, Source::Driver));
        assert_eq!(sources[3], (3, Source::Driver));
    }

    #[test]
    fn a_corrupt_piece_is_rejected_and_asked_of_another_source() {
        let data = value(20);
        let layout = Layout::of(7, &data, 10);
        let now = Instant::now();
        let mut plan = FetchPlan::new(layout.clone(), &[vec![0, 1]], LIMITS, 5);
        let first = plan.next_request(now).unwrap();
        let second = plan.next_request(now).unwrap();
        assert_eq!(
            (first.source, second.source),
            (Source::Peer(0), Source::Peer(0))
        );
        let mut bad = piece(&layout, &data, first.piece).to_vec();
        bad[3] ^= 0x40;
        let arrival = plan
            .on_arrival(now, first.piece, first.source, &bad)
            .unwrap();
        assert!(
            matches!(&arrival, Arrival::Rejected(why) if why.contains("checksum mismatch")),
            "{arrival:?}"
        );
        // A short piece too.
        let short = &piece(&layout, &data, second.piece)[..5];
        let arrival = plan
            .on_arrival(now, second.piece, second.source, short)
            .unwrap();
        assert!(
            matches!(&arrival, Arrival::Rejected(why) if why.contains("5 bytes where 10")),
            "{arrival:?}"
        );
        // Both asked again, of the driver: the peer failed them.
        let again: Vec<Request> = std::iter::from_fn(|| plan.next_request(now)).collect();
        assert_eq!(again.len(), 2);
        for request in again {
            assert_eq!(request.source, Source::Driver);
            let good = piece(&layout, &data, request.piece);
            assert_eq!(
                plan.on_arrival(now, request.piece, Source::Driver, good),
                Ok(Arrival::Accepted)
            );
        }
        assert!(plan.is_complete());
    }

    #[test]
    fn late_and_unasked_answers_are_stale() {
        let data = value(10);
        let layout = Layout::of(7, &data, 10);
        let now = Instant::now();
        let mut plan = FetchPlan::new(layout.clone(), &[vec![0]], LIMITS, 5);
        let request = plan.next_request(now).unwrap();
        // From someone it was not asked of.
        assert_eq!(
            plan.on_arrival(now, 0, Source::Driver, &data),
            Ok(Arrival::Stale)
        );
        assert_eq!(
            plan.on_arrival(now, 4, Source::Peer(0), &data),
            Ok(Arrival::Stale)
        );
        // Timed out, then answered: the answer is stale, the piece asked again.
        let late = request.deadline;
        assert_eq!(plan.poll_timeout(), Some(late));
        plan.on_timeout(late - Duration::from_millis(1)).unwrap();
        assert_eq!(plan.in_flight(), 1, "not yet");
        plan.on_timeout(late).unwrap();
        assert_eq!(plan.in_flight(), 0);
        assert_eq!(
            plan.on_arrival(late, 0, Source::Peer(0), &data),
            Ok(Arrival::Stale)
        );
        let again = plan.next_request(late).unwrap();
        assert_eq!(again.source, Source::Driver);
        assert_eq!(
            plan.on_arrival(late, 0, Source::Driver, &data),
            Ok(Arrival::Accepted)
        );
    }

    #[test]
    fn the_driver_is_asked_again_after_a_wait_and_attempts_are_bounded() {
        let data = value(10);
        let layout = Layout::of(9, &data, 10);
        let t0 = Instant::now();
        let mut plan = FetchPlan::new(layout, &[], LIMITS, 5);
        let first = plan.next_request(t0).unwrap();
        plan.on_failure(t0, first.piece, Source::Driver, "connection refused")
            .unwrap();
        assert_eq!(plan.next_request(t0), None, "waits before asking again");
        let wait = t0 + LIMITS.retry_wait;
        assert_eq!(plan.poll_timeout(), Some(wait));
        assert_eq!(plan.next_request(wait - Duration::from_millis(1)), None);
        let second = plan.next_request(wait).unwrap();
        assert_eq!(second.source, Source::Driver);
        // A failure for another piece, or of another source, changes nothing.
        plan.on_failure(wait, 3, Source::Driver, "x").unwrap();
        plan.on_failure(wait, 0, Source::Peer(0), "x").unwrap();
        assert_eq!(plan.in_flight(), 1);
        let bad = vec![0u8; 10];
        assert!(matches!(
            plan.on_arrival(wait, 0, Source::Driver, &bad),
            Ok(Arrival::Rejected(_))
        ));
        let t2 = wait + LIMITS.retry_wait;
        plan.next_request(t2).unwrap();
        let error = plan
            .on_failure(t2, 0, Source::Driver, "Block broadcast_9_piece0 not found")
            .unwrap_err();
        assert_eq!(
            error,
            BroadcastError::PieceFailed {
                broadcast_id: 9,
                piece: 0,
                attempts: 3,
                last: "Block broadcast_9_piece0 not found".into()
            }
        );
        let text = error.to_string();
        assert!(
            text.contains("broadcast_9_piece0") && text.contains("3 attempts"),
            "{text}"
        );
    }

    #[test]
    fn a_piece_is_asked_of_one_peer_at_most_then_of_the_driver_however_many_hold_it() {
        let data = value(20);
        let layout = Layout::of(7, &data, 10);
        let now = Instant::now();
        // Four stale holders of everything, and the driver may be asked once only.
        let holders = vec![vec![0, 1]; 4];
        let limits = PlanLimits {
            max_attempts: 1,
            ..LIMITS
        };
        let mut plan = FetchPlan::new(layout.clone(), &holders, limits, 3);
        let first: Vec<Request> = std::iter::from_fn(|| plan.next_request(now)).collect();
        assert_eq!(first.len(), 2);
        for request in first {
            assert!(matches!(request.source, Source::Peer(_)));
            plan.on_failure(now, request.piece, request.source, "connection refused")
                .unwrap();
        }
        for _ in 0..2 {
            let request = plan.next_request(now).unwrap();
            assert_eq!(request.source, Source::Driver, "no second peer");
            let good = piece(&layout, &data, request.piece);
            assert_eq!(
                plan.on_arrival(now, request.piece, Source::Driver, good),
                Ok(Arrival::Accepted)
            );
        }
        assert!(plan.is_complete());
    }

    #[test]
    fn held_pieces_are_not_asked_and_timeouts_only_look_at_asks_out() {
        let data = value(40);
        let layout = Layout::of(7, &data, 10);
        let t0 = Instant::now();
        let mut plan = FetchPlan::new(layout.clone(), &[], LIMITS, 9);
        plan.mark_held(1);
        plan.mark_held(2);
        let first = plan.next_request(t0).unwrap();
        let t1 = t0 + Duration::from_secs(1);
        let second = plan.next_request(t1).unwrap();
        let mut asked = [first.piece, second.piece];
        asked.sort_unstable();
        assert_eq!(asked, [0, 3]);
        // The first answered: the next deadline is the second's.
        let good = piece(&layout, &data, first.piece);
        assert_eq!(
            plan.on_arrival(t1, first.piece, Source::Driver, good),
            Ok(Arrival::Accepted)
        );
        assert_eq!(plan.poll_timeout(), Some(second.deadline));
        plan.on_timeout(first.deadline).unwrap();
        assert_eq!(plan.in_flight(), 1, "the answered ask is not timed out");
        plan.on_timeout(second.deadline).unwrap();
        assert_eq!(plan.in_flight(), 0);
        let wait = second.deadline + LIMITS.retry_wait;
        assert_eq!(plan.poll_timeout(), Some(wait));
        assert_eq!(plan.next_request(wait).unwrap().piece, second.piece);
    }

    #[test]
    fn the_most_pieces_cost_linear_work() {
        // 65,536 pieces with a timeout check and a poll after each arrival: quadratic
        // work (a scan of every piece each time) would take minutes here.
        let count = flint_wire::MAX_BROADCAST_PIECES;
        let layout = Layout::new(1, u64::from(count), 1, (0..count).map(|_| 0), u64::MAX).unwrap();
        let zero = [0u8];
        let layout = Layout {
            checksums: vec![crc32fast::hash(&zero); count as usize],
            ..layout
        };
        let limits = PlanLimits {
            max_in_flight: 8,
            ..LIMITS
        };
        let now = Instant::now();
        let mut plan = FetchPlan::new(layout, &[], limits, 1);
        let mut out = std::collections::VecDeque::new();
        let mut arrivals = 0u32;
        while !plan.is_complete() {
            plan.on_timeout(now).unwrap();
            while let Some(request) = plan.next_request(now) {
                out.push_back(request.piece);
            }
            let p = out.pop_front().unwrap();
            assert_eq!(
                plan.on_arrival(now, p, Source::Driver, &zero),
                Ok(Arrival::Accepted)
            );
            let _ = plan.poll_timeout();
            arrivals += 1;
        }
        assert_eq!(arrivals, count);
    }

    #[test]
    fn an_empty_broadcast_is_complete_at_once() {
        let layout = Layout::of(1, &[], 10);
        let mut plan = FetchPlan::new(layout, &[], LIMITS, 0);
        assert!(plan.is_complete());
        assert_eq!(plan.next_request(Instant::now()), None);
    }
}
