//! The RPC environment itself: [`RpcEnv`] puts the layers below together (the shared
//! state, the event loop, the cell that lends it, the loop thread) and stops them.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tracing::warn;

use crate::conf::Conf;
use crate::error::RpcError;
use crate::event_loop::EventLoop;
use crate::refs::{RpcEnvHandle, CLIENT_ADDRESS};
use crate::settings::Settings;
use crate::shared::{Command, ErasedLoopCell, Shared, WakerNotify};
use crate::turns::{run_loop_thread, LoopCell, Sleeper};

/// Says, once per process, when an environment's `rpc.io.maxConnections` is more than
/// the descriptor limit allows: connections past the limit then fail in the kernel (and
/// with them whatever else the process opens), not at flint's cap.
#[cfg(unix)]
fn warn_if_short_of_descriptors(max_connections: usize) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let limit = crate::socket::descriptor_limit();
    if (max_connections as u64).saturating_add(DESCRIPTORS_BESIDE_PEERS) > limit
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        warn!(
            "rpc.io.maxConnections ({max_connections}) is more than this process's limit of \
             {limit} open descriptors allows; raise the limit (ulimit -n) or lower \
             rpc.io.maxConnections"
        );
    }
}

/// Descriptors a process running an environment needs besides its peers' connections
/// (its pollers, its listener, its own connections out, files): a margin, not a count.
#[cfg(unix)]
const DESCRIPTORS_BESIDE_PEERS: u64 = 64;

/// An RPC environment: one mio event loop thread, a listener, endpoints by name, and
/// connections opened on first use.
///
/// ```
/// use flint_rpc::{Conf, Endpoint, EndpointContext, Incoming, RpcEnv};
/// use flint_wire::{ArchivedMessage, Message};
///
/// struct Echo;
/// impl Endpoint for Echo {
///     fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
///         if let ArchivedMessage::Custom { tag, .. } = message.message() {
///             let _ = message.reply(&Message::Ack { ok: *tag == 7 });
///         }
///     }
/// }
///
/// let server = RpcEnv::new(&Conf::new())?;
/// server.handle().register("echo", Echo)?;
/// let client = RpcEnv::new(&Conf::new())?;
/// let echo = client.handle().endpoint_ref(server.address(), "echo");
/// let reply = echo.ask(&Message::Custom { tag: 7, body: bytes::Bytes::new() })?;
/// assert!(matches!(reply.message(), ArchivedMessage::Ack { ok: true }));
/// client.stop();
/// server.stop();
/// # Ok::<(), flint_rpc::RpcError>(())
/// ```
pub struct RpcEnv {
    handle: RpcEnvHandle,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for RpcEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcEnv")
            .field("address", &self.address())
            .finish()
    }
}

impl RpcEnv {
    /// Binds the listener (rpc.bindAddress, rpc.port) and starts the loop thread.
    pub fn new(conf: &Conf) -> Result<RpcEnv, RpcError> {
        Self::with_settings(Settings::from_conf(conf)?)
    }

    /// An environment that only opens connections, as the seeds' executors run theirs
    /// ("client mode"): it has no listener, so no peer can connect to it, and its
    /// endpoints hear only from the peers it connected to, over those connections (an
    /// ask's reply, and whatever the peer sends back through [`Incoming::sender_ref`]).
    /// `rpc.bindAddress` and `rpc.port` are not used; [`RpcEnv::address`] is
    /// [`CLIENT_ADDRESS`].
    ///
    /// ```
    /// use flint_rpc::{Conf, RpcEnv, CLIENT_ADDRESS};
    ///
    /// let client = RpcEnv::client(&Conf::new())?;
    /// assert_eq!(client.address(), CLIENT_ADDRESS);
    /// client.stop();
    /// # Ok::<(), flint_rpc::RpcError>(())
    /// ```
    ///
    /// [`Incoming::sender_ref`]: crate::Incoming::sender_ref
    pub fn client(conf: &Conf) -> Result<RpcEnv, RpcError> {
        Self::with_settings(Settings {
            listen: false,
            ..Settings::from_conf(conf)?
        })
    }

