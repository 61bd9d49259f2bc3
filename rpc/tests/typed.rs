//! Typed user messages over real sockets on 127.0.0.1: shapes round-trip byte for byte,
//! a large field is read in place, unknown ids and bodies that do not validate are
//! answered with errors that name them (and reach no handler), an id taken twice is
//! refused, and a request trickled in a byte at a time is still read in place.
//!
//! Every wait is bounded in time; every environment is stopped by its Drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use flint_rpc::rkyv::rancor;
use flint_rpc::wire::{ArchivedRoute, FrameDecoder, Route};
use flint_rpc::{rkyv, Bytes, Conf, Message, Request, RpcEnv, RpcError, Service, UserMessage};

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Record {
    name: String,
    tags: Vec<String>,
    values: Vec<u64>,
    wide: u128,
    inner: Inner,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Inner {
    flag: bool,
    pair: (u16, i64),
    maybe: Option<String>,
    bytes: Vec<u8>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
#[rkyv(crate = flint_rpc::rkyv)]
enum Shape {
    Empty,
    Circle { radius: f64 },
    Path(Vec<(i32, i32)>),
    Labelled(Box<Record>, String),
}

/// One-way, recorded by the service.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Note(String);

#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Blob {
    data: Vec<u8>,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
#[rkyv(crate = flint_rpc::rkyv)]
struct BlobSeen {
    len: u64,
    in_place: bool,
}

/// Registered nowhere.
#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Stranger(u8);

impl UserMessage for Record {
    const ID: u32 = 1;
}
impl Request for Record {
    type Reply = Record;
}
impl UserMessage for Shape {
    const ID: u32 = 2;
}
impl Request for Shape {
    type Reply = Shape;
}
impl UserMessage for Note {
    const ID: u32 = 3;
}
impl Request for Note {
    type Reply = Note;
}
impl UserMessage for Blob {
    const ID: u32 = 4;
}
impl Request for Blob {
    type Reply = BlobSeen;
}
impl UserMessage for BlobSeen {
    const ID: u32 = 5;
}
impl UserMessage for Stranger {
    const ID: u32 = 4242;
}
impl Request for Stranger {
    type Reply = Stranger;
}

/// Longer than an inline string (8 bytes) and not a multiple of 16: the route's name
/// lies before the body in the payload, which would leave the body unaligned but for its
/// placement.
const ECHO: &str = "typed echo service";

fn env() -> RpcEnv {
    RpcEnv::new(&Conf::from_pairs(["spark.rpc.askTimeout=10s"]).unwrap()).unwrap()
}

fn sample_record(seed: u64) -> Record {
    Record {
        name: format!("record number {seed}, long enough to be out of line"),
        tags: vec!["a".into(), String::new(), "ünïcode ✓".into()],
        values: (0..seed).map(|i| i * 0x0101_0101_0101).collect(),
        wide: u128::MAX - u128::from(seed),
        inner: Inner {
            flag: seed % 2 == 0,
            pair: (seed as u16, -(seed as i64)),
            maybe: (seed % 3 != 0).then(|| "maybe".repeat(seed as usize)),
            bytes: vec![seed as u8; 33],
        },
    }
}

/// What the echo service saw: how many messages reached a handler, and the notes.
#[derive(Default)]
struct Seen {
    handled: AtomicUsize,
}

/// A service that echoes records and shapes, records notes, and measures blobs.
fn echo_service(seen: Arc<Seen>, notes: mpsc::Sender<Note>) -> Service<Arc<Seen>> {
    Service::new(seen)
        .on_ask::<Record>(|seen, record| {
            seen.handled.fetch_add(1, Ordering::SeqCst);
            rkyv::deserialize::<Record, rancor::Error>(record).map_err(|e| e.to_string())
        })
        .unwrap()
        .on_ask::<Shape>(|seen, shape| {
            seen.handled.fetch_add(1, Ordering::SeqCst);
            rkyv::deserialize::<Shape, rancor::Error>(shape).map_err(|e| e.to_string())
        })
        .unwrap()
        .on_message::<Note>(move |seen, _ctx, note, _incoming| {
            seen.handled.fetch_add(1, Ordering::SeqCst);
            let _ = notes.send(Note(note.0.to_string()));
        })
        .unwrap()
        .on_message::<Blob>(|seen, _ctx, blob, incoming| {
            seen.handled.fetch_add(1, Ordering::SeqCst);
            // Zero copy: the slice the handler reads lies inside the frame's payload,
            // which is a view of the connection's receive buffer.
            let frame = incoming.frame().payload().as_ptr_range();
            let data = blob.data.as_slice().as_ptr_range();
            let in_place = frame.start <= data.start && data.end <= frame.end;
            let _ = incoming.reply_typed(&BlobSeen {
                len: blob.data.len() as u64,
                in_place,
            });
        })
        .unwrap()
}

fn serve() -> (RpcEnv, Arc<Seen>, mpsc::Receiver<Note>) {
    let server = env();
    let seen = Arc::new(Seen::default());
    let (notes, noted) = mpsc::channel();
    server
        .handle()
        .register(ECHO, echo_service(seen.clone(), notes))
        .unwrap();
    (server, seen, noted)
}

/// The body of a Custom reply, as it lies in its frame.
fn body_of(frame: &flint_rpc::Frame) -> Vec<u8> {
    match &frame.envelope().unwrap().message {
        flint_rpc::ArchivedMessage::Custom { body, .. } => body.as_slice().to_vec(),
        other => panic!("not a user message: {other:?}"),
    }
}

#[test]
fn user_types_of_several_shapes_round_trip_byte_for_byte() {
    let (server, seen, noted) = serve();
    let client = env();
    let echo = client.handle().endpoint_ref(server.address(), ECHO);

    for seed in [0, 1, 5, 17] {
        let record = sample_record(seed);
        let reply = echo.ask_typed(&record).unwrap();
        assert_eq!(reply.deserialize(), record);
        assert_eq!(reply.archived().name.as_str(), record.name);
        assert_eq!(reply.archived().wide, record.wide);
        // Byte-exact: the reply's archive is the one the sender would make.
        let expected = rkyv::to_bytes::<rancor::Error>(&record).unwrap();
        assert_eq!(body_of(reply.frame()), expected.as_slice(), "seed {seed}");
    }

    let shapes = [
        Shape::Empty,
        Shape::Circle { radius: -0.5 },
        Shape::Path(vec![(1, -1), (i32::MIN, i32::MAX)]),
        Shape::Labelled(Box::new(sample_record(3)), "nested".into()),
    ];
    for shape in shapes {
        let reply = echo.ask_typed(&shape).unwrap();
        assert_eq!(reply.deserialize(), shape);
        let expected = rkyv::to_bytes::<rancor::Error>(&shape).unwrap();
        assert_eq!(body_of(reply.frame()), expected.as_slice(), "{shape:?}");
    }

    // One-way, in order.
    for i in 0..3 {
        echo.send_typed(&Note(format!("note {i}"))).unwrap();
    }
    for i in 0..3 {
        let note = noted.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(note, Note(format!("note {i}")));
    }
    assert_eq!(seen.handled.load(Ordering::SeqCst), 4 + 4 + 3);
}

#[test]
fn a_1_mib_field_of_a_typed_request_is_read_in_place() {
    let (server, _seen, _noted) = serve();
    let client = env();
    let echo = client.handle().endpoint_ref(server.address(), ECHO);
    let blob = Blob {
        data: (0..1 << 20).map(|i| (i % 251) as u8).collect(),
    };
    let reply = echo.ask_typed(&blob).unwrap();
    assert_eq!(reply.archived().len, 1 << 20);
    assert!(reply.archived().in_place, "the handler's slice is a copy");
    // The reply is read in place on the asking side too.
    let payload = reply.frame().payload().as_ptr_range();
    let archived = reply.archived();
    let field: *const u8 = std::ptr::from_ref(&archived.len).cast();
    assert!(
        payload.contains(&field),
        "the reply was copied out of its frame"
    );
}

#[test]
fn an_unknown_id_is_answered_with_an_error_naming_it_and_the_connection_stays() {
    let (server, seen, _noted) = serve();
    let client = env();
    let echo = client.handle().endpoint_ref(server.address(), ECHO);
    let error = echo.ask_typed(&Stranger(1)).unwrap_err();
    let RpcError::Remote { message, .. } = &error else {
        panic!("expected a remote error, got {error:?}");
    };
    assert!(message.contains("user message id 4242"), "{message}");
    assert!(message.contains(ECHO), "{message}");
    // A catalogue message is refused as well, naming its kind.
    let error = echo.ask(&Message::ReviveOffers).unwrap_err().to_string();
    assert!(
        error.contains("user messages only") && error.contains("ReviveOffers"),
        "{error}"
    );
    // One-way, it is dropped; the same connection goes on serving.
    echo.send_typed(&Stranger(2)).unwrap();
    assert_eq!(seen.handled.load(Ordering::SeqCst), 0);
    let record = sample_record(2);
    assert_eq!(echo.ask_typed(&record).unwrap().deserialize(), record);
    assert_eq!(
        server.handle().stats().accepted,
        1,
        "the connection was replaced"
    );
}

#[test]
fn a_body_that_does_not_validate_is_refused_with_the_id_and_the_check_and_reaches_no_handler() {
    let (server, seen, noted) = serve();
    let client = env();
    let echo = client.handle().endpoint_ref(server.address(), ECHO);

    // A note whose out-of-line string is not UTF-8.
    let good = rkyv::to_bytes::<rancor::Error>(&Note("a note longer than the inline 8".into()))
        .unwrap()
        .to_vec();
    let mut bad = good.clone();
    bad[0] = 0xFF;
    let forged = |body: Vec<u8>| Message::Custom {
        tag: Note::ID,
        body: Bytes::from(body),
    };
    let error = echo.ask(&forged(bad.clone())).unwrap_err();
    let RpcError::Remote { message, .. } = &error else {
        panic!("expected a remote error, got {error:?}");
    };
    assert!(message.contains("user message id 3"), "{message}");
    assert!(message.contains("typed::Note"), "{message}");
    assert!(message.to_lowercase().contains("utf-8"), "{message}");

    // Too short to hold its root.
    let error = echo.ask(&forged(vec![1, 2, 3])).unwrap_err().to_string();
    // Where the check failed is told as offsets into the body, not as this process's
    // addresses.
    assert!(
        error.contains("+0..+3") && !error.contains("0x0000"),
        "{error}"
    );
    assert!(
        error.contains("user message id 3") && error.contains("failed validation"),
        "{error}"
    );

    // One-way, dropped; then a good note arrives alone.
    echo.send(&forged(bad)).unwrap();
    echo.send(&forged(good)).unwrap();
    let note = noted.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(note.0, "a note longer than the inline 8");
    assert_eq!(seen.handled.load(Ordering::SeqCst), 1);
}

/// A recursive type: how deep validation follows it is bounded.
#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
#[rkyv(crate = flint_rpc::rkyv)]
#[rkyv(serialize_bounds(
    __S: rkyv::ser::Writer + rkyv::ser::Allocator,
    __S::Error: rkyv::rancor::Source,
))]
#[rkyv(bytecheck(bounds(__C: rkyv::validation::ArchiveContext)))]
enum List {
    Nil,
    Cons(u32, #[rkyv(omit_bounds)] Box<List>),
}
impl UserMessage for List {
    const ID: u32 = 6;
}
impl Request for List {
    type Reply = BlobSeen;
}

fn list(depth: u32) -> List {
    (0..depth).fold(List::Nil, |tail, i| List::Cons(i, Box::new(tail)))
}

#[test]
fn a_message_nested_deeper_than_the_bound_is_refused_before_it_is_followed() {
    let server = env();
    let handled = Arc::new(AtomicUsize::new(0));
    let service = Service::new(handled.clone())
        .on_ask::<List>(|handled, list| {
            handled.fetch_add(1, Ordering::SeqCst);
            let mut len = 0;
            let mut at = list;
            while let ArchivedList::Cons(_, tail) = at {
                len += 1;
                at = tail;
            }
            Ok(BlobSeen {
                len,
                in_place: true,
            })
        })
        .unwrap();
    server.handle().register(ECHO, service).unwrap();
    let client = env();
    let lists = client.handle().endpoint_ref(server.address(), ECHO);

    // Each Box is one level; the root is one more.
    let fits = flint_rpc::MAX_USER_MESSAGE_DEPTH as u32 - 1;
    let reply = lists.ask_typed(&list(fits)).unwrap();
    assert_eq!(reply.archived().len, u64::from(fits));
    let error = lists.ask_typed(&list(fits + 1)).unwrap_err().to_string();
    assert!(
        error.contains("user message id 6") && error.contains("depth"),
        "{error}"
    );
    assert_eq!(handled.load(Ordering::SeqCst), 1);
}

#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Impostor(u64);
impl UserMessage for Impostor {
    const ID: u32 = Record::ID;
}
impl Request for Impostor {
    type Reply = Impostor;
}

#[test]
fn an_id_registered_twice_is_an_error_naming_both_types() {
    let service = Service::new(())
        .on_ask::<Record>(|_, _| Err("unused".into()))
        .unwrap();
    let error = match service.on_ask::<Impostor>(|_, _| Ok(Impostor(0))) {
        Ok(_) => panic!("the id was taken twice"),
        Err(error) => error,
    };
    assert!(
        matches!(error, RpcError::DuplicateMessageId { id: 1, .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("typed::Record") && text.contains("typed::Impostor"),
        "{text}"
    );
}

#[test]
fn a_request_trickled_in_byte_by_byte_is_read_in_place() {
    let server = env();
    let (reached, arrived) = mpsc::channel();
    let service = Service::new(reached)
        .on_message::<Record>(|reached, _ctx, record, incoming| {
            let body = match incoming.message() {
                flint_rpc::ArchivedMessage::Custom { body, .. } => body.as_ptr() as usize,
                _ => unreachable!(),
            };
            let _ = reached.send(body % flint_rpc::wire::BODY_ALIGN);
            let copy = rkyv::deserialize::<Record, rancor::Error>(record).unwrap();
            incoming.reply_typed(&copy).unwrap();
        })
        .unwrap();
    server.handle().register(ECHO, service).unwrap();

    let record = sample_record(7);
    let message = flint_rpc::encode_user_message(&record).unwrap();
    // A one-way frame first, of a length that leaves the ask's bytes at a stream offset
    // the sender's cuts do not line up with.
    let mut stream = flint_testkit::frames::frame_bytes(
        &Route::OneWay {
            endpoint: ECHO.into(),
        },
        &message,
    )
    .to_vec();
    stream.extend_from_slice(&flint_testkit::frames::frame_bytes(
        &Route::Ask {
            request_id: 9,
            endpoint: ECHO.into(),
        },
        &message,
    ));
    let mut raw = TcpStream::connect(server.address()).unwrap();
    raw.set_nodelay(true).unwrap();
    for (i, byte) in stream.iter().enumerate() {
        raw.write_all(std::slice::from_ref(byte)).unwrap();
        // Pauses at odd offsets, so that the server's reads end there.
        if i % 37 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for _ in 0..2 {
        let misalignment = arrived.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(misalignment, 0, "a body was read at an unaligned address");
    }

    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut decoder = FrameDecoder::new(1 << 20);
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "no reply came");
        let n = raw.read(&mut buf).expect("the reply never came");
        assert!(n > 0, "the server closed the connection");
        decoder.feed(&buf[..n]).unwrap();
        if let Some(frame) = decoder.next_frame().unwrap() {
            let envelope = frame.envelope().unwrap();
            assert!(
                matches!(envelope.route, ArchivedRoute::Reply { request_id } if request_id == 9)
            );
            let reply = flint_rpc::decode_user_message::<Record>(&envelope.message).unwrap();
            let copy = rkyv::deserialize::<Record, rancor::Error>(reply).unwrap();
            assert_eq!(copy, record);
            return;
        }
    }
}

#[test]
fn environments_from_the_builder_authenticate_with_their_secret() {
    let built = |secret: &str| {
        RpcEnv::builder()
            .bind_address([127, 0, 0, 1].into())
            .port(0)
            .secret(secret)
            .ask_timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    let (server, seen, _noted) = {
        let server = built("correct horse");
        let seen = Arc::new(Seen::default());
        let (notes, noted) = mpsc::channel();
        server
            .handle()
            .register(ECHO, echo_service(seen.clone(), notes))
            .unwrap();
        (server, seen, noted)
    };
    let friend = built("correct horse");
    let record = sample_record(4);
    let echo = friend.handle().endpoint_ref(server.address(), ECHO);
    assert_eq!(echo.ask_typed(&record).unwrap().deserialize(), record);

    let stranger = RpcEnv::builder()
        .client_only()
        .secret("wrong")
        .conf_pairs(["rpc.askTimeout=10s"])
        .build()
        .unwrap();
    let error = stranger
        .handle()
        .endpoint_ref(server.address(), ECHO)
        .ask_typed(&record)
        .unwrap_err();
    assert!(
        matches!(error, RpcError::AuthenticationFailed { .. }),
        "{error:?}"
    );
    assert_eq!(seen.handled.load(Ordering::SeqCst), 1);
}

/// Wakes the thread that polls, and counts the wake-ups.
struct ThreadWaker {
    thread: std::thread::Thread,
    wakes: AtomicUsize,
}

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// A minimal executor without a runtime: polls, then sleeps until woken. Its sleeps are
/// long (5 s), so that a future that completes sooner was completed by its waker.
fn block_on<F: std::future::Future>(future: F) -> (F::Output, usize) {
    let mut future = std::pin::pin!(future);
    let waker = Arc::new(ThreadWaker {
        thread: std::thread::current(),
        wakes: AtomicUsize::new(0),
    });
    let as_waker = std::task::Waker::from(waker.clone());
    let mut cx = std::task::Context::from_waker(&as_waker);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return (output, waker.wakes.load(Ordering::SeqCst));
        }
        assert!(Instant::now() < deadline, "the future never completed");
        std::thread::park_timeout(Duration::from_secs(5));
    }
}

#[test]
fn asks_as_futures_are_completed_through_their_waker_by_the_loop() {
    let server = env();
    // Answers a note 200 ms later, from another thread; drops one that says "never".
    let service = Service::new(())
        .on_message::<Note>(|_, _ctx, note, incoming| {
            let Some(reply) = incoming.reply_handle() else {
                return;
            };
            if note.0 == "never" {
                return;
            }
            let text = note.0.to_string();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                let _ = reply.reply_typed(&Note(format!("re: {text}")));
            });
        })
        .unwrap();
    server.handle().register(ECHO, service).unwrap();
    let client = env();
    let echo = client.handle().endpoint_ref(server.address(), ECHO);

    let started = Instant::now();
    let (reply, wakes) = block_on(echo.ask_typed_async(&Note("hello".into())));
    assert_eq!(reply.unwrap().archived().0.as_str(), "re: hello");
    assert!(wakes >= 1, "completed without a wake-up");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    // Several under way at once, awaited in turn.
    let futures: Vec<_> = (0..5)
        .map(|i| echo.ask_typed_async(&Note(format!("n{i}"))))
        .collect();
    for (i, future) in futures.into_iter().enumerate() {
        let (reply, _) = block_on(future);
        assert_eq!(reply.unwrap().archived().0.as_str(), format!("re: n{i}"));
    }

    // The loop's timer ends one that is never answered.
    let never = flint_rpc::encode_user_message(&Note("never".into())).unwrap();
    let (outcome, wakes) = block_on(echo.ask_async_timeout(&never, Duration::from_millis(300)));
    assert!(
        matches!(outcome, Err(RpcError::AskTimeout { .. })),
        "{outcome:?}"
    );
    assert!(wakes >= 1);
}

