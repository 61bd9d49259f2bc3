//! Socket set-up with socket2: TCP_NODELAY, buffer sizes and address reuse from the
//! configuration, non-blocking for mio.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, SockRef, Socket, Type};

/// Socket options taken from the configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// SO_SNDBUF, or the OS default.
    pub send_buffer: Option<usize>,
    /// SO_RCVBUF, or the OS default.
    pub receive_buffer: Option<usize>,
}

impl SocketOptions {
    /// Applies TCP_NODELAY and the buffer sizes to a connected or accepted socket.
    pub fn apply(&self, socket: SockRef<'_>) -> io::Result<()> {
        socket.set_tcp_nodelay(true)?;
        if let Some(size) = self.send_buffer {
            socket.set_send_buffer_size(size)?;
        }
        if let Some(size) = self.receive_buffer {
            socket.set_recv_buffer_size(size)?;
        }
        Ok(())
    }
}

/// A non-blocking listener on `address`, with SO_REUSEADDR so a restarted process can
/// bind its port again while old connections linger in TIME_WAIT.
pub fn listen(address: SocketAddr, options: &SocketOptions) -> io::Result<mio::net::TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    // Accepted sockets inherit the buffer sizes, which must be set before listen().
    if let Some(size) = options.send_buffer {
        socket.set_send_buffer_size(size)?;
    }
    if let Some(size) = options.receive_buffer {
        socket.set_recv_buffer_size(size)?;
    }
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(mio::net::TcpListener::from_std(socket.into()))
}

/// Starts a non-blocking connect to `address`; completion shows as writability.
///
/// The options are applied before the connect: the receive buffer size decides the
/// window scale offered in the SYN, so setting it on a connected socket comes too late.
pub fn connect(address: SocketAddr, options: &SocketOptions) -> io::Result<mio::net::TcpStream> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    options.apply(SockRef::from(&socket))?;
    socket.set_nonblocking(true)?;
    match socket.connect(&address.into()) {
        Ok(()) => {}
        Err(e) if connect_in_progress(&e) => {}
        Err(e) => return Err(e),
    }
    Ok(mio::net::TcpStream::from_std(socket.into()))
}

/// Whether a non-blocking connect's error only says that it is under way.
fn connect_in_progress(error: &io::Error) -> bool {
    #[cfg(unix)]
    if error.raw_os_error() == Some(libc::EINPROGRESS) {
        return true;
    }
    // Windows reports WSAEWOULDBLOCK.
    error.kind() == io::ErrorKind::WouldBlock
}

/// Raises this process's soft limit on open descriptors to its hard limit (at most
/// 1,048,576), as servers with many peers do: every connection takes a descriptor, and
/// the usual soft limit, 1,024, is far below `rpc.io.maxConnections`' default. Returns
/// the soft limit now in force. The `flint` command calls it at start; an application
/// embedding flint decides for itself.
///
/// ```
/// let limit = flint_rpc::raise_descriptor_limit().unwrap();
/// assert!(limit >= 1);
/// ```
#[cfg(unix)]
pub fn raise_descriptor_limit() -> io::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    const MOST: u64 = 1 << 20;
    let mut limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    let wanted = limit.maximum.unwrap_or(u64::MAX).min(MOST);
    if current >= wanted {
        return Ok(current);
    }
    limit.current = Some(wanted);
    setrlimit(Resource::Nofile, limit)?;
    Ok(wanted)
}

/// The soft limit on this process's open descriptors.
#[cfg(unix)]
pub(crate) fn descriptor_limit() -> u64 {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current.unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outgoing_socket_has_its_options_and_connects() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let options = SocketOptions {
            send_buffer: Some(64 << 10),
            receive_buffer: Some(64 << 10),
        };
        let stream = connect(listener.local_addr().unwrap(), &options).unwrap();
        let socket = SockRef::from(&stream);
        assert!(socket.tcp_nodelay().unwrap());
        assert!(socket.nonblocking().unwrap_or(true));
        // The OS may round (Linux doubles); it took the size, not its default.
        assert!(socket.send_buffer_size().unwrap() >= 64 << 10);
        assert!(socket.recv_buffer_size().unwrap() >= 64 << 10);
        let (accepted, _) = listener.accept().unwrap();
        // Writability, then no error and a peer: the connect completed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stream.peer_addr().is_err() {
            assert!(std::time::Instant::now() < deadline, "never connected");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(stream.peer_addr().unwrap(), listener.local_addr().unwrap());
        assert_eq!(accepted.peer_addr().unwrap(), stream.local_addr().unwrap());
    }

    #[test]
    fn a_refused_connect_is_an_error_not_a_panic() {
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        // On loopback the refusal may come at once or show later as the socket's error.
        if let Ok(stream) = connect(address, &SocketOptions::default()) {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                match stream.take_error() {
                    Ok(Some(_)) => break,
                    _ if stream.peer_addr().is_ok() => panic!("connected to a closed port"),
                    _ => {}
                }
                assert!(std::time::Instant::now() < deadline, "no error");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
}
