//! The throwaway PKI of a TLS subject: a CA made for one run and the server certificate it
//! issued, in the run's own folder. Nothing carries over between runs, and no file outside the
//! run's folder is touched.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::connect::TlsClientOptions;

/// A throwaway PKI of a TLS subject: the CA's certificate, and the server certificate (for
/// `localhost` and 127.0.0.1) and key the CA issued, as PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerPki {
    /// The CA certificate: what the generator trusts.
    pub ca: PathBuf,
    /// The server's certificate.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

impl ServerPki {
    /// How the generator connects to a server holding this PKI's certificate: trusting its CA,
    /// checking the name the generator connects to (127.0.0.1), with no client certificate.
    pub fn client(&self) -> TlsClientOptions {
        TlsClientOptions {
            ca: Some(self.ca.clone()),
            ..TlsClientOptions::default()
        }
    }
}

/// Makes a new CA in `dir/pki/` and has it issue a server certificate for `localhost` and
/// 127.0.0.1 (ECDSA P-256 keys, as `loghaul_tls::pki` makes them).
///
/// # Errors
/// The folder or a file cannot be written.
pub fn make_pki(dir: &Path) -> Result<ServerPki> {
    use loghaul_tls::pki::{Ca, Leaf};
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).with_context(|| format!("creating {}", pki.display()))?;
    let ca = Ca::new("loghaul bench CA").context("making the lab's CA")?;
    let ca_path = pki.join("ca.crt");
    ca.write(&ca_path).context("writing the lab's CA")?;
    let (cert, key) = ca
        .issue(&Leaf::new("localhost"))
        .and_then(|issued| issued.write(&pki, "server"))
        .context("issuing the server certificate")?;
    Ok(ServerPki {
        ca: ca_path,
        cert,
        key,
    })
}
