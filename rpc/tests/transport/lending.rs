//! Threads lent to the loop ([`flint_rpc::LoopLease`]): they run endpoints themselves,
//! hand the sockets back when they stop turning, and never leave the loop thread asleep
//! past what it must do.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use flint_rpc::{Endpoint, EndpointContext, Incoming, RpcEnv, RpcError, TimerId};
use flint_wire::ArchivedMessage;

use crate::common::*;

/// Records the thread each message was handled on, and answers asks with their tag.
#[derive(Clone, Default)]
struct ThreadProbe {
    handled: Arc<Mutex<Vec<(u32, std::thread::ThreadId)>>>,
}

impl ThreadProbe {
    fn handled(&self) -> Vec<(u32, std::thread::ThreadId)> {
        self.handled.lock().unwrap().clone()
    }
}

impl Endpoint for ThreadProbe {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let ArchivedMessage::Custom { tag, .. } = message.message() {
            let tag = tag.to_native();
            self.handled
                .lock()
                .unwrap()
                .push((tag, std::thread::current().id()));
            if message.is_ask() {
                message.reply(&custom(tag)).unwrap();
            }
        }
    }
}

/// A server whose loop thread leaves the sockets to lent threads at once
/// (`rpc.io.busyPoll=0`), with a [`ThreadProbe`] as "probe".
fn server_with_thread_probe() -> (RpcEnv, ThreadProbe) {
    let server = env(&["rpc.io.busyPoll=0"]);
    let probe = ThreadProbe::default();
    server.handle().register("probe", probe.clone()).unwrap();
    (server, probe)
}

