//! The transport's figures beside their floor, measured in alternating rounds, as
//! `flint bench` prints them:
//!
//! - an ask over loopback to an endpoint of another environment that answers with the
//!   ask's own 128-byte payload ([`Echo`]), round trip median;
//! - the floor: a raw blocking std::net ping-pong of the ask's and the reply's frame
//!   sizes, both threads on one CPU (the faster placement on the virtual machines flint
//!   is developed on; see [`crate::bench::BlockingFloor`]);
//! - one-way sends of the same message to the same endpoint, each batch closed by an
//!   ask (so that every message arrived), in messages per second.
//!
//! This machine's speed moves between phases lasting seconds (other guests on the
//! host), so one measurement after the other compares two phases as often as two
//! programs. Here each round measures all three, one after the other, and the ratio is
//! the median of the rounds' own ratios. The criterion bench `rpc` measures the same
//! things one after the other, with criterion's statistics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flint_rpc::{Conf, Endpoint, EndpointContext, Incoming, RpcEnv, RpcError};
use flint_wire::{ArchivedMessage, Encoder, Message, Route};

use crate::bench::{pin_to_one_cpu, RawPingPong};

/// Bytes of the payload of the ask and of every one-way message.
pub const PAYLOAD: usize = 128;

/// Answers an ask with its own payload (a view of the request frame, not a copy), any
/// other ask with an Ack, and counts every message it receives.
#[derive(Debug, Default)]
pub struct Echo {
    /// Messages received, asks included.
    pub received: Arc<AtomicU64>,
}

impl Endpoint for Echo {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        self.received.fetch_add(1, Ordering::Relaxed);
        if !message.is_ask() {
            return;
        }
        let _ = match message.message() {
            ArchivedMessage::Custom { tag, body } => {
                let body = message.frame().bytes_of(body.as_slice());
                message.reply(&Message::Custom {
                    tag: tag.to_native(),
                    body,
                })
            }
            _ => message.reply(&Message::Ack { ok: true }),
        };
    }
}

/// The message the transport figures send: a 128-byte payload.
pub fn payload_message() -> Message {
    Message::Custom {
        tag: 1,
        body: Bytes::from(vec![0x42; PAYLOAD]),
    }
}

/// Bytes of the ask's frame to an endpoint called `endpoint`, and of [`Echo`]'s reply.
pub fn ask_frame_sizes(endpoint: &str) -> (usize, usize) {
    let len = |route: &Route| {
        let mut out = BytesMut::new();
        Encoder::new(usize::MAX)
            .encode(route, &payload_message(), &mut out)
            .expect("a 128-byte message encodes")
    };
    (
        len(&Route::Ask {
            request_id: 1,
            endpoint: endpoint.into(),
        }),
        len(&Route::Reply { request_id: 1 }),
    )
}

/// How many of each thing one round measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportRounds {
    /// Rounds.
    pub rounds: usize,
    /// Asks, and raw round trips, per round.
    pub round_trips: usize,
    /// One-way messages per round.
    pub one_way: u64,
}

impl Default for TransportRounds {
    fn default() -> Self {
        TransportRounds {
            rounds: 9,
            round_trips: 1_000,
            one_way: 100_000,
        }
    }
}

/// The transport's figures: medians over the rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransportReport {
    /// Bytes of the ask's frame and of the reply's.
    pub frames: (usize, usize),
    /// Ask round trip, median of the rounds' medians, in microseconds.
    pub ask_us: f64,
    /// The raw blocking ping-pong on one CPU, likewise.
    pub floor_us: f64,
    /// Median of the rounds' ask / floor ratios.
    pub ask_ratio: f64,
    /// The lowest and the highest of the rounds' ratios.
    pub ask_ratio_range: (f64, f64),
    /// One-way messages per second, median of the rounds.
    pub one_way_per_sec: f64,
    /// The slowest round's one-way rate.
    pub one_way_min_per_sec: f64,
}

/// Measures the transport in alternating rounds (see the module's documentation), with
/// two environments configured by `conf` in this process.
pub fn measure_transport(
    conf: &Conf,
    rounds: TransportRounds,
) -> Result<TransportReport, RpcError> {
    let server = RpcEnv::new(conf)?;
    let client = RpcEnv::new(conf);
    let result = client.and_then(|client| {
        let result = measure_with(&server, &client, rounds);
        client.stop();
        result
    });
    server.stop();
    result
}

