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
pub fn connect(address: SocketAddr, options: &SocketOptions) -> io::Result<mio::net::TcpStream> {
    let stream = mio::net::TcpStream::connect(address)?;
    options.apply(SockRef::from(&stream))?;
    Ok(stream)
}