flint_rpc::service! {
    /// Echoes records and shapes; refuses empty records.
    mod echoes {
        /// The record back.
        fn record(Record) -> Record;
        /// The shape back.
        fn shape(Shape) -> Shape;
        /// A note, one-way.
        fn note(Note);
    }
}

flint_rpc::service! {
    /// Two methods for one request type: its id is taken twice.
    mod twice {
        fn first(Record) -> Record;
        fn second(Record) -> Record;
    }
}

struct Echoes {
    notes: mpsc::Sender<Note>,
}

impl echoes::Handler for Echoes {
    fn note(&mut self, note: &ArchivedNote) {
        let _ = self.notes.send(Note(note.0.to_string()));
    }

    fn record(&mut self, record: &ArchivedRecord) -> Result<Record, String> {
        if record.name.is_empty() {
            return Err("an empty name".into());
        }
        rkyv::deserialize::<Record, rancor::Error>(record).map_err(|e| e.to_string())
    }

    fn shape(&mut self, shape: &ArchivedShape) -> Result<Shape, String> {
        rkyv::deserialize::<Shape, rancor::Error>(shape).map_err(|e| e.to_string())
    }
}

struct Twice;

impl twice::Handler for Twice {
    fn first(&mut self, _: &ArchivedRecord) -> Result<Record, String> {
        Err("unused".into())
    }

