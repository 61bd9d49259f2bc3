//! One HTTP/1.1 exchange per connection, bounded: the request head is read into a fixed
//! buffer and parsed by httparse into a fixed array of headers; no body is taken.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tracing::debug;

/// The largest request head (request line and headers) taken; a larger one gets 431.
pub const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// Headers a request may have; more gets 431.
const MAX_HEADERS: usize = 64;
/// How long a client may take to send its request, and to take the response's bytes
/// (per read or write).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections open at once, each answered on a thread of its own; past this, new ones
/// get 503 at once.
pub const MAX_CONNECTIONS: usize = 32;

/// What a request asks for.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    /// Its path, without the query.
    pub path: &'a str,
    /// Its query, without the `?`.
    pub query: &'a str,
}

/// What is sent back.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status,
            content_type,
            body: body.into(),
        }
    }

    pub fn text(status: u16, body: impl Into<String>) -> Self {
        let mut body = body.into();
        body.push('\n');
        Response::new(status, "text/plain; charset=utf-8", body)
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn write_response(stream: &mut TcpStream, response: &Response, head_only: bool) {
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
         X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    let written = stream.write_all(head.as_bytes()).and_then(|()| {
        if head_only {
            Ok(())
        } else {
            stream.write_all(&response.body)
        }
    });
    if let Err(e) = written.and_then(|()| stream.flush()) {
        debug!("the status page could not answer a client: {e}");
    }
}

/// Answers a connection that cannot be served now.
pub(crate) fn busy(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    write_response(
        &mut stream,
        &Response::text(503, "too many connections waiting"),
        false,
    );
}

/// Reads one request from `stream`, answers it with `handler`'s response (or the
/// error the request earned), and closes.
pub(crate) fn serve(mut stream: TcpStream, handler: impl FnOnce(&Request<'_>) -> Response) {
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_nodelay(true);
    let mut buffer = vec![0u8; MAX_REQUEST_HEAD];
    let mut filled = 0;
    // The whole head within CLIENT_TIMEOUT, not each read: a client trickling a byte
    // every few seconds would otherwise hold its thread (one of MAX_CONNECTIONS) for
    // hours.
    let started = std::time::Instant::now();
    let response = loop {
        if filled == buffer.len() {
            break Response::text(431, "request head too large");
        }
        let Some(left) = CLIENT_TIMEOUT.checked_sub(started.elapsed()) else {
            break Response::text(408, "request not received in time");
        };
        let _ = stream.set_read_timeout(Some(left.max(Duration::from_millis(1))));
        match stream.read(&mut buffer[filled..]) {
            Ok(0) => return,
            Ok(n) => filled += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break Response::text(408, "request not received in time");
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buffer[..filled]) {
            Ok(httparse::Status::Partial) => continue,
            Ok(httparse::Status::Complete(_)) => {
                let method = request.method.unwrap_or("");
                let target = request.path.unwrap_or("/");
                let head_only = method == "HEAD";
                if method != "GET" && !head_only {
                    break Response::text(405, "only GET and HEAD are served");
                }
                let has_body = request.headers.iter().any(|h| {
                    (h.name.eq_ignore_ascii_case("content-length")
                        && std::str::from_utf8(h.value).map_or(true, |v| v.trim() != "0"))
                        || h.name.eq_ignore_ascii_case("transfer-encoding")
                });
                if has_body {
                    break Response::text(413, "requests with a body are not taken");
                }
                let (path, query) = target.split_once('?').unwrap_or((target, ""));
                let response = handler(&Request { path, query });
                write_response(&mut stream, &response, head_only);
                return;
            }
            Err(httparse::Error::TooManyHeaders) => {
                break Response::text(431, "too many request headers");
            }
            Err(e) => break Response::text(400, format!("bad request: {e}")),
        }
    };
    write_response(&mut stream, &response, false);
    linger(stream);
}

/// Bytes of a refused request read and dropped after the answer, and for how long.
const LINGER_BYTES: usize = 256 * 1024;
const LINGER_TIME: Duration = Duration::from_millis(500);

/// After refusing a request whose bytes may still be coming: closing with unread bytes
/// would reset the connection, and the client would lose the answer before reading
/// it. Its sending side is closed, then what it still sends is read and dropped, a
/// bounded amount for a bounded time.
fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(LINGER_TIME));
    let started = std::time::Instant::now();
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < LINGER_BYTES && started.elapsed() < LINGER_TIME {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    /// Sends `raw` to a connection `serve` answers with a handler that echoes the path
    /// and query; the status code and body.
    fn exchange(raw: &[u8]) -> (u16, String) {
        exchange_pieces(&[raw])
    }

    /// As [`exchange`], the request written in `pieces` 20 ms apart.
    fn exchange_pieces(pieces: &[&[u8]]) -> (u16, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            serve(stream, |request| {
                Response::text(200, format!("{} {}", request.path, request.query))
            });
        });
        let mut client = TcpStream::connect(address).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        for piece in pieces {
            let _ = client.write_all(piece);
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut response = Vec::new();
        let _ = client.read_to_end(&mut response);
        server.join().unwrap();
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.split(' ').nth(1).unwrap().parse().unwrap();
        let body = text.split_once("\r\n\r\n").unwrap().1.trim_end().to_owned();
        (status, body)
    }

    #[test]
    fn a_get_reaches_the_handler_with_its_path_and_query() {
        let (status, body) = exchange(b"GET /api/v1/status?x=1 HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!((status, body.as_str()), (200, "/api/v1/status x=1"));
    }

    #[test]
    fn a_request_head_in_pieces_is_read_whole() {
        let (status, body) =
            exchange_pieces(&[b"GET /me", b"trics HTTP/1.1\r\nHo", b"st: h\r\n\r\n"]);
        assert_eq!((status, body.as_str()), (200, "/metrics"));
    }

    #[test]
    fn a_head_over_the_limit_gets_431_without_reading_it_all() {
        let mut raw = b"GET / HTTP/1.1\r\nX-Filler: ".to_vec();
        raw.resize(MAX_REQUEST_HEAD * 4, b'a');
        assert_eq!(exchange(&raw).0, 431);
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for n in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{n}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(exchange(&many).0, 431);
    }

    #[test]
    fn bodies_other_methods_and_garbage_are_refused() {
        let body = b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(exchange(body).0, 413);
        let chunked = b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(exchange(chunked).0, 413);
        assert_eq!(exchange(b"DELETE / HTTP/1.1\r\n\r\n").0, 405);
        assert_eq!(exchange(b"\x00\x01\x02 garbage\r\n\r\n").0, 400);
        // An empty body is no body.
        assert_eq!(
            exchange(b"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").0,
            200
        );
    }
}
