//! A throwaway PKI for tests and the benchmark lab: a CA that issues server and client
//! certificates (with chosen names, serial numbers and validity), written as PEM files the way
//! an operator's would be. Keys are ECDSA P-256.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};

/// Why a certificate could not be made (a bug in the caller's names, or the file system).
#[derive(Debug)]
pub struct PkiError(String);

impl std::fmt::Display for PkiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PkiError {}

impl From<rcgen::Error> for PkiError {
    fn from(e: rcgen::Error) -> PkiError {
        PkiError(format!("cannot make the certificate: {e}"))
    }
}

/// A certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A leaf certificate to issue.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The subject's common name.
    pub common_name: String,
    /// The subject's organization, if any: encoded before the common name, as
    /// `openssl req -subj "/O=…/CN=…"` does.
    pub organization: Option<String>,
    /// DNS names and IP addresses (as text) it is valid for.
    pub names: Vec<String>,
    /// The serial number; random (by rcgen) when `None`.
    pub serial: Option<u64>,
    /// Validity as Unix seconds: `(not_before, not_after)`; one day ago to ten years on when
    /// `None`.
    pub validity: Option<(i64, i64)>,
}

impl Leaf {
    /// A certificate for `common_name`, valid for `localhost` and 127.0.0.1.
    pub fn new(common_name: &str) -> Leaf {
        Leaf {
            common_name: common_name.to_owned(),
            organization: None,
            names: vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
            serial: None,
            validity: None,
        }
    }

    /// With this organization in the subject.
    pub fn organization(mut self, organization: &str) -> Leaf {
        self.organization = Some(organization.to_owned());
        self
    }

    /// With this serial number.
    pub fn serial(mut self, serial: u64) -> Leaf {
        self.serial = Some(serial);
        self
    }

    /// Valid from `not_before` to `not_after` (Unix seconds).
    pub fn valid(mut self, not_before: i64, not_after: i64) -> Leaf {
        self.validity = Some((not_before, not_after));
        self
    }
}

/// A certificate and its key, as PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Issued {
    /// Writes `<name>.crt` and `<name>.key` into `dir`; returns their paths.
    ///
    /// # Errors
    ///
    /// A file cannot be written.
    pub fn write(&self, dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), PkiError> {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        write_atomically(&cert, &self.cert_pem)?;
        write_atomically(&key, &self.key_pem)?;
        Ok((cert, key))
    }
}

/// Writes through a temporary file and a rename, as certificate rotation tools do, so a reader
/// never sees half a file.
fn write_atomically(path: &Path, text: &str) -> Result<(), PkiError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| PkiError(format!("cannot write {}: {e}", path.display())))
}

fn time(unix: i64) -> Result<time::OffsetDateTime, PkiError> {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .map_err(|e| PkiError(format!("not a time: {e}")))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Ca {
    /// A new CA named `common_name`, valid from a day ago for ten years.
    ///
    /// # Errors
    ///
    /// The key or certificate cannot be made.
    pub fn new(common_name: &str) -> Result<Ca, PkiError> {
        let mut params = CertificateParams::new(Vec::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "loghaul test PKI");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = time(now() - 86_400)?;
        params.not_after = time(now() + 10 * 365 * 86_400)?;
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, as PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The CA's private key, as PEM: with [`Ca::pem`], a self-signed `CA:TRUE` certificate a
    /// server can present, as `openssl req -x509` makes them.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// Writes the CA certificate to `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be written.
    pub fn write(&self, path: &Path) -> Result<(), PkiError> {
        write_atomically(path, &self.pem)
    }

    /// Issues a certificate usable by servers and clients alike.
    ///
    /// # Errors
    ///
    /// A name that is neither a DNS name nor an IP address, or a validity out of range.
    pub fn issue(&self, leaf: &Leaf) -> Result<Issued, PkiError> {
        let mut params = CertificateParams::new(Vec::new())?;
        for name in &leaf.names {
            params.subject_alt_names.push(match name.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(name.clone().try_into()?),
            });
        }
        // In the order pushed, without rcgen's default common name ahead of them.
        params.distinguished_name = DistinguishedName::new();
        if let Some(organization) = &leaf.organization {
            params
                .distinguished_name
                .push(DnType::OrganizationName, organization.as_str());
        }
        params
            .distinguished_name
            .push(DnType::CommonName, leaf.common_name.as_str());
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let (from, to) = leaf
            .validity
            .unwrap_or((now() - 86_400, now() + 10 * 365 * 86_400));
        params.not_before = time(from)?;
        params.not_after = time(to)?;
        if let Some(serial) = leaf.serial {
            params.serial_number = Some(SerialNumber::from_slice(&serial.to_be_bytes()));
        }
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}
