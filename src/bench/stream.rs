//! Raw TCP's pipelined throughput between two processes: the baseline of a shuffle's
//! bytes per second.
//!
//! One end writes [`STREAM_CHUNK`]-byte messages back to back on a std::net connection
//! over 127.0.0.1 (TCP_NODELAY, blocking sockets, no wait for an answer between them),
//! the other reads them a message at a time, and answers once the last one is in; the
//! time is from the first write to that answer. No framing, no checksum, no copy out of
//! the read buffer: what loopback TCP moves between two processes when nothing else is
//! done with the bytes.
//!
//! The reading end is a process of its own, started from a program that calls
//! [`serve_sink_if_asked`] first thing in `main`: a bench binary re-executes itself with
//! [`STREAM_SINK_ENV`] set to the address to connect to (the `flint` binary has no such
//! mode). [`StreamPeer::Thread`] reads in a thread of this process instead, where
//! starting a process is impractical.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes of each message written.
pub const STREAM_CHUNK: usize = 4096;

/// Set to an address, it makes [`serve_sink_if_asked`] connect there and read streams.
pub const STREAM_SINK_ENV: &str = "FLINT_BENCH_STREAM_SINK";

/// How long [`RawStream::start`] waits for its reading end to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the reading end of a [`RawStream`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamPeer {
    /// A process started from this program, which calls [`serve_sink_if_asked`] first
    /// thing (usually `std::env::current_exe()`).
    Process(PathBuf),
    /// A thread of this process, placed by the kernel.
    Thread,
}

impl StreamPeer {
    /// Says which, for a report.
    pub fn describe(&self) -> &'static str {
        match self {
            StreamPeer::Process(_) => "two processes",
            StreamPeer::Thread => "two threads",
        }
    }
}

/// In a process started as a [`StreamPeer::Process`] (with [`STREAM_SINK_ENV`] set),
/// reads streams until the other end closes, then exits the process; otherwise returns
/// at once. Call it first thing in `main`.
pub fn serve_sink_if_asked() {
    let Ok(address) = std::env::var(STREAM_SINK_ENV) else {
        return;
    };
    let code = match address
        .parse::<SocketAddr>()
        .map_err(std::io::Error::other)
        .and_then(TcpStream::connect)
        .and_then(sink)
    {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("the raw stream's reading end failed: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// Reads streams from `socket` until it closes: each a 16-byte header (bytes in all,
/// bytes per message, little endian), then the messages; answers each stream with its
/// byte count once the last message is in.
fn sink(mut socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let mut header = [0u8; 16];
    let mut buffer = Vec::new();
    loop {
        match socket.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let total = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let chunk = u64::from_le_bytes(header[8..].try_into().expect("8 bytes")).max(1);
        buffer.resize(usize::try_from(chunk).map_err(std::io::Error::other)?, 0);
        let mut left = total;
        while left > 0 {
            let n = left.min(chunk) as usize;
            socket.read_exact(&mut buffer[..n])?;
            left -= n as u64;
        }
        socket.write_all(&total.to_le_bytes())?;
    }
}

/// The writing end of a raw TCP stream, with its reading end connected.
#[derive(Debug)]
pub struct RawStream {
    socket: TcpStream,
    chunk: Vec<u8>,
    child: Option<Child>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl RawStream {
    /// Starts the reading end where `peer` says and connects to it; messages are
    /// `chunk` bytes.
    pub fn start(peer: &StreamPeer, chunk: usize) -> std::io::Result<RawStream> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let (mut child, mut thread) = (None, None);
        match peer {
            StreamPeer::Process(program) => {
                child = Some(
                    Command::new(program)
                        .env(STREAM_SINK_ENV, address.to_string())
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .spawn()?,
                );
            }
            StreamPeer::Thread => {
                thread = Some(
                    std::thread::Builder::new()
                        .name("raw-stream-sink".into())
                        .spawn(move || sink(TcpStream::connect(address)?))?,
                );
            }
        }
        let socket = match accept(&listener, child.as_mut()) {
            Ok(socket) => socket,
            Err(e) => {
                if let Some(mut child) = child {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                return Err(e);
            }
        };
        socket.set_nodelay(true)?;
        Ok(RawStream {
            socket,
            chunk: vec![0x5a; chunk.max(1)],
            child,
            thread,
        })
    }

    /// Bytes of each message.
    pub fn chunk(&self) -> usize {
        self.chunk.len()
    }

    /// Streams `bytes` bytes (rounded up to whole messages); returns the time from the
    /// first write to the reading end's answer that all of them arrived.
    pub fn send(&mut self, bytes: u64) -> std::io::Result<Duration> {
        let chunk = self.chunk.len() as u64;
        let messages = bytes.div_ceil(chunk);
        let total = messages * chunk;
        let mut header = [0u8; 16];
        header[..8].copy_from_slice(&total.to_le_bytes());
        header[8..].copy_from_slice(&chunk.to_le_bytes());
        let started = Instant::now();
        self.socket.write_all(&header)?;
        for _ in 0..messages {
            self.socket.write_all(&self.chunk)?;
        }
        let mut answer = [0u8; 8];
        self.socket.read_exact(&mut answer)?;
        let elapsed = started.elapsed();
        if u64::from_le_bytes(answer) != total {
            return Err(std::io::Error::other(format!(
                "the raw stream's reading end counted {} bytes of {total}",
                u64::from_le_bytes(answer)
            )));
        }
        Ok(elapsed)
    }

    /// Streams `bytes` bytes; returns bytes per second.
    pub fn throughput(&mut self, bytes: u64) -> std::io::Result<f64> {
        let chunk = self.chunk.len() as u64;
        let total = bytes.div_ceil(chunk) * chunk;
        Ok(total as f64 / self.send(bytes)?.as_secs_f64())
    }
}

/// Accepts the reading end's connection, giving up if its process exits or it does not
/// come within [`CONNECT_TIMEOUT`].
fn accept(listener: &TcpListener, mut child: Option<&mut Child>) -> std::io::Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match listener.accept() {
            Ok((socket, _)) => {
                socket.set_nonblocking(false)?;
                return Ok(socket);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if let Some(child) = child.as_mut() {
            if let Some(status) = child.try_wait()? {
                return Err(std::io::Error::other(format!(
                    "the raw stream's reading process exited ({status}) before it connected"
                )));
            }
        }
        if Instant::now() >= deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the raw stream's reading end did not connect",
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Drop for RawStream {
    /// Closes the connection, on which the reading end ends; a reading process that has
    /// not exited within a few seconds is killed.
    fn drop(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_reads_every_stream_and_answers_each() {
        let mut stream = RawStream::start(&StreamPeer::Thread, STREAM_CHUNK).unwrap();
        assert_eq!(stream.chunk(), STREAM_CHUNK);
        for bytes in [1, 4096, 1 << 20, 3 * 4096 + 7] {
            let rate = stream.throughput(bytes).unwrap();
            assert!(rate.is_finite() && rate > 0.0, "{rate}");
        }
        assert!(stream.send(0).unwrap() > Duration::ZERO);
    }
}
