//! flint-ui: the driver's status page, a JSON API in the shapes of Spark's REST API, and
//! Prometheus metrics, over HTTP.
//!
//! The server reads [`StatusSnapshot`]s the driver publishes
//! ([`flint_scheduler::Driver::publish_status`]) and nothing else: it runs on threads of
//! its own (one accepting, one per open connection, at most [`MAX_CONNECTIONS`]), never
//! takes the driver's lock, and however
//! many clients poll it, the driver builds one snapshot per publishing interval.
//!
//! - `/` — the page: jobs and stages with their progress, executors, the last minute's
//!   task rate and latency percentiles, the transport's counters and a throughput chart,
//!   refreshed by inline script (nothing is fetched but this server's own JSON);
//! - `/api/v1/applications`, `/api/v1/applications/{id}/jobs`, `.../stages`,
//!   `.../executors` — Spark's REST API shapes where they overlap; `/api/v1/status` — the
//!   whole snapshot, which the page reads;
//! - `/metrics` — Prometheus text format (`flint_tasks_finished_total`,
//!   `flint_task_launch_latency_seconds`, ...).
//!
//! Requests are bounded: a request head over [`MAX_REQUEST_HEAD`] bytes gets 431, a body
//! gets 413, anything but GET or HEAD 405, an unknown path 404; a client that sends
//! nothing for [`CLIENT_TIMEOUT`] is dropped, and past [`MAX_CONNECTIONS`] open
//! connections new ones get 503: a slow client holds one thread, not the others'
//! answers.
//!
//! ```no_run
//! use std::time::Duration;
//! use flint_rpc::Conf;
//! use flint_scheduler::{Driver, StandaloneExecutors};
//! use flint_ui::{StatusServer, UiConfig};
//!
//! let conf = Conf::new();
//! let driver = Driver::start(&conf, Box::new(StandaloneExecutors))?;
//! let config = UiConfig::from_conf(&conf)?;
//! let board = driver.publish_status(Duration::from_millis(100))?;
//! let server = StatusServer::start(board, &config, "flint-app", "my job")?;
//! println!("status page at http://{}/", server.address());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod api;
mod http;
mod metrics;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use flint_rpc::conf::{Conf, ConfError, Key, KeyInfo, Unit};
use flint_scheduler::status::StatusSnapshot;
use flint_scheduler::StatusBoard;
use tracing::{debug, info, warn};

pub use http::{CLIENT_TIMEOUT, MAX_CONNECTIONS, MAX_REQUEST_HEAD};

/// The keys the status page reads, with default, unit and meaning.
pub const KEYS: &[KeyInfo] = &[
    KeyInfo::new(
        "ui.enabled",
        Some("true"),
        Unit::Bool,
        "Whether the driver serves its status page, JSON API (/api/v1/) and /metrics over HTTP.",
    ),
    KeyInfo::new(
        "ui.port",
        Some("4040"),
        Unit::Port,
        "Port of the status page, on rpc.bindAddress; the next free one of the 16 after it if \
         taken, any free one for 0.",
    ),
];

const UI_ENABLED: Key = Key::of(KEYS, "ui.enabled");
const UI_PORT: Key = Key::of(KEYS, "ui.port");

/// Ports tried after `ui.port` when it is taken (Spark's `spark.port.maxRetries`).
pub const PORT_RETRIES: u16 = 16;

/// How often the page's snapshot is published: the shortest interval the driver allows.
pub const PUBLISH_INTERVAL: Duration = flint_scheduler::MIN_PUBLISH_INTERVAL;

/// The status page's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiConfig {
    /// `ui.enabled`.
    pub enabled: bool,
    /// `ui.port`: the first port tried (0: any free one).
    pub port: u16,
    /// `rpc.bindAddress`: the page is bound where the RPC listener is.
    pub bind_address: IpAddr,
}

impl UiConfig {
    /// Reads `ui.enabled`, `ui.port` and `rpc.bindAddress` from `conf`.
    pub fn from_conf(conf: &Conf) -> Result<Self, ConfError> {
        Ok(UiConfig {
            enabled: conf.boolean(UI_ENABLED)?,
            port: conf.port_number(UI_PORT)?,
            bind_address: conf.bind_address()?,
        })
    }
}

/// What the status server could not do.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// No port from `ui.port` on could be bound.
    #[error(
        "cannot listen on {address} (ui.port) nor the {PORT_RETRIES} ports after it: {source}"
    )]
    Bind {
        /// The first address tried.
        address: SocketAddr,
        /// The last failure.
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start the status server's threads: {0}")]
    Thread(std::io::Error),
}

/// What every request reads: the board and the application's name.
struct Site {
    board: StatusBoard,
    app_id: String,
    app_name: String,
    /// The wall clock when the driver started (Spark's API gives dates).
    started: SystemTime,
    /// When the driver stopped, once it has: the page then shows its last snapshot.
    stopped: std::sync::Mutex<Option<SystemTime>>,
}

