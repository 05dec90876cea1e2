//! Configs built from real PEM files (made by [`crate::pki`]), checked with in-memory handshakes
//! between rustls clients and servers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::ServerName;

use crate::pki::{Ca, Leaf};
use crate::*;

struct Setup {
    dir: tempfile::TempDir,
    ca: Ca,
    server: TlsConfig,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA").unwrap();
    ca.write(&dir.path().join("ca.crt")).unwrap();
    let (cert, key) = ca
        .issue(&Leaf::new("server").serial(1))
        .unwrap()
        .write(dir.path(), "server")
        .unwrap();
    let server = TlsConfig {
        cert: Some(cert),
        key: Some(key),
        ..TlsConfig::default()
    };
    Setup { dir, ca, server }
}

impl Setup {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn client(&self, cert: Option<&str>) -> TlsConfig {
        TlsConfig {
            ca: Some(self.path("ca.crt")),
            cert: cert.map(|n| self.path(&format!("{n}.crt"))),
            key: cert.map(|n| self.path(&format!("{n}.key"))),
            ..TlsConfig::default()
        }
    }

    fn issue(&self, ca: &Ca, leaf: Leaf, name: &str) {
        ca.issue(&leaf)
            .unwrap()
            .write(self.dir.path(), name)
            .unwrap();
    }
}

/// Runs a handshake in memory; returns the server certificate's serial (as the client saw it)
/// and the client certificate's subject (as the server saw it).
fn handshake(
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
) -> Result<(String, Option<String>), String> {
    let mut s = rustls::ServerConnection::new(server).map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let mut c = rustls::ClientConnection::new(client, name).map_err(|e| e.to_string())?;
    for _ in 0..20 {
        let mut buf = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut buf).map_err(|e| e.to_string())?;
        }
        let mut slice = &buf[..];
        while !slice.is_empty() {
            s.read_tls(&mut slice).map_err(|e| e.to_string())?;
            s.process_new_packets()
                .map_err(|e| format!("server: {e}"))?;
        }
        let mut buf = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut buf).map_err(|e| e.to_string())?;
        }
        let mut slice = &buf[..];
        while !slice.is_empty() {
            c.read_tls(&mut slice).map_err(|e| e.to_string())?;
            c.process_new_packets()
                .map_err(|e| format!("client: {e}"))?;
        }
        if !c.is_handshaking() && !s.is_handshaking() {
            let serial = c
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(describe)
                .map(|i| i.serial)
                .unwrap_or_default();
            return Ok((serial, peer_subject(s.peer_certificates())));
        }
    }
    Err("the handshake did not finish".into())
}

fn server(config: &TlsConfig) -> Arc<rustls::ServerConfig> {
    build_server(config, &Files::read(config).unwrap(), &[]).unwrap()
}

fn client(config: &TlsConfig) -> Arc<rustls::ClientConfig> {
    build_client(config, &Files::read(config).unwrap()).unwrap()
}

#[test]
fn a_server_and_a_client_shake_hands_and_the_serial_is_seen() {
    let t = setup();
    check(&t.server, Role::Server).unwrap();
    check(&t.client(None), Role::Client).unwrap();
    let (serial, subject) = handshake(server(&t.server), client(&t.client(None))).unwrap();
    assert_eq!(serial, "01");
    assert_eq!(subject, None, "no client certificate");
}

#[test]
fn a_key_that_does_not_match_its_certificate_names_the_key() {
    let t = setup();
    t.issue(&t.ca, Leaf::new("other"), "other");
    let config = TlsConfig {
        key: Some(t.path("other.key")),
        ..t.server.clone()
    };
    let e = check(&config, Role::Server).unwrap_err();
    assert_eq!(e.path.as_deref(), Some(t.path("other.key").as_path()));
    assert!(e.message.contains("does not match"), "{e}");
}

#[test]
fn an_expired_or_future_certificate_is_refused_with_its_path() {
    let t = setup();
    t.issue(
        &t.ca,
        Leaf::new("old").valid(now() - 10 * 86_400, now() - 86_400),
        "old",
    );
    t.issue(
        &t.ca,
        Leaf::new("new").valid(now() + 86_400, now() + 10 * 86_400),
        "new",
    );
    for (name, why) in [("old", "expired"), ("new", "not valid yet")] {
        let config = TlsConfig {
            cert: Some(t.path(&format!("{name}.crt"))),
            key: Some(t.path(&format!("{name}.key"))),
            ..TlsConfig::default()
        };
        let e = check(&config, Role::Server).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
        assert_eq!(e.path, config.cert);
    }
}