    /// As [`RpcEnv::new`] (or [`RpcEnv::client`] without [`Settings::listen`]), with
    /// settings already read.
    pub fn with_settings(settings: Settings) -> Result<RpcEnv, RpcError> {
        // Sealing keys come from the secret: without one, frames would go in clear.
        if settings.crypto && settings.secret.is_none() {
            return Err(crate::conf::ConfError::CryptoWithoutAuthentication.into());
        }
        let listener = if settings.listen {
            #[cfg(unix)]
            warn_if_short_of_descriptors(settings.max_connections);
            let listener = crate::socket::listen(settings.bind, &settings.socket);
            Some(listener.map_err(|source| RpcError::Listen {
                address: settings.bind,
                key: match source.kind() {
                    std::io::ErrorKind::AddrNotAvailable => Some(crate::conf::BIND_ADDRESS_KEY),
                    std::io::ErrorKind::AddrInUse | std::io::ErrorKind::PermissionDenied => {
                        Some(crate::conf::PORT_KEY)
                    }
                    // Out of descriptors, say: no key would help.
                    _ => None,
                },
                source,
            })?)
        } else {
            None
        };
        let address = match &listener {
            Some(listener) => listener.local_addr()?,
            None => CLIENT_ADDRESS,
        };
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), crate::event_loop::WAKER)?;
        let (sleeper, sleeper_waker) = {
            use std::os::fd::AsRawFd;
            Sleeper::watching(poll.as_raw_fd())?
        };
        let sleeper_waker = Arc::new(sleeper_waker);
        let cell = Arc::new(LoopCell::new(sleeper_waker.clone()));
        // Held weakly: the loop thread and the leases own the cell, which owns the loop,
        // which holds the shared state.
        let loop_cell: Arc<ErasedLoopCell> = cell.clone();
        let notify = WakerNotify {
            poller: waker,
            sleeper: sleeper_waker,
        };
        let shared = Arc::new(Shared::new(
            settings,
            address,
            notify,
            Arc::downgrade(&loop_cell),
        ));
        let listener_port = listener.as_ref().map(|_| address.port());
        let event_loop = EventLoop::new(poll, listener, shared.clone())?;
        cell.install(event_loop);
        let loop_shared = shared.clone();
        let thread = std::thread::Builder::new()
            // A client's loop thread is named for its outgoing connections only (a thread
            // name shows 15 bytes).
            .name(match listener_port {
                Some(port) => format!("flint-rpc-{port}"),
                None => "flint-rpc-out".to_owned(),
            })
            .spawn(move || run_loop_thread(loop_shared, cell, sleeper));
        // Not started, the closure is dropped, and with it the cell, the loop and its
        // handle on the shared state.
        let thread = thread?;
        Ok(RpcEnv {
            handle: RpcEnvHandle { shared },
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The address the listener is bound to; [`CLIENT_ADDRESS`] for an environment that
    /// does not listen ([`RpcEnv::client`]).
    pub fn address(&self) -> SocketAddr {
        self.handle.address()
    }

    /// A handle for other threads and for endpoints.
    pub fn handle(&self) -> RpcEnvHandle {
        self.handle.clone()
    }

    /// Stops the environment: every endpoint's `on_stop` runs, then what was sent
    /// before and from `on_stop` gets rpc.shutdown.flushTimeout to be written (connections
    /// still being set up finish within it too), sockets close and the loop thread is
    /// joined. Sends are refused once the endpoints have stopped. Idempotent.
    pub fn stop(&self) {
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            // Refused only if the loop is already shutting down, which is what Stop asks.
            let _ = self.handle.shared.handoff.push(Command::Stop);
            let _ = thread.join();
        }
        // The loop refuses sends from when its endpoints have stopped; if it died, it
        // never got there.
        self.handle.shared.stopped.store(true, Ordering::Release);
    }
}

impl Drop for RpcEnv {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::ask::ReplySlot;
    use crate::endpoint::{Endpoint, EndpointContext, Incoming};
    use crate::shared::RegisterReply;
    use flint_wire::Message;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    struct Quiet;

    impl Endpoint for Quiet {
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, _message: Incoming<'_>) {}
    }

