//! The status server against a real driver (no executors) on 127.0.0.1: clients that
//! hold connections without a word get at most MAX_CONNECTIONS threads, then 503, and
//! never hold up the driver's publishing; stopping does not wait for them.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use flint_rpc::Conf;
use flint_scheduler::Driver;
use flint_ui::{StatusServer, UiConfig, MAX_CONNECTIONS, PUBLISH_INTERVAL};

fn get(address: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (status, text.split_once("\r\n\r\n").unwrap().1.to_owned())
}

fn sequence(address: SocketAddr) -> u64 {
    let (status, body) = get(address, "/api/v1/status");
    assert_eq!(status, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    status["sequence"].as_u64().unwrap()
}

#[test]
fn silent_clients_get_a_bounded_share_and_never_hold_the_driver_up() {
    let conf = Conf::from_pairs(["ui.port=0"]).unwrap();
    let driver = Driver::standalone(&conf).unwrap();
    let board = driver.publish_status(PUBLISH_INTERVAL).unwrap();
    let config = UiConfig::from_conf(&conf).unwrap();
    let mut server = StatusServer::start(board.clone(), &config, "app-1", "test").unwrap();
    let address = server.address();
    let before = sequence(address);

    // As many silent clients as the server takes, each holding a thread.
    let silent: Vec<TcpStream> = (0..MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    // Accepted in order: the next one is refused at once, with 503.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let started = Instant::now();
        let (status, _) = get(address, "/metrics");
        if status == 503 {
            assert!(started.elapsed() < Duration::from_secs(1));
            break;
        }
        // The last silent ones may not have been accepted yet.
        assert!(
            Instant::now() < deadline,
            "no 503 with {MAX_CONNECTIONS} held"
        );
    }
    // Meanwhile the driver publishes as ever: its timer never waits on the server.
    let held = board.latest().sequence;
    std::thread::sleep(PUBLISH_INTERVAL * 5);
    assert!(board.latest().sequence >= held + 3);

    // Stopping does not wait for the silent clients' timeouts.
    let stopping = Instant::now();
    server.stop();
    assert!(
        stopping.elapsed() < Duration::from_secs(2),
        "{:?}",
        stopping.elapsed()
    );
    assert!(TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_err());
    drop(silent);
    assert!(before > 0);
    driver.stop().unwrap();
}

#[test]
fn the_next_free_port_is_taken_when_ui_port_is_busy() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let conf = Conf::from_pairs([format!("ui.port={port}")]).unwrap();
    let driver = Driver::standalone(&conf).unwrap();
    let board = driver.publish_status(PUBLISH_INTERVAL).unwrap();
    let config = UiConfig::from_conf(&conf).unwrap();
    match StatusServer::start(board, &config, "app-1", "test") {
        Ok(server) => {
            assert!(server.address().port() > port);
            assert!(server.address().port() <= port + flint_ui::PORT_RETRIES);
            assert_eq!(
                get(server.address(), "/api/v1/applications/app-1/jobs").0,
                200
            );
            assert_eq!(
                get(server.address(), "/api/v1/applications/app-2/jobs").0,
                404
            );
        }
        // The 16 ports after it were all taken by others: said with the key's name.
        Err(e) => assert!(e.to_string().contains("(ui.port)"), "{e}"),
    }
    driver.stop().unwrap();
}

#[test]
fn a_client_trickling_its_request_is_cut_off_after_the_timeout_in_all() {
    let conf = Conf::from_pairs(["ui.port=0"]).unwrap();
    let driver = Driver::standalone(&conf).unwrap();
    let board = driver.publish_status(PUBLISH_INTERVAL).unwrap();
    let config = UiConfig::from_conf(&conf).unwrap();
    let mut server = StatusServer::start(board, &config, "app-1", "test").unwrap();
    let mut stream = TcpStream::connect(server.address()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    // A byte every 300 ms, never a whole head: each read is well within the timeout.
    let mut writer = stream.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        let started = Instant::now();
        for byte in b"GET /api/v1/status HTTP/1.1\r\nX-Slow: ".iter().cycle() {
            if writer.write_all(&[*byte]).is_err() || started.elapsed() > Duration::from_secs(12) {
                return;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let started = Instant::now();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let waited = started.elapsed();
    assert!(
        text.starts_with("HTTP/1.1 408"),
        "{text:?} after {waited:?}"
    );
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(8),
        "cut off after {waited:?}"
    );
    drop(stream);
    trickler.join().unwrap();
    server.stop();
    driver.stop().unwrap();
}
