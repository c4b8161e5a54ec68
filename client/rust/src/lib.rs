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
//! use ticketing::{Client, Config, Error};
//!
//! let client = Client::connect(Config::builder().addr("127.0.0.1:7470").build()?).await?;
//! match client.acquire("orders/42", Duration::from_secs(30), Duration::from_secs(5)).await {
//!     Ok(lease) => {
//!         println!("token {} valid for {:?}", lease.token(), lease.remaining());
//!         lease.release().await?;
//!     }
//!     Err(Error::Timeout) => println!("held by someone else"),
//!     Err(Error::Indeterminate) => println!("unknown: do not enter the critical section"),
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
pub mod wire;

pub use client::Client;
pub use config::{Config, ConfigBuilder, DEFAULT_CONNECT_TIMEOUT};
pub use error::{Error, Invalid};
pub use lease::Lease;
#[cfg(feature = "rustls")]
pub use tls::TlsConfig;
pub use wire::Code;

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