impl Site {
    fn snapshot(&self) -> Arc<StatusSnapshot> {
        self.board.latest()
    }

    fn stopped_at(&self) -> Option<SystemTime> {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The stack of a thread answering a connection: rendering a snapshot takes little.
const ANSWER_STACK: usize = 256 * 1024;

/// A running status server; stopped when dropped.
pub struct StatusServer {
    address: SocketAddr,
    site: Arc<Site>,
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for StatusServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusServer")
            .field("address", &self.address)
            .finish()
    }
}

impl StatusServer {
    /// Serves `board` on `config`'s address, from `ui.port` or the first free one of the
    /// [`PORT_RETRIES`] after it. `app_id` and `app_name` name the application in the
    /// API.
    pub fn start(
        board: StatusBoard,
        config: &UiConfig,
        app_id: &str,
        app_name: &str,
    ) -> Result<StatusServer, UiError> {
        let listener = bind(config.bind_address, config.port)?;
        let address = listener.local_addr().map_err(UiError::Thread)?;
        let uptime = board.latest().uptime;
        let site = Arc::new(Site {
            board,
            app_id: app_id.to_owned(),
            app_name: app_name.to_owned(),
            started: SystemTime::now()
                .checked_sub(uptime)
                .unwrap_or(SystemTime::UNIX_EPOCH),
            stopped: std::sync::Mutex::new(None),
        });
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let accepting = site.clone();
        let threads = vec![std::thread::Builder::new()
            .name("flint-ui-accept".into())
            .spawn(move || accept_connections(&listener, &accepting, &stop))
            .map_err(UiError::Thread)?];
        info!("Status page at http://{address}/ (metrics at /metrics)");
        Ok(StatusServer {
            address,
            site,
            stopping,
            threads,
        })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Tells the page that the driver stopped: it shows the driver's last snapshot as
    /// such, and the API's application attempt is completed (Spark's `completed`,
    /// `endTime`).
    pub fn driver_stopped(&self) {
        let mut stopped = self.site.stopped.lock().unwrap_or_else(|e| e.into_inner());
        stopped.get_or_insert_with(SystemTime::now);
    }

    /// Stops accepting and waits for the accepting thread to end; answers under way
    /// end on their own, within [`CLIENT_TIMEOUT`] of their client's last byte.
    /// Idempotent.
    pub fn stop(&mut self) {
        if self.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        // Wakes the accepting thread, blocked in accept(2).
        let wake = match self.address.ip() {
            ip if ip.is_unspecified() && ip.is_ipv4() => {
                SocketAddr::new(IpAddr::from([127, 0, 0, 1]), self.address.port())
            }
            ip if ip.is_unspecified() => SocketAddr::new(
                IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
                self.address.port(),
            ),
            _ => self.address,
        };
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn bind(ip: IpAddr, port: u16) -> Result<TcpListener, UiError> {
    let first = SocketAddr::new(ip, port);
    let tries = if port == 0 { 1 } else { PORT_RETRIES + 1 };
    let mut last = None;
    for offset in 0..tries {
        let Some(port) = port.checked_add(offset) else {
            break;
        };
        match TcpListener::bind(SocketAddr::new(ip, port)) {
            Ok(listener) => {
                if offset > 0 {
                    info!(
                        "ui.port {} is taken: the status page is on port {port}",
                        first.port()
                    );
                }
                return Ok(listener);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(UiError::Bind {
        address: first,
        source: last.unwrap_or_else(|| std::io::Error::other("no port to try")),
    })
}

fn accept_connections(listener: &TcpListener, site: &Arc<Site>, stopping: &AtomicBool) {
    let open = Arc::new(AtomicUsize::new(0));
    let mut refusals = 0u64;
    for stream in listener.incoming() {
        if stopping.load(Ordering::Acquire) {
            break;
        }
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                // Out of descriptors, say: a pause rather than a spin.
                debug!("the status page could not accept a connection: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if open.load(Ordering::Acquire) >= MAX_CONNECTIONS {
            refusals += 1;
            if refusals.is_power_of_two() {
                warn!(
                    "the status page refused {refusals} connection(s) so far: \
                     {MAX_CONNECTIONS} were open"
                );
            }
            http::busy(stream);
            continue;
        }
        open.fetch_add(1, Ordering::AcqRel);
        let (site, done) = (site.clone(), open.clone());
        let spawned = std::thread::Builder::new()
            .name("flint-ui".into())
            .stack_size(ANSWER_STACK)
            .spawn(move || {
                http::serve(stream, |request| api::route(&site, request));
                done.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            open.fetch_sub(1, Ordering::AcqRel);
            debug!("the status page could not start a thread: {e}");
        }
    }
    debug!("the status page stopped accepting");
}
