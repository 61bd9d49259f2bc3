//! [`service!`](crate::service): a service written once, as a list of methods (a request
//! type and its reply type each), giving both sides: a `Handler` trait with one method per
//! request for the server, a [`Service`](crate::Service) made from any handler, and a
//! `Client` with one method per request for the caller.

/// Declares a service: a module holding its `Handler` trait (server side, one method per
/// request, each given the request validated and read in place), `service(handler)`
/// (the [`Service`](crate::Service) endpoint to register), and `Client` (one blocking
/// method per request, returning the typed reply; its `endpoint()` gives the other forms,
/// such as [`EndpointRef::ask_typed_async`](crate::EndpointRef::ask_typed_async)).
///
/// A method is an ask, `fn name(Request) -> Reply;`, whose request type implements
/// [`Request`](crate::Request) with the reply type the method names (checked at compile
/// time), or one-way, `fn name(Message);`: the client sends it without waiting, the
/// handler returns nothing, and an ask of it is refused with an error. The module sees the names of the module it
/// is declared in (`use super::*`), so declare it at module level, not in a function.
///
/// ```
/// use flint_rpc::{rkyv, Request, RpcEnv, UserMessage};
///
/// #[derive(rkyv::Archive, rkyv::Serialize)]
/// #[rkyv(crate = flint_rpc::rkyv)]
/// struct Add(i64, i64);
/// #[derive(rkyv::Archive, rkyv::Serialize)]
/// #[rkyv(crate = flint_rpc::rkyv)]
/// struct Negate(i64);
/// #[derive(rkyv::Archive, rkyv::Serialize)]
/// #[rkyv(crate = flint_rpc::rkyv)]
/// struct Number(i64);
///
/// impl UserMessage for Add { const ID: u32 = 1; }
/// impl Request for Add { type Reply = Number; }
/// impl UserMessage for Negate { const ID: u32 = 2; }
/// impl Request for Negate { type Reply = Number; }
/// impl UserMessage for Number { const ID: u32 = 3; }
///
/// flint_rpc::service! {
///     /// Arithmetic.
///     pub mod calculator {
///         /// The sum of two numbers.
///         fn add(Add) -> Number;
///         /// A number with its sign changed.
///         fn negate(Negate) -> Number;
///         /// Remembers a number, one-way.
///         fn remember(Number);
///     }
/// }
///
/// struct Calculator {
///     remembered: std::sync::Arc<std::sync::atomic::AtomicI64>,
/// }
///
/// impl calculator::Handler for Calculator {
///     fn remember(&mut self, number: &ArchivedNumber) {
///         self.remembered.store(number.0.to_native(), std::sync::atomic::Ordering::Relaxed);
///     }
///     fn add(&mut self, add: &ArchivedAdd) -> Result<Number, String> {
///         Ok(Number(add.0.to_native() + add.1.to_native()))
///     }
///     fn negate(&mut self, negate: &ArchivedNegate) -> Result<Number, String> {
///         negate.0.to_native().checked_neg().map(Number).ok_or_else(|| "overflow".into())
///     }
/// }
///
/// fn main() -> Result<(), flint_rpc::RpcError> {
///     let server = RpcEnv::builder().port(0).build()?;
///     let remembered = std::sync::Arc::default();
///     let service = calculator::service(Calculator { remembered: std::sync::Arc::clone(&remembered) })?;
///     server.handle().register("calculator", service)?;
///     let client = RpcEnv::builder().client_only().build()?;
///     let endpoint = client.handle().endpoint_ref(server.address(), "calculator");
///     let calculator = calculator::Client::new(endpoint);
///     assert_eq!(calculator.add(&Add(2, 3))?.archived().0, 5);
///     assert_eq!(calculator.negate(&Negate(7))?.archived().0, -7);
///     assert!(calculator.negate(&Negate(i64::MIN)).is_err());
///     calculator.remember(&Number(42))?;
///     // One-way sends and asks on one connection are handled in order.
///     calculator.add(&Add(0, 0))?;
///     assert_eq!(remembered.load(std::sync::atomic::Ordering::Relaxed), 42);
///     Ok(())
/// }
/// ```
#[macro_export]
macro_rules! service {
    (
        $(#[$meta:meta])*
        $vis:vis mod $name:ident {
            $(
                $(#[$method_meta:meta])*
                fn $method:ident($request:ty) $(-> $reply:ty)?;
            )*
        }
    ) => {
        $(#[$meta])*
        $vis mod $name {
            #![allow(unused_imports)]
            use super::*;

            /// The server side: one method per request, given the request validated
            /// and read in place. An ask's method returns the reply (an `Err` becomes
            /// an error reply); a one-way method returns nothing.
            pub trait Handler: ::std::marker::Send + 'static {
                $(
                    $crate::service!(@handler $(#[$method_meta])* $method($request) $(-> $reply)?);
                )*
            }

            /// The endpoint that runs `handler`, to register under the service's name.
            pub fn service<H: Handler>(
                handler: H,
            ) -> ::std::result::Result<$crate::Service<H>, $crate::RpcError> {
                let service = $crate::Service::new(handler);
                $(
                    let service = $crate::service!(@register service, H, $method($request) $(-> $reply)?);
                )*
                ::std::result::Result::Ok(service)
            }

            /// The client side: one method per request, a blocking ask
            /// (rpc.askTimeout) returning the typed reply, or a one-way send.
            #[derive(Debug, Clone)]
            pub struct Client {
                endpoint: $crate::EndpointRef,
            }

            impl Client {
                /// A client of the service at `endpoint`.
                pub fn new(endpoint: $crate::EndpointRef) -> Self {
                    Client { endpoint }
                }

                /// The endpoint it asks, for the other forms of an ask (a timeout of
                /// one's own, a future, a deferred send).
                pub fn endpoint(&self) -> &$crate::EndpointRef {
                    &self.endpoint
                }

                $(
                    $crate::service!(@client $(#[$method_meta])* $method($request) $(-> $reply)?);
                )*
            }
        }
    };

    (@handler $(#[$meta:meta])* $method:ident($request:ty) -> $reply:ty) => {
        $(#[$meta])*
        fn $method(
            &mut self,
            request: &$crate::Archived<$request>,
        ) -> ::std::result::Result<$reply, ::std::string::String>;
    };
    (@handler $(#[$meta:meta])* $method:ident($request:ty)) => {
        $(#[$meta])*
        fn $method(&mut self, message: &$crate::Archived<$request>);
    };

    (@register $service:ident, $handler:ident, $method:ident($request:ty) -> $reply:ty) => {
        $service.on_ask::<$request>(|handler, request| {
            <$handler as Handler>::$method(handler, request)
        })?
    };
    (@register $service:ident, $handler:ident, $method:ident($request:ty)) => {
        $service.on_one_way::<$request>(|handler, message| {
            <$handler as Handler>::$method(handler, message)
        })?
    };

    (@client $(#[$meta:meta])* $method:ident($request:ty) -> $reply:ty) => {
        $(#[$meta])*
        pub fn $method(
            &self,
            request: &$request,
        ) -> ::std::result::Result<$crate::TypedReply<$reply>, $crate::RpcError> {
            self.endpoint.ask_typed::<$request>(request)
        }
    };
    (@client $(#[$meta:meta])* $method:ident($request:ty)) => {
        $(#[$meta])*
        pub fn $method(
            &self,
            message: &$request,
        ) -> ::std::result::Result<(), $crate::RpcError> {
            self.endpoint.send_typed::<$request>(message)
        }
    };
}