#[test]
fn a_lent_thread_takes_messages_off_the_socket_and_runs_the_endpoint_itself() {
    let (server, probe) = server_with_thread_probe();
    let client = env(&[]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    const MESSAGES: u32 = 200;
    let (ready_tx, ready_rx) = mpsc::channel();
    let lender = {
        let (handle, probe) = (server.handle(), probe.clone());
        std::thread::spawn(move || {
            let lease = handle.lend();
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut worked = 0u32;
            let _ = lease.turn();
            ready_tx.send(()).unwrap();
            while probe.handled().len() < MESSAGES as usize && Instant::now() < deadline {
                if lease.turn() {
                    worked += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            (std::thread::current().id(), worked)
        })
    };
    ready_rx.recv().unwrap();
    for tag in 0..MESSAGES {
        target.send(&custom(tag)).unwrap();
        std::thread::sleep(Duration::from_micros(50));
    }
    let (lender_id, worked) = join_within(lender, Duration::from_secs(30), "the lent thread");
    let handled = probe.handled();
    let tags: Vec<u32> = handled.iter().map(|&(tag, _)| tag).collect();
    assert_eq!(
        tags,
        (0..MESSAGES).collect::<Vec<_>>(),
        "all, once, in order"
    );
    let on_lender = handled.iter().filter(|&&(_, id)| id == lender_id).count();
    // While the lent thread keeps turning, the loop thread leaves the sockets to it; it
    // takes over only should the lent thread be kept off the CPU for LEASE_CHECK.
    assert!(
        on_lender > 0 && worked > 0,
        "{on_lender} of {MESSAGES} messages handled on the lent thread"
    );
    eprintln!("{on_lender} of {MESSAGES} messages handled on the lent thread");
}

#[test]
fn a_lent_thread_that_stops_turning_does_not_hold_up_the_loop() {
    let (server, probe) = server_with_thread_probe();
    let lease = server.handle().lend();
    let lender_turns_until = Instant::now() + Duration::from_millis(5);
    while Instant::now() < lender_turns_until {
        let _ = lease.turn();
        std::thread::yield_now();
    }
    // The lease is held and never turned again: the loop thread takes the sockets back.
    let client = env(&["rpc.askTimeout=10s"]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    for tag in 0..20 {
        assert_eq!(tag_of(&target.ask(&custom(tag)).unwrap()), tag);
    }
    // All on the loop thread, none held for the lease.
    let handled = probe.handled();
    assert!(handled.iter().all(|&(_, id)| id == handled[0].1));
    drop(lease);
    assert_eq!(tag_of(&target.ask(&custom(20)).unwrap()), 20);
}

#[test]
fn an_env_stops_while_a_lent_thread_turns_it_and_the_lease_outlives_it() {
    let (server, probe) = server_with_thread_probe();
    let handle = server.handle();
    let stop_turning = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lender = {
        let (handle, stop_turning) = (handle.clone(), stop_turning.clone());
        std::thread::spawn(move || {
            let lease = handle.lend();
            while !stop_turning.load(Ordering::Acquire) {
                if !lease.turn() {
                    std::thread::yield_now();
                }
            }
            lease
        })
    };
    let client = env(&["rpc.askTimeout=10s"]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&target.ask(&custom(5)).unwrap()), 5);
    // The stop command may be taken by the lent thread's turn: the loop thread, parked,
    // must still be the one to shut down.
    let stopper = std::thread::spawn(move || {
        server.stop();
        server
    });
    let server = join_within(stopper, Duration::from_secs(10), "stop");
    stop_turning.store(true, Ordering::Release);
    let lease = join_within(lender, Duration::from_secs(10), "the lent thread");
    assert!(!lease.turn(), "a stopped loop has no turns");
    drop(lease);
    assert!(matches!(
        handle.endpoint_ref(client.address(), "x").send(&custom(1)),
        Err(RpcError::Stopped)
    ));
    assert_eq!(probe.handled().len(), 1);
    drop(server);
}

#[test]
fn a_lease_taken_while_the_loop_thread_sleeps_still_lets_it_stop_the_env() {
    let (server, probe) = server_with_thread_probe();
    // With rpc.io.busyPoll=0 the loop thread is asleep on its poller by now, with no
    // deadline: a lease must wake it, or a stop taken by the lent thread's turn would
    // never reach it.
    std::thread::sleep(Duration::from_millis(50));
    let lease = server.handle().lend();
    let client = env(&["rpc.askTimeout=10s"]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    let asker = std::thread::spawn(move || tag_of(&target.ask(&custom(9)).unwrap()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while probe.handled().is_empty() {
        assert!(Instant::now() < deadline, "the ask never arrived");
        if !lease.turn() {
            std::thread::yield_now();
        }
    }
    assert_eq!(join_within(asker, Duration::from_secs(10), "the ask"), 9);
    let stopper = std::thread::spawn(move || server.stop());
    // Keep turning until the stop is seen (it may be this thread's turn that takes it).
    while !stopper.is_finished() {
        assert!(Instant::now() < deadline, "stop did not return");
        let _ = lease.turn();
        std::thread::yield_now();
    }
    stopper.join().unwrap();
    assert!(!lease.turn());
}

#[test]
fn a_deadline_left_by_a_lent_turn_is_kept_once_the_lent_thread_stops_turning() {
    /// Sets a 20 ms timer for each one-way message, records it firing, answers asks.
    struct Delayed(Probe);
    impl Endpoint for Delayed {
        fn receive(&mut self, ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
            if message.is_ask() {
                message.reply(&custom(0)).unwrap();
            } else {
                self.0.record(Seen::Message(1));
                ctx.schedule_once(Duration::from_millis(20));
            }
        }
        fn on_timer(&mut self, _ctx: &mut EndpointContext<'_>, _timer: TimerId) {
            self.0.record(Seen::Timer);
        }
    }
    let server = env(&["rpc.io.busyPoll=0"]);
    let probe = Probe::default();
    server
        .handle()
        .register("delayed", Delayed(probe.clone()))
        .unwrap();
    let client = env(&[]);
    let target = client.handle().endpoint_ref(server.address(), "delayed");
    target.ask(&custom(0)).unwrap();
    // Lent, but not turning yet: the loop thread goes back to sleep on its poller, with
    // no deadline of its own.
    let lease = server.handle().lend();
    std::thread::sleep(Duration::from_millis(20));
    target.send(&custom(1)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probe.seen().contains(&Seen::Message(1)) {
        assert!(Instant::now() < deadline, "the message never arrived");
        if !lease.turn() {
            std::thread::yield_now();
        }
    }
    // The lent thread stops turning and keeps its lease: the timer its turn (most
    // likely) set must still fire, on the loop thread.
    probe.wait_for("the timer", |seen| seen.contains(&Seen::Timer));
    drop(lease);
}

/// A command handed to the loop while its thread sleeps and a lent thread turns the
/// loop: the lent turn may take the command and the wake-up meant for the sleeping
/// thread. A command handed over after the lent thread stopped must still wake the loop
/// thread (before the fix, it waited for the next socket event or timer: here, never).
#[test]
fn a_wake_up_taken_by_a_lent_turn_does_not_silence_the_next_one() {
    /// Registers an endpoint from a thread of its own; Err if it takes over 10 s.
    fn register_within_10s(
        env: &flint_rpc::RpcEnvHandle,
        name: &'static str,
    ) -> Result<(), String> {
        let (done, answered) = std::sync::mpsc::channel();
        let env = env.clone();
        std::thread::spawn(move || {
            let _ = done.send(env.register(name, Probe::default()).map(|_| ()));
        });
        match answered.recv_timeout(Duration::from_secs(10)) {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!("registering {name} waited 10 s for the loop")),
        }
    }
    let server = env(&["rpc.io.busyPoll=0"]);
    let handle = server.handle();
    for round in 0..5 {
        // Lent, but not turning yet: the loop thread sleeps on its poller, with no
        // deadline of its own.
        let lease = handle.lend();
        std::thread::sleep(Duration::from_millis(20));
        let first = {
            let handle = handle.clone();
            std::thread::spawn(move || {
                handle
                    .register(["a0", "a1", "a2", "a3", "a4"][round], Probe::default())
                    .map(|_| ())
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !first.is_finished() {
            assert!(
                Instant::now() < deadline,
                "the first registration never ended"
            );
            if !lease.turn() {
                std::thread::yield_now();
            }
        }
        first.join().unwrap().unwrap();
        drop(lease);
        std::thread::sleep(Duration::from_millis(20));
        if let Err(e) = register_within_10s(&handle, ["b0", "b1", "b2", "b3", "b4"][round]) {
            // Stopping would wait for the same loop: leave it, and fail now.
            std::mem::forget(server);
            panic!("round {round}: {e}");
        }
    }
}

/// CPU time, in clock ticks, of this process's thread named `name` (Linux).
fn thread_cpu_ticks(name: &str) -> u64 {
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = task.unwrap().path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap();
        // pid (comm) state ... utime stime: the 12th and 13th fields after the comm.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        return fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    panic!("no thread named {name}");
}

/// While a lease is held by a thread busy elsewhere, the loop thread wakes every 5 ms to
/// write what that thread queued. A wake-up that finds nothing to do goes back to sleep
/// at once: were it followed by a whole `rpc.io.busyPoll` of polling, the loop thread
/// would poll without end under a long one.
#[test]
fn a_lease_held_idle_does_not_keep_the_loop_thread_polling() {
    let server = env(&["rpc.io.busyPoll=1s"]);
    let loop_thread = format!("flint-rpc-{}", server.address().port());
    let lease = server.handle().lend();
    // The busy poll after the loop's last work runs out.
    std::thread::sleep(Duration::from_millis(1300));
    let before = thread_cpu_ticks(&loop_thread);
    std::thread::sleep(Duration::from_secs(1));
    let used = thread_cpu_ticks(&loop_thread) - before;
    // Polling would take most of the second (100 ticks) it is given a CPU for; about
    // 200 short wake-ups take a tick or two.
    assert!(
        used < 30,
        "the loop thread used {used} ticks of CPU in 1 s while the lease was held idle"
    );
    drop(lease);
}

/// A lent thread that stops turning may keep frames of its own to send together: the
/// loop thread runs `on_lent_flush`'s hooks before it writes for it, within
/// milliseconds and again while the lease lasts; a hook dropped runs no more.
#[test]
fn lent_flush_hooks_run_while_a_lent_thread_is_busy_and_stop_once_dropped() {
    use std::sync::atomic::AtomicUsize;
    let server = env(&[]);
    let runs = Arc::new(AtomicUsize::new(0));
    let hook = {
        let runs = runs.clone();
        server.handle().on_lent_flush(move || {
            runs.fetch_add(1, Ordering::SeqCst);
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nobody is lent: nothing to run"
    );
    // Lent and never turning, as a runner in a long task.
    let lease = server.handle().lend();
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs.load(Ordering::SeqCst) < 2 {
        assert!(
            Instant::now() < deadline,
            "the hook did not run twice in 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(hook);
    let after = runs.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        after,
        "a dropped hook runs no more"
    );
    drop(lease);
}
