//! `RpcEnv::serve` returns when the environment is stopped from another thread, and when
//! the process gets SIGTERM, having stopped the environment. A test binary of its own:
//! the signal handlers are the process's.

#![cfg(unix)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use flint_rpc::{Conf, Message, RpcEnv, RpcError, ServeEnd};

fn env() -> Arc<RpcEnv> {
    Arc::new(RpcEnv::new(&Conf::new()).unwrap())
}

/// Runs `serve` on a thread and returns what it returned and how long it took, bounded.
fn serve_in_thread(env: &Arc<RpcEnv>) -> std::thread::JoinHandle<(ServeEnd, Duration)> {
    let env = env.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        let end = env.serve().unwrap();
        (end, started.elapsed())
    })
}

fn join_within<T>(thread: std::thread::JoinHandle<T>, bound: Duration) -> T {
    let deadline = Instant::now() + bound;
    while !thread.is_finished() {
        assert!(Instant::now() < deadline, "serve did not return");
        std::thread::sleep(Duration::from_millis(10));
    }
    thread.join().unwrap()
}

// One test: both parts touch the process's signal handlers, so they run in turn.
#[test]
fn serve_returns_when_stopped_and_on_sigterm_having_stopped_the_environment() {
    // Stopped from another thread.
    let server = env();
    let serving = serve_in_thread(&server);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !serving.is_finished(),
        "serve returned before anything happened"
    );
    server.stop();
    let (end, _) = join_within(serving, Duration::from_secs(10));
    assert_eq!(end, ServeEnd::Stopped);

    // SIGTERM to this process: the first one is serve's, and it stops the environment.
    let server = env();
    let serving = serve_in_thread(&server);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!serving.is_finished(), "serve returned before the signal");
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::TERM)
        .unwrap();
    let (end, _) = join_within(serving, Duration::from_secs(10));
    assert_eq!(end, ServeEnd::Signal(libc::SIGTERM));
    let refused = server.handle().local_ref("anyone").send(&Message::Empty);
    assert!(matches!(refused, Err(RpcError::Stopped)), "{refused:?}");
}