#[test]
fn unreadable_or_wrong_files_say_which_and_why() {
    let t = setup();
    let missing = TlsConfig {
        cert: Some(t.path("nope.crt")),
        ..t.server.clone()
    };
    let e = check(&missing, Role::Server).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&t.path("nope.crt").display().to_string()),
        "{e}"
    );
    assert!(e.message.contains("cannot read"), "{e}");

    // A device is refused before a byte is read; an oversized file after the cap.
    let device = TlsConfig {
        cert: Some(PathBuf::from("/dev/zero")),
        ..t.server.clone()
    };
    let e = check(&device, Role::Server).unwrap_err();
    assert!(e.message.contains("not a regular file"), "{e}");
    std::fs::write(t.path("huge.crt"), vec![b'A'; MAX_PEM_FILE as usize + 1]).unwrap();
    let huge = TlsConfig {
        ca: Some(t.path("huge.crt")),
        ..t.server.clone()
    };
    let e = check(&huge, Role::Server).unwrap_err();
    assert!(e.message.contains("larger than"), "{e}");

    std::fs::write(t.path("garbage.crt"), "not a certificate\n").unwrap();
    let garbage = TlsConfig {
        cert: Some(t.path("garbage.crt")),
        ..t.server.clone()
    };
    let e = check(&garbage, Role::Server).unwrap_err();
    assert!(e.message.contains("no PEM certificate"), "{e}");

    let keyless = TlsConfig {
        key: None,
        ..t.server.clone()
    };
    assert!(
        check(&keyless, Role::Server)
            .unwrap_err()
            .message
            .contains("`key`")
    );

    let no_ca = TlsConfig {
        verify_client: true,
        ..t.server.clone()
    };
    assert!(
        check(&no_ca, Role::Server)
            .unwrap_err()
            .message
            .contains("`ca`")
    );

    let cipher = TlsConfig {
        ciphers: Some(vec!["TLS_RSA_WITH_NULL_MD5".into()]),
        ..t.server.clone()
    };
    let e = check(&cipher, Role::Server).unwrap_err();
    assert!(
        e.message.contains("TLS13_AES_128_GCM_SHA256"),
        "lists the known ones: {e}"
    );
}

#[test]
fn mutual_tls_accepts_the_right_ca_and_refuses_others_and_none() {
    let t = setup();
    t.issue(&t.ca, Leaf::new("agent-7"), "agent");
    let stranger = Ca::new("another CA").unwrap();
    t.issue(&stranger, Leaf::new("intruder"), "intruder");
    let config = TlsConfig {
        ca: Some(t.path("ca.crt")),
        verify_client: true,
        ..t.server.clone()
    };
    let s = server(&config);
    let (_, subject) = handshake(s.clone(), client(&t.client(Some("agent")))).unwrap();
    assert_eq!(subject.as_deref(), Some("CN=agent-7"));
    let e = handshake(s.clone(), client(&t.client(Some("intruder")))).unwrap_err();
    assert!(e.starts_with("server:"), "{e}");
    let e = handshake(s, client(&t.client(None))).unwrap_err();
    assert!(e.starts_with("server:"), "{e}");

    // With a CA but no verify_client, a certificate is optional, and read when given.
    let optional = server(&TlsConfig {
        ca: Some(t.path("ca.crt")),
        ..t.server.clone()
    });
    assert!(handshake(optional.clone(), client(&t.client(None))).is_ok());
    let (_, subject) = handshake(optional, client(&t.client(Some("agent")))).unwrap();
    assert_eq!(subject.as_deref(), Some("CN=agent-7"));
}

#[test]
fn the_peer_subject_is_written_as_rfc_4514_without_spaces() {
    let t = setup();
    t.issue(&t.ca, Leaf::new("client").organization("Example"), "client");
    let s = server(&TlsConfig {
        ca: Some(t.path("ca.crt")),
        verify_client: true,
        ..t.server.clone()
    });
    let (_, subject) = handshake(s, client(&t.client(Some("client")))).unwrap();
    // Encoded O first, then CN (as `openssl req -subj "/O=Example/CN=client"`): RFC 4514
    // writes the last RDN first.
    assert_eq!(subject.as_deref(), Some("CN=client,O=Example"));
}