    fn second(&mut self, _: &ArchivedRecord) -> Result<Record, String> {
        Err("unused".into())
    }
}

#[test]
fn a_declared_service_gives_a_handler_trait_and_a_typed_client() {
    let server = env();
    let (notes, noted) = mpsc::channel();
    server
        .handle()
        .register(ECHO, echoes::service(Echoes { notes }).unwrap())
        .unwrap();
    let client = env();
    let echoes = echoes::Client::new(client.handle().endpoint_ref(server.address(), ECHO));
    // A one-way method: sent, handled, nothing answered.
    for i in 0..3 {
        let sent: Result<(), RpcError> = echoes.note(&Note(format!("note {i}")));
        sent.unwrap();
    }
    for i in 0..3 {
        assert_eq!(
            noted.recv_timeout(Duration::from_secs(10)).unwrap(),
            Note(format!("note {i}"))
        );
    }
    // Asked instead of sent: refused at once, and the handler does not see it.
    let error = echoes
        .endpoint()
        .ask_typed(&Note("asked".into()))
        .unwrap_err();
    assert!(
        matches!(&error, RpcError::Remote { message, .. } if message.contains("is one-way")),
        "{error:?}"
    );
    let record = sample_record(9);
    assert_eq!(echoes.record(&record).unwrap().deserialize(), record);
    let shape = Shape::Path(vec![(3, 4)]);
    assert_eq!(echoes.shape(&shape).unwrap().deserialize(), shape);
    // The handler's Err is the asker's remote error.
    let empty = Record {
        name: String::new(),
        ..sample_record(1)
    };
    let error = echoes.record(&empty).unwrap_err();
    assert!(
        matches!(&error, RpcError::Remote { message, .. } if message == "an empty name"),
        "{error:?}"
    );
    assert!(
        noted.try_recv().is_err(),
        "the asked note reached the handler"
    );
    // A request type named by two methods is refused when the service is made.
    let Err(error) = twice::service(Twice) else {
        panic!("one id served twice");
    };
    assert!(
        matches!(error, RpcError::DuplicateMessageId { id: 1, .. }),
        "{error:?}"
    );
}

