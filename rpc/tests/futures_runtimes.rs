//! Asks as futures complete under the runtimes their callers use: tokio's (one thread,
//! and several, with asks spawned as tasks) and `futures::executor::block_on`. The
//! transport has no runtime of its own: its event loop completes each future through
//! the waker it was last polled with.

// tokio and futures are not dev-dependencies under loom (see Cargo.toml).
#![cfg(not(loom))]

use std::time::Duration;

use flint_rpc::{rkyv, Conf, Request, RpcEnv, Service, UserMessage};

#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Add {
    a: i64,
    b: i64,
}

#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Sum(i64);

impl UserMessage for Add {
    const ID: u32 = 1;
}
impl Request for Add {
    type Reply = Sum;
}
impl UserMessage for Sum {
    const ID: u32 = 2;
}

/// A server with an "adder" service, and a client environment.
fn pair() -> (RpcEnv, RpcEnv) {
    let conf = Conf::from_pairs(["rpc.askTimeout=30s"]).unwrap();
    let server = RpcEnv::new(&conf).unwrap();
    let adder = Service::new(())
        .on_ask::<Add>(|_, add| Ok(Sum(add.a.to_native() + add.b.to_native())))
        .unwrap();
    server.handle().register("adder", adder).unwrap();
    let client = RpcEnv::new(&conf).unwrap();
    (server, client)
}

#[test]
fn typed_asks_complete_on_a_one_thread_tokio_runtime() {
    let (server, client) = pair();
    let adder = client.handle().endpoint_ref(server.address(), "adder");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        for i in 0..200 {
            let sum = adder.ask_typed_async(&Add { a: i, b: 1 }).await.unwrap();
            assert_eq!(sum.archived().0.to_native(), i + 1);
        }
        // And one the runtime's timer races: the reply comes first.
        let ask = adder.ask_typed_async(&Add { a: 2, b: 2 });
        let sum = tokio::time::timeout(Duration::from_secs(30), ask)
            .await
            .expect("the reply before the runtime's timeout")
            .unwrap();
        assert_eq!(sum.archived().0.to_native(), 4);
    });
}

#[test]
fn typed_asks_spawned_as_tasks_of_a_multi_thread_tokio_runtime_all_complete() {
    let (server, client) = pair();
    let adder = client.handle().endpoint_ref(server.address(), "adder");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let sums = runtime.block_on(async {
        let tasks: Vec<_> = (0..500)
            .map(|i| {
                let adder = adder.clone();
                tokio::spawn(async move {
                    let sum = adder.ask_typed_async(&Add { a: i, b: i }).await.unwrap();
                    (i, sum.archived().0.to_native())
                })
            })
            .collect();
        let mut sums = Vec::new();
        for task in tasks {
            sums.push(task.await.unwrap());
        }
        sums
    });
    assert_eq!(sums.len(), 500);
    assert!(sums.iter().all(|&(i, sum)| sum == 2 * i));
}

#[test]
fn asks_joined_under_futures_block_on_all_complete() {
    let (server, client) = pair();
    let adder = client.handle().endpoint_ref(server.address(), "adder");
    let asks: Vec<_> = (0..300)
        .map(|i| adder.ask_typed_async(&Add { a: i, b: 7 }))
        .collect();
    let sums = futures::executor::block_on(futures::future::join_all(asks));
    assert_eq!(sums.len(), 300);
    for (i, sum) in sums.into_iter().enumerate() {
        assert_eq!(sum.unwrap().archived().0.to_native(), i as i64 + 7);
    }
}