#[test]
fn tls_1_3_only_refuses_a_1_2_client() {
    let t = setup();
    let s = server(&TlsConfig {
        min_version: TlsVersion::V1_3,
        ..t.server.clone()
    });
    let ca = t.path("ca.crt");
    let roots = roots_of(
        &ca,
        &parse_certs(&ca, &std::fs::read(&ca).unwrap()).unwrap(),
    )
    .unwrap();
    let old = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    assert!(handshake(s, old).is_err());
}

#[test]
fn rotated_files_serve_new_handshakes_and_a_broken_rotation_keeps_the_old() {
    let t = setup();
    let watched = Watched::server(&t.server, &[]).unwrap();
    let c = client(&t.client(None));
    assert_eq!(watched.poll(), Reload::Unchanged);
    assert_eq!(handshake(watched.current(), c.clone()).unwrap().0, "01");

    t.issue(&t.ca, Leaf::new("server").serial(2), "server");
    assert_eq!(watched.poll(), Reload::Reloaded);
    assert_eq!(watched.poll(), Reload::Unchanged);
    assert_eq!(handshake(watched.current(), c.clone()).unwrap().0, "02");

    // A half-done rotation: a new certificate with the old key.
    let next = t.ca.issue(&Leaf::new("server").serial(3)).unwrap();
    std::fs::write(t.path("server.crt"), &next.cert_pem).unwrap();
    match watched.poll() {
        Reload::Failed(e) => assert!(e.message.contains("does not match"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(watched.poll(), Reload::Unchanged, "reported once");
    assert_eq!(handshake(watched.current(), c.clone()).unwrap().0, "02");
    // The key follows: now it loads.
    std::fs::write(t.path("server.key"), &next.key_pem).unwrap();
    assert_eq!(watched.poll(), Reload::Reloaded);
    assert_eq!(handshake(watched.current(), c.clone()).unwrap().0, "03");

    // A file that disappears is reported once, and the config in use stays.
    std::fs::remove_file(t.path("server.key")).unwrap();
    assert!(matches!(watched.poll(), Reload::Failed(_)));
    assert_eq!(watched.poll(), Reload::Unchanged);
    assert_eq!(handshake(watched.current(), c).unwrap().0, "03");
}

/// A self-signed `CA:TRUE` server certificate (`openssl req -x509`'s kind), given to the client
/// as its `ca`, is trusted as it is; webpki alone refuses it (`CaUsedAsEndEntity`). Another
/// client's CA still refuses it.
#[test]
fn a_self_signed_ca_certificate_given_as_ca_is_pinned() {
    let t = setup();
    let own = Ca::new("self-signed server").unwrap();
    own.write(&t.path("self.crt")).unwrap();
    std::fs::write(t.path("self.key"), own.key_pem()).unwrap();
    let s = server(&TlsConfig {
        cert: Some(t.path("self.crt")),
        key: Some(t.path("self.key")),
        ..TlsConfig::default()
    });
    let pinned = TlsConfig {
        ca: Some(t.path("self.crt")),
        ..TlsConfig::default()
    };
    handshake(s.clone(), client(&pinned)).unwrap();
    let e = handshake(s, client(&t.client(None))).unwrap_err();
    assert!(e.contains("invalid peer certificate"), "{e}");
}

/// `verify_hostname: false` accepts a certificate for another name when its chain verifies,
/// and only then.
#[test]
fn verify_hostname_false_skips_the_name_and_only_the_name() {
    let t = setup();
    t.issue(
        &t.ca,
        Leaf {
            names: vec!["elsewhere.example".to_owned()],
            ..Leaf::new("elsewhere")
        },
        "elsewhere",
    );
    let s = server(&TlsConfig {
        cert: Some(t.path("elsewhere.crt")),
        key: Some(t.path("elsewhere.key")),
        ..TlsConfig::default()
    });
    let e = handshake(s.clone(), client(&t.client(None))).unwrap_err();
    assert!(
        e.contains("NotValidForName") || e.contains("not valid for name"),
        "{e}"
    );
    let lax = TlsConfig {
        verify_hostname: false,
        ..t.client(None)
    };
    handshake(s, client(&lax)).unwrap();
    // A chain from another CA is still refused.
    let other = Ca::new("other CA").unwrap();
    t.issue(&other, Leaf::new("forged"), "forged");
    let forged = server(&TlsConfig {
        cert: Some(t.path("forged.crt")),
        key: Some(t.path("forged.key")),
        ..TlsConfig::default()
    });
    assert!(handshake(forged, client(&lax)).is_err());
}
