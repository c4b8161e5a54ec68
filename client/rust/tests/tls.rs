//! TLS and mutual TLS against the real server, with certificates made by
//! the openssl command (the test is skipped, with a message, without it).
#![cfg(feature = "rustls")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Server, TempDir};
use ticketing::{Client, Config, ErrorKind, TlsConfig};

fn openssl(dir: &Path, args: &[&str]) -> bool {
    Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// ca.pem/ca.key, server.pem/server.key (SAN 127.0.0.1, localhost), client.pem/client.key, other-ca.pem.
fn make_certs() -> Option<TempDir> {
    let d = std::env::temp_dir().join(format!("tk-rust-tls-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).ok()?;
    let td = TempDir(d.clone());
    std::fs::write(d.join("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").ok()?;
    std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").ok()?;
    let ok = ["ca", "other-ca"].iter().all(|ca| {
        openssl(
            &d,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ],
        )
    }) && [("server", "san.ext"), ("client", "client.ext")].iter().all(|(n, ext)| {
        openssl(
            &d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                &format!("/CN={n}"),
                "-keyout",
                &format!("{n}.key"),
                "-out",
                &format!("{n}.csr"),
            ],
        ) && openssl(
            &d,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{n}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                ext,
                "-out",
                &format!("{n}.pem"),
            ],
        )
    });
    if !ok {
        eprintln!("openssl not usable: TLS tests skipped");
        return None;
    }
    Some(td)
}

fn p(d: &Path, n: &str) -> PathBuf {
    d.join(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_mutual_tls() {
    let _w = common::watchdog("tls_and_mutual_tls", common::TEST_BOUND);
    let Some(td) = make_certs() else { return };
    let d = td.0.clone();
    let s = |n: &str| p(&d, n).to_string_lossy().into_owned();
    let srv = Server::start(None, &["--tls-cert", &s("server.pem"), "--tls-key", &s("server.key")]).await;
    let cfg = |tls: TlsConfig| {
        Config::builder()
            .addr(&srv.addr)
            .connect_timeout(Duration::from_secs(3))
            .tls(tls)
            .build()
            .unwrap()
    };
    let none: Option<(&str, &str)> = None;

    // The CA-only constructor (issue 33 finding 1: from_pem_files(ca, None) did not compile).
    let c = Client::connect(cfg(TlsConfig::from_ca_file(s("ca.pem")).unwrap())).await.unwrap();
    c.try_acquire("tls/a", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    c.close().await;

    // By name, too.
    let c = Client::connect(cfg(TlsConfig::from_pem_files(s("ca.pem"), none).unwrap().server_name("localhost")))
        .await
        .unwrap();
    c.close().await;

    // A CA that did not sign the server's certificate: Tls.
    let e = Client::connect(cfg(TlsConfig::from_pem_files(s("other-ca.pem"), none).unwrap()))
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Tls(_)), "{e:?}");
    // A name the certificate does not carry: Tls.
    let e = Client::connect(cfg(TlsConfig::from_pem_files(s("ca.pem"), none).unwrap().server_name("elsewhere")))
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Tls(_)), "{e:?}");
    drop(srv);

    // Mutual TLS: the server requires a client certificate.
    let srv = Server::start(
        None,
        &[
            "--tls-cert",
            &s("server.pem"),
            "--tls-key",
            &s("server.key"),
            "--tls-client-ca",
            &s("ca.pem"),
        ],
    )
    .await;
    let cfg = |tls: TlsConfig| {
        Config::builder()
            .addr(&srv.addr)
            .connect_timeout(Duration::from_secs(3))
            .tls(tls)
            .build()
            .unwrap()
    };
    let c = Client::connect(cfg(TlsConfig::from_pem_files(
        s("ca.pem"),
        Some((s("client.pem"), s("client.key"))),
    )
    .unwrap()))
    .await
    .unwrap();
    c.try_acquire("tls/m", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    c.close().await;
    let e = Client::connect(cfg(TlsConfig::from_pem_files(s("ca.pem"), none).unwrap()))
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Tls(_)), "{e:?}");
}
