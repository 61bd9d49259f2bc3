//! Waiting, on a task runner, for what an environment's event loop brings.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use flint_rpc::RpcEnvHandle;

/// How often a waiting task looks whether it was killed.
const KILL_POLL: Duration = Duration::from_millis(100);

/// The task was killed while it waited.
#[derive(Debug)]
pub(crate) struct Interrupted;

/// The next of `arrivals` (sent from callbacks the loop of `env` runs): first turning
/// that loop on this thread for up to `spin`, so that a reply that comes soon is read and
/// handled here, without a wake-up of the loop thread and then of this one (on a virtual
/// machine each costs tens of microseconds); then asleep on the channel, the loop left to
/// its own thread, looking at `interrupted` now and then.
pub(crate) fn next_arrival<T>(
    env: &RpcEnvHandle,
    arrivals: &Receiver<T>,
    spin: Duration,
    interrupted: &dyn Fn() -> bool,
) -> Result<T, Interrupted> {
    if let Ok(arrival) = arrivals.try_recv() {
        return Ok(arrival);
    }
    if !spin.is_zero() {
        let lease = env.lend();
        let until = Instant::now() + spin;
        loop {
            lease.turn();
            if let Ok(arrival) = arrivals.try_recv() {
                return Ok(arrival);
            }
            if Instant::now() >= until {
                break;
            }
            std::thread::yield_now();
        }
    }
    loop {
        match arrivals.recv_timeout(KILL_POLL) {
            Ok(arrival) => return Ok(arrival),
            Err(RecvTimeoutError::Timeout) if interrupted() => return Err(Interrupted),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                unreachable!("the waiter keeps a sender of its own")
            }
        }
    }
}