    /// What applications hold of an environment goes to other threads and across
    /// `catch_unwind` (a driver's tests wrap their checks in it), whatever the layers hold
    /// inside.
    #[test]
    fn handles_cross_threads_and_unwind_boundaries() {
        fn holdable<T: Send + Sync + std::panic::UnwindSafe + std::panic::RefUnwindSafe>() {}
        holdable::<RpcEnv>();
        holdable::<RpcEnvHandle>();
        holdable::<crate::EndpointRef>();
        holdable::<crate::LoopLease>();
        holdable::<crate::ReplyHandle>();
        holdable::<crate::Reply>();
    }

    #[test]
    fn a_registration_dropped_unanswered_answers_stopped() {
        let done = Arc::new(ReplySlot::new());
        drop(RegisterReply::new(done.clone()));
        assert!(matches!(done.wait(), Some(Err(RpcError::Stopped))));
        // An answered one keeps its answer.
        let done = Arc::new(ReplySlot::new());
        let reply = RegisterReply::new(done.clone());
        reply.complete(Ok(()));
        drop(reply);
        assert!(matches!(done.wait(), Some(Ok(()))));
    }

    /// `register` checks that the environment runs, then queues its command: a loop that
    /// shuts down in between must not leave it waiting for an answer forever.
    #[test]
    fn a_registration_racing_the_shutdown_is_refused_not_left_waiting() {
        let env = RpcEnv::new(&Conf::default()).unwrap();
        let handle = env.handle();
        env.stop();
        // As if the check had passed just before the loop shut down.
        handle.shared.stopped.store(false, Ordering::Release);
        let (answer, answered) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = answer.send(handle.register("late", Quiet).map(|_| ()));
        });
        let result = answered
            .recv_timeout(Duration::from_secs(10))
            .expect("register answers once the loop is gone");
        assert!(matches!(result, Err(RpcError::Stopped)), "{result:?}");
    }

    /// A send that passed the check that the environment runs, then found the loop shut
    /// down, is refused: nobody will write its frame, so it must not report success.
    #[test]
    fn a_send_racing_the_shutdown_is_refused_not_reported_sent() {
        let env = RpcEnv::new(&Conf::default()).unwrap();
        let handle = env.handle();
        let remote = handle.endpoint_ref("127.0.0.1:9".parse().unwrap(), "anyone");
        let local = handle.local_ref("anyone");
        env.stop();
        // As if the check had passed just before the loop shut down.
        handle.shared.stopped.store(false, Ordering::Release);
        for target in [&remote, &local] {
            let sent = target.send(&Message::ReviveOffers);
            assert!(matches!(sent, Err(RpcError::Stopped)), "{sent:?}");
        }
    }

    /// Runs `f` on a thread of its own; fails the test if it takes more than 10 s, rather
    /// than hanging it.
    fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (answer, answered) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = answer.send(f());
        });
        answered
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{what} waits for a loop thread that died"))
    }

    /// A panic of the loop thread itself (a bug in the loop: handlers' panics are caught)
    /// must leave nobody waiting: an ask in flight is answered, a registration and a send
    /// after it are refused, and stopping the environment returns.
    #[test]
    fn a_loop_thread_that_panics_refuses_what_waits_and_what_comes() {
        let env = RpcEnv::new(&Conf::default()).unwrap();
        let handle = env.handle();
        let quiet = handle.register("quiet", Quiet).unwrap();
        let asker = quiet.clone();
        let (answer, answered) = mpsc::channel();
        std::thread::spawn(move || {
            let asked = asker.ask_timeout(&Message::ReviveOffers, Duration::from_secs(600));
            let _ = answer.send(asked.map(|_| ()));
        });
        // The ask waits (Quiet never replies) before the loop dies.
        let deadline = Instant::now() + Duration::from_secs(10);
        while handle.shared.asks.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "the ask never got under way");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(handle.shared.command(Command::PanicForTest).is_ok());

        let asked = answered
            .recv_timeout(Duration::from_secs(10))
            .expect("the ask in flight is answered once the loop thread is gone");
        assert!(matches!(asked, Err(RpcError::Stopped)), "{asked:?}");
        let registered = within_10s("register", {
            let handle = handle.clone();
            move || handle.register("late", Quiet).map(|_| ())
        });
        assert!(
            matches!(registered, Err(RpcError::Stopped)),
            "{registered:?}"
        );
        let sent = quiet.send(&Message::ReviveOffers);
        assert!(matches!(sent, Err(RpcError::Stopped)), "{sent:?}");
        within_10s("stop", move || env.stop());
    }
}
