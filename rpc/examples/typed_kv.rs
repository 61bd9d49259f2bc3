//! A typed key-value service on flint-rpc alone: a server process and a client process,
//! user messages both ways, read in place.
//!
//! `cargo run -p flint-rpc --example typed_kv` is the client: it starts a copy of itself
//! as the server (`typed_kv server`, the secret in `TYPED_KV_SECRET`), which prints the address it listens on, then
//! stores keys, reads them back and checks every byte, asks for a key it never stored,
//! and stops the server with a one-way message. `cargo test -p flint-rpc` runs it too (a
//! test target without a harness): any mismatch, or a server that does not answer or
//! exit in time, exits non-zero.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use flint_rpc::{rkyv, Request, RpcEnv, Service, UserMessage};

/// Stores `value` under `key`.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Put {
    key: String,
    value: Vec<u8>,
}

/// The answer to a `Put`: whether it replaced a value.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Stored {
    replaced: bool,
}

/// Reads the value under `key`.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Get {
    key: String,
}

/// The answer to a `Get`.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Value {
    value: Option<Vec<u8>>,
}

/// One-way: the server exits.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Shutdown;

impl UserMessage for Put {
    const ID: u32 = 1;
}
impl Request for Put {
    type Reply = Stored;
}
impl UserMessage for Stored {
    const ID: u32 = 2;
}
impl UserMessage for Get {
    const ID: u32 = 3;
}
impl Request for Get {
    type Reply = Value;
}
impl UserMessage for Value {
    const ID: u32 = 4;
}
impl UserMessage for Shutdown {
    const ID: u32 = 5;
}

/// Where the client hands the server the shared secret.
const SECRET_VAR: &str = "TYPED_KV_SECRET";

/// How long the server runs without being told to stop, and the client waits for it.
const BOUND: Duration = Duration::from_secs(60);

fn server(secret: &str) -> Result<(), Box<dyn std::error::Error>> {
    let env = RpcEnv::builder()
        .bind_address([127, 0, 0, 1].into())
        .port(0)
        .secret(secret)
        .build()?;
    let (stop, stopped) = mpsc::channel();
    let store = Service::new(HashMap::<String, Vec<u8>>::new())
        .on_ask::<Put>(|store, put| {
            let old = store.insert(put.key.to_string(), put.value.to_vec());
            Ok(Stored {
                replaced: old.is_some(),
            })
        })?
        .on_ask::<Get>(|store, get| {
            Ok(Value {
                value: store.get(get.key.as_str()).cloned(),
            })
        })?
        .on_message::<Shutdown>(move |_, _, _, _| {
            let _ = stop.send(());
        })?;
    env.handle().register("kv", store)?;
    println!("listening on {}", env.address());
    let _ = stopped.recv_timeout(BOUND);
    Ok(())
}

fn client() -> Result<(), Box<dyn std::error::Error>> {
    let secret = format!("kv-{}-{:?}", std::process::id(), Instant::now());
    let mut child = Command::new(std::env::current_exe()?)
        .arg("server")
        // Through the environment, not the command line, which other users can read.
        .env(SECRET_VAR, &secret)
        .stdout(Stdio::piped())
        .spawn()?;
    let outcome = talk_to(&mut child, &secret);
    // Bounded wait for the server to exit; killed if it does not.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    outcome?;
    match status {
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(format!("the server exited with {status}").into()),
        None => Err("the server did not exit after Shutdown".into()),
    }
}

fn talk_to(
    child: &mut std::process::Child,
    secret: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("the server said {line:?}"))?
        .parse()?;

    let env = RpcEnv::builder()
        .client_only()
        .secret(secret)
        .ask_timeout(Duration::from_secs(10))
        .build()?;
    let kv = env.handle().endpoint_ref(address, "kv");
    let value_of = |i: usize| -> Vec<u8> { (0..i % 300).map(|b| (b * 7 + i) as u8).collect() };
    for i in 0..1000 {
        let put = Put {
            key: format!("key-{i}"),
            value: value_of(i),
        };
        let stored = kv.ask_typed(&put)?;
        if stored.archived().replaced {
            return Err(format!("key-{i} was stored before").into());
        }
    }
    for i in 0..1000 {
        let value = kv.ask_typed(&Get {
            key: format!("key-{i}"),
        })?;
        let got = value.archived().value.as_ref().map(|v| v.as_slice());
        if got != Some(value_of(i).as_slice()) {
            return Err(format!("key-{i} read back as {got:?}").into());
        }
    }
    let replaced = kv.ask_typed(&Put {
        key: "key-7".into(),
        value: b"again".to_vec(),
    })?;
    if !replaced.archived().replaced {
        return Err("storing key-7 again replaced nothing".into());
    }
    let missing = kv.ask_typed(&Get {
        key: "never stored".into(),
    })?;
    if missing.archived().value.is_some() {
        return Err("a key never stored has a value".into());
    }
    kv.send_typed(&Shutdown)?;
    kv.flush();
    println!("typed_kv: 1000 keys stored and read back over {address}");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let outcome = match args.get(1).map(String::as_str) {
        Some("server") => std::env::var(SECRET_VAR)
            .map_err(|_| format!("{SECRET_VAR} is not set").into())
            .and_then(|secret| server(&secret)),
        // Anything else, the test harness's arguments included: the client.
        _ => client(),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("typed_kv: {error}");
            ExitCode::FAILURE
        }
    }
}