fn measure_with(
    server: &RpcEnv,
    client: &RpcEnv,
    rounds: TransportRounds,
) -> Result<TransportReport, RpcError> {
    const ENDPOINT: &str = "echo";
    server.handle().register(ENDPOINT, Echo::default())?;
    let echo = client.handle().endpoint_ref(server.address(), ENDPOINT);
    let message = payload_message();
    let frames = ask_frame_sizes(ENDPOINT);
    let floor = PinnedPingPong::start(frames)?;

    let mut asks = Vec::with_capacity(rounds.rounds);
    let mut floors = Vec::with_capacity(rounds.rounds);
    let mut ratios = Vec::with_capacity(rounds.rounds);
    let mut one_way = Vec::with_capacity(rounds.rounds);
    // A first round warms both up and is not counted.
    for round in 0..=rounds.rounds {
        let mut times = Vec::with_capacity(rounds.round_trips);
        for _ in 0..rounds.round_trips {
            let start = Instant::now();
            echo.ask(&message)?;
            times.push(start.elapsed());
        }
        let ask = median(&mut times);
        let raw = floor.median_round_trip(rounds.round_trips)?;
        let start = Instant::now();
        for _ in 0..rounds.one_way {
            loop {
                match echo.send(&message) {
                    Ok(()) => break,
                    Err(RpcError::OutboxFull { .. }) => std::thread::yield_now(),
                    Err(e) => return Err(e),
                }
            }
        }
        // The ask travels behind the batch: when it returns, all of it arrived.
        echo.ask(&Message::Empty)?;
        let rate = rounds.one_way as f64 / start.elapsed().as_secs_f64();
        if round > 0 {
            asks.push(micros(ask));
            floors.push(micros(raw));
            ratios.push(ask.as_secs_f64() / raw.as_secs_f64());
            one_way.push(rate);
        }
    }
    let ask_ratio = median_f64(&mut ratios);
    let one_way_per_sec = median_f64(&mut one_way);
    // Both sorted by now.
    Ok(TransportReport {
        frames,
        ask_us: median_f64(&mut asks),
        floor_us: median_f64(&mut floors),
        ask_ratio,
        ask_ratio_range: (ratios[0], ratios[ratios.len() - 1]),
        one_way_per_sec,
        one_way_min_per_sec: one_way[0],
    })
}

/// A raw blocking ping-pong run by a thread pinned to one CPU (its answering thread
/// inherits the CPU), on request.
struct PinnedPingPong {
    requests: Option<mpsc::Sender<usize>>,
    medians: mpsc::Receiver<std::io::Result<Duration>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PinnedPingPong {
    fn start((request, reply): (usize, usize)) -> Result<PinnedPingPong, RpcError> {
        let (requests, asked) = mpsc::channel::<usize>();
        let (answer, medians) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("raw-floor".into())
            .spawn(move || {
                // Unpinned where threads cannot be pinned: the floor is then the
                // kernel's placement.
                pin_to_one_cpu();
                let mut raw = match RawPingPong::start(request, reply) {
                    Ok(raw) => raw,
                    Err(e) => {
                        let _ = answer.send(Err(e));
                        return;
                    }
                };
                while let Ok(count) = asked.recv() {
                    let mut times = Vec::with_capacity(count);
                    let measured = (0..count).try_for_each(|_| {
                        let start = Instant::now();
                        raw.round_trip()?;
                        times.push(start.elapsed());
                        Ok(())
                    });
                    let _ = answer.send(measured.map(|()| median(&mut times)));
                }
            })
            .map_err(RpcError::Io)?;
        Ok(PinnedPingPong {
            requests: Some(requests),
            medians,
            thread: Some(thread),
        })
    }

    fn median_round_trip(&self, count: usize) -> Result<Duration, RpcError> {
        let gone = || RpcError::Io(std::io::Error::other("the raw ping-pong thread is gone"));
        self.requests
            .as_ref()
            .ok_or_else(gone)?
            .send(count)
            .map_err(|_| gone())?;
        self.medians
            .recv()
            .map_err(|_| gone())?
            .map_err(RpcError::Io)
    }
}

impl Drop for PinnedPingPong {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// Sorts `values` and returns the middle one.
fn median_f64(values: &mut [f64]) -> f64 {
    values.sort_unstable_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_measures_all_three_and_the_ratio_is_of_the_same_rounds() {
        let rounds = TransportRounds {
            rounds: 3,
            round_trips: 50,
            one_way: 2_000,
        };
        let report = measure_transport(&Conf::new(), rounds).unwrap();
        let (request, reply) = report.frames;
        assert!(request > PAYLOAD && reply > PAYLOAD, "{:?}", report.frames);
        assert!(report.ask_us > 0.0 && report.floor_us > 0.0, "{report:?}");
        let (low, high) = report.ask_ratio_range;
        assert!(
            low <= report.ask_ratio && report.ask_ratio <= high,
            "{report:?}"
        );
        assert!(report.one_way_per_sec >= report.one_way_min_per_sec);
        assert!(report.one_way_min_per_sec > 0.0, "{report:?}");
    }

    #[test]
    fn echo_answers_with_the_payload_and_counts_one_way_messages() {
        let server = RpcEnv::new(&Conf::new()).unwrap();
        let echo = Echo::default();
        let received = echo.received.clone();
        server.handle().register("echo", echo).unwrap();
        let client = RpcEnv::new(&Conf::new()).unwrap();
        let to_echo = client.handle().endpoint_ref(server.address(), "echo");
        for _ in 0..3 {
            to_echo.send(&payload_message()).unwrap();
        }
        let reply = to_echo.ask(&payload_message()).unwrap();
        match reply.message() {
            ArchivedMessage::Custom { tag, body } => {
                assert_eq!(tag.to_native(), 1);
                assert_eq!(body.as_slice(), &[0x42; PAYLOAD][..]);
            }
            other => panic!("not the payload: {other:?}"),
        }
        assert_eq!(received.load(Ordering::Relaxed), 4);
        client.stop();
        server.stop();
    }
}