#[test]
fn typed_messages_reach_endpoints_of_the_same_environment_read_in_place() {
    let (server, _seen, noted) = serve();
    let local = server.handle().local_ref(ECHO);
    let record = sample_record(6);
    let reply = local.ask_typed(&record).unwrap();
    assert_eq!(reply.deserialize(), record);
    let payload = reply.frame().payload().as_ptr_range();
    assert!(
        payload.contains(&reply.archived().name.as_ptr()),
        "the reply was copied"
    );
    local.send_typed(&Note("local".into())).unwrap();
    assert_eq!(
        noted.recv_timeout(Duration::from_secs(10)).unwrap(),
        Note("local".into())
    );
}

#[test]
fn a_typed_message_over_the_size_limit_is_refused_at_the_sender() {
    let (server, seen, _noted) = serve();
    let small = RpcEnv::new(&Conf::from_pairs(["rpc.message.maxSize=1m"]).unwrap()).unwrap();
    let echo = small.handle().endpoint_ref(server.address(), ECHO);
    let blob = Blob {
        data: vec![7; 1 << 20],
    };
    let error = echo.ask_typed(&blob).unwrap_err();
    assert!(
        matches!(
            error,
            RpcError::Wire(flint_rpc::wire::WireError::MessageTooLarge { .. })
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("rpc.message.maxSize"), "{error}");
    // Just under it goes.
    let blob = Blob {
        data: vec![7; (1 << 20) - 4096],
    };
    assert_eq!(
        echo.ask_typed(&blob).unwrap().archived().len,
        (1 << 20) - 4096
    );
    assert_eq!(seen.handled.load(Ordering::SeqCst), 1);
}
