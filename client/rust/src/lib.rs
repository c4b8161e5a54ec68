//! Official Rust client for **Ticketing**, a dedicated distributed lock
//! server: `acquire(key, lease, wait)` / `release(key, token)`, FIFO per key,
//! fencing tokens, optional raft cluster.
//!
//! * [`Client`]: async on tokio, `Clone + Send + Sync`, one per process; a
//!   background driver task per connection; cancellation safe.
//! * [`blocking::Client`]: the same for synchronous code, on its own runtime
//!   thread.
//!
//! # The fencing-token rule
//!
//! A lease can end while its holder still works (a pause, a slow network).
//! Every resource the lock protects must therefore check the token: keep the
//! highest token seen and reject a lower one, **with the check and the
//! business write in one transaction** (or one conditional write):
//!
//! ```sql
//! UPDATE orders SET state = 'paid', fence = $token WHERE id = 42 AND fence < $token;
//! ```
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), ticketing::Error> {
//! use std::time::Duration;
//! use ticketing::{Client, Config, ErrorKind};
//!
//! let client = Client::connect(Config::builder().addr("127.0.0.1:7470").build()?).await?;
//! match client.acquire("orders/42", Duration::from_secs(30), Duration::from_secs(5)).await {
//!     Ok(lease) => {
//!         println!("token {} valid for {:?}", lease.token(), lease.remaining());
//!         lease.release().await?;
//!     }
//!     Err(e) if *e.kind() == ErrorKind::Timeout => println!("held by someone else"),
//!     Err(e) if *e.kind() == ErrorKind::Indeterminate => println!("unknown: do not enter the critical section"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod blocking;
mod client;
mod config;
mod conn;
mod error;
mod lease;
#[cfg(feature = "rustls")]
mod tls;
// The codec is not public API: private, unless the cargo feature
// `unstable-wire` (the crate's own tests and fake servers; no semver promise).
#[cfg(feature = "unstable-wire")]
#[doc(hidden)]
pub mod wire;
#[cfg(not(feature = "unstable-wire"))]
mod wire;

pub use client::{AcquireOptions, Client};
pub use config::{Config, ConfigBuilder, DEFAULT_ANSWER_ALLOWANCE, DEFAULT_CONNECT_TIMEOUT};
pub use error::{Error, ErrorKind, Invalid};
pub use lease::Lease;
#[cfg(feature = "rustls")]
pub use tls::TlsConfig;
pub use wire::Code;

/// Connection events (connected, lost, failed attempts, redirects, failed
/// background releases; never a token) go to the `log` facade, target
/// `ticketing`, with the cargo feature `log` (off by default: nothing is logged).
#[cfg(feature = "log")]
pub(crate) fn log(args: std::fmt::Arguments<'_>) {
    log::info!(target: "ticketing", "{args}");
}

#[cfg(not(feature = "log"))]
pub(crate) fn log(_args: std::fmt::Arguments<'_>) {}

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(test)]
mod tests {
    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        send_sync::<crate::Client>();
        send_sync::<crate::Lease>();
        send_sync::<crate::blocking::Client>();
        send_sync::<crate::blocking::Lease>();
        send_sync::<crate::Error>();
        send_sync::<crate::Config>();
    }

    #[test]
    fn addresses() {
        use crate::config::split_host_port;
        assert_eq!(split_host_port("127.0.0.1:7470"), Some(("127.0.0.1", 7470)));
        assert_eq!(split_host_port("[::1]:7470"), Some(("::1", 7470)));
        assert_eq!(split_host_port("host.example:1"), Some(("host.example", 1)));
        for bad in ["", "host", ":1", "::1:7470", "h:99999", "h:x"] {
            assert_eq!(split_host_port(bad), None, "{bad}");
        }
        let cfg = crate::Config::builder().addr("a:1").addr("a:1").addr("b:2").build().unwrap();
        assert_eq!(cfg.addrs(), ["a:1", "b:2"]);
        // The token never shows in Debug output.
        let dbg = format!("{:?}", crate::Config::builder().addr("a:1").token("s3cret").build().unwrap());
        assert!(!dbg.contains("s3cret"), "{dbg}");
    }
}
