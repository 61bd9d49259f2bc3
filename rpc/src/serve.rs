//! [`RpcEnv::serve`]: a server's main thread, parked until the environment is stopped or
//! the process is asked to end (SIGINT, SIGTERM), then stopping it cleanly.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};

use crate::env::RpcEnv;
use crate::error::RpcError;

/// How often [`RpcEnv::serve`] looks whether it should return: what a signal can do in
/// its handler is set a flag, and this thread has nothing else to wait on.
const SERVE_POLL: Duration = Duration::from_millis(50);

/// Why [`RpcEnv::serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeEnd {
    /// The environment was stopped ([`RpcEnv::stop`] from another thread).
    Stopped,
    /// The process got this signal (`SIGINT` or `SIGTERM`).
    Signal(i32),
}

/// The process's SIGINT and SIGTERM actions, registered by the first `serve` and kept:
/// signal-hook cannot give a signal its default disposition back, so instead of
/// unregistering, the actions step aside (`pass_through`) outside `serve`.
struct Handlers {
    /// Whether a signal takes its default action (ends the process): outside `serve`,
    /// and for a second signal within it.
    pass_through: Arc<AtomicBool>,
    /// The last signal `serve` got; 0 for none.
    got: Arc<AtomicUsize>,
}

static HANDLERS: Mutex<Option<Arc<Handlers>>> = Mutex::new(None);

fn handlers() -> Result<Arc<Handlers>, RpcError> {
    let mut installed = HANDLERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(handlers) = &*installed {
        return Ok(handlers.clone());
    }
    let handlers = Arc::new(Handlers {
        pass_through: Arc::new(AtomicBool::new(true)),
        got: Arc::new(AtomicUsize::new(0)),
    });
    for signal in [SIGINT, SIGTERM] {
        // Registered first, so that it runs before the flag below is set: the first
        // signal in `serve` is serve's, a second one ends the process.
        signal_hook::flag::register_conditional_default(signal, handlers.pass_through.clone())?;
        signal_hook::flag::register_usize(signal, handlers.got.clone(), signal as usize)?;
        signal_hook::flag::register(signal, handlers.pass_through.clone())?;
    }
    *installed = Some(handlers.clone());
    Ok(handlers)
}

impl RpcEnv {
    /// Serves until the environment is stopped from another thread or the process gets
    /// SIGINT or SIGTERM, then stops it (every endpoint's `on_stop`, what is queued
    /// written within rpc.shutdown.flushTimeout) and says why it returned.
    ///
    /// A second SIGINT or SIGTERM while it stops, or one when no `serve` runs, ends the
    /// process at once, as it would have without this. One `serve` at a time in a
    /// process: the signals are the process's.
    pub fn serve(&self) -> Result<ServeEnd, RpcError> {
        let handlers = handlers()?;
        handlers.got.store(0, Ordering::Release);
        handlers.pass_through.store(false, Ordering::Release);
        let shared = &self.handle().shared;
        let end = loop {
            if shared.stopped.load(Ordering::Acquire) {
                break ServeEnd::Stopped;
            }
            match handlers.got.load(Ordering::Acquire) {
                0 => std::thread::sleep(SERVE_POLL),
                signal => break ServeEnd::Signal(signal as i32),
            }
        };
        // From now on the signals do what they would have: end the process.
        handlers.pass_through.store(true, Ordering::Release);
        if let ServeEnd::Signal(signal) = end {
            tracing::info!("got signal {signal}: stopping the RPC environment");
        }
        self.stop();
        Ok(end)
    }
}
