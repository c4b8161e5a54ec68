//! TLS through rustls (cargo feature `rustls`, on by default).

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::error::Error;

/// TLS settings: the CA that signs the server's certificate, an optional
/// client certificate (mutual TLS), and an optional server name to verify
/// (default: the host of each address).
///
/// ```no_run
/// let tls = ticketing::TlsConfig::from_pem_files("ca.pem", Some(("client.pem", "client.key")))
///     .unwrap()
///     .server_name("ticketing.internal");
/// let cfg = ticketing::Config::builder().addr("10.0.0.1:7470").tls(tls).build().unwrap();
/// # let _ = cfg;
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    pub(crate) config: Arc<rustls::ClientConfig>,
    pub(crate) server_name: Option<String>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_err(e: impl std::fmt::Display) -> Error {
    Error::from(crate::error::ErrorKind::Tls(e.to_string()))
}

impl TlsConfig {
    /// From the CA bundle alone (PEM file): server verification without a
    /// client certificate. The same as `from_pem_files(ca, None)`, which
    /// needs a type for its `None` (`None::<(&str, &str)>`).
    ///
    /// ```no_run
    /// let tls = ticketing::TlsConfig::from_ca_file("ca.pem")?;
    /// let cfg = ticketing::Config::builder().addr("10.0.0.1:7470").tls(tls).build()?;
    /// # let _ = cfg; Ok::<(), ticketing::Error>(())
    /// ```
    pub fn from_ca_file(ca: impl AsRef<Path>) -> Result<Self, Error> {
        Self::from_pem_files(ca, None::<(&Path, &Path)>)
    }

    /// From the CA bundle alone, as PEM bytes (see [`TlsConfig::from_ca_file`]).
    pub fn from_ca_pem(ca_pem: &[u8]) -> Result<Self, Error> {
        Self::from_pem(ca_pem, None)
    }

    /// From PEM files: the CA bundle and, for mutual TLS, the client
    /// certificate chain and its private key. For the CA alone use
    /// [`TlsConfig::from_ca_file`].
    pub fn from_pem_files(ca: impl AsRef<Path>, client: Option<(impl AsRef<Path>, impl AsRef<Path>)>) -> Result<Self, Error> {
        let ca_pem = std::fs::read(ca.as_ref()).map_err(|e| tls_err(format!("reading {}: {e}", ca.as_ref().display())))?;
        let client = match client {
            Some((c, k)) => Some((
                std::fs::read(c.as_ref()).map_err(|e| tls_err(format!("reading {}: {e}", c.as_ref().display())))?,
                std::fs::read(k.as_ref()).map_err(|e| tls_err(format!("reading {}: {e}", k.as_ref().display())))?,
            )),
            None => None,
        };
        Self::from_pem(&ca_pem, client.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())))
    }

    /// From PEM bytes (see [`TlsConfig::from_pem_files`]).
    pub fn from_pem(ca_pem: &[u8], client: Option<(&[u8], &[u8])>) -> Result<Self, Error> {
        let mut roots = rustls::RootCertStore::empty();
        let mut n = 0;
        for c in CertificateDer::pem_slice_iter(ca_pem) {
            let c = c.map_err(|e| tls_err(format!("CA PEM: {e}")))?;
            roots.add(c).map_err(tls_err)?;
            n += 1;
        }
        if n == 0 {
            return Err(tls_err("no certificate in the CA PEM"));
        }
        let b = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(tls_err)?
            .with_root_certificates(roots);
        let config = match client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| tls_err(format!("client certificate PEM: {e}")))?;
                let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| tls_err(format!("client key PEM: {e}")))?;
                b.with_client_auth_cert(chain, key).map_err(tls_err)?
            }
            None => b.with_no_client_auth(),
        };
        Ok(TlsConfig {
            config: Arc::new(config),
            server_name: None,
        })
    }

    /// Uses a rustls configuration as it is.
    pub fn from_rustls(config: Arc<rustls::ClientConfig>) -> Self {
        TlsConfig { config, server_name: None }
    }

    /// The name to verify in the server's certificate (default: the host of
    /// each address; an IP address is checked against IP SANs).
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        let n = name.into();
        self.server_name = if n.is_empty() { None } else { Some(n) };
        self
    }

    pub(crate) async fn connect(
        &self,
        addr: &str,
        host: &str,
        tcp: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, crate::conn::ConnErr> {
        use crate::conn::ConnErr;
        let name = self.server_name.as_deref().unwrap_or(host);
        let sn =
            ServerName::try_from(name.to_string()).map_err(|e| ConnErr::Tls(format!("server name {name:?}: {e}"), Some(Arc::new(e))))?;
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(sn, tcp)
            .await
            .map_err(|e| {
                let plaintext = e
                    .get_ref()
                    .and_then(|i| i.downcast_ref::<rustls::Error>())
                    .is_some_and(|r| matches!(r, rustls::Error::InvalidMessage(_)));
                if plaintext {
                    // Its first bytes are not a TLS record (a plaintext HELLO
                    // begins "TKTS"): protocol.md §12.4.
                    ConnErr::Tls(
                        format!("the server at {addr} does not speak TLS (its first bytes are not a TLS record): {e}"),
                        Some(Arc::new(e)),
                    )
                } else {
                    ConnErr::Tls(format!("handshake with {addr}: {e}"), Some(Arc::new(e)))
                }
            })
    }
}
