//! loghaul's TLS material: PEM files read and checked (readable, parseable, the key matching its
//! certificate, every certificate within its validity period), turned into rustls server and
//! client configs, and watched so that new handshakes use new files while established
//! connections go on with the old ones.
//!
//! ```text
//!  TlsConfig (paths, verify_client, min_version, ciphers)
//!      │ Files::read (cert, key, ca: the bytes, once)
//!      ▼
//!  build_server / build_client ──► Arc<rustls::ServerConfig | ClientConfig>
//!      ▲                                   │ Watched::current(): every new handshake
//!      │ Watched::poll(): the files' bytes changed?  rebuild; a broken new file keeps the old
//!      └──────────────────────────────── config and is reported once per change
//! ```
//!
//! Everything is built from the bytes read once, so a file replaced between two reads can never
//! mix an old key with a new certificate. The crypto provider is ring's, chosen explicitly, so
//! no process-wide default has to be installed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

pub use rustls;

/// The default `handshake_timeout`: a client that has not finished its handshake by then is
/// disconnected (and counted), so a stalled or hostile handshake costs one connection, briefly.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS for one listener or client, as validated from the configuration (files not read yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first: required for a server, optional for a client
    /// (its certificate for mutual TLS).
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert` (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// PEM CA certificates: a server verifies client certificates with them; a client verifies
    /// the server with them (the system's trust store when absent).
    pub ca: Option<PathBuf>,
    /// Server: refuse clients without a certificate signed by `ca`.
    pub verify_client: bool,
    /// The lowest protocol version accepted.
    pub min_version: TlsVersion,
    /// IANA names of the cipher suites allowed (default: rustls's safe defaults).
    pub ciphers: Option<Vec<String>>,
    /// Client: the name to verify the server's certificate against (default: the host of the
    /// address it connects to).
    pub server_name: Option<String>,
    /// Server: how long a client may take to finish its handshake.
    pub handshake_timeout: Duration,
    /// Client: whether the server's certificate must carry its name (`server_name`, or the
    /// host connected to). The chain (or the pin) is verified either way.
    pub verify_hostname: bool,
}

impl Default for TlsConfig {
    fn default() -> TlsConfig {
        TlsConfig {
            cert: None,
            key: None,
            ca: None,
            verify_client: false,
            min_version: TlsVersion::V1_2,
            ciphers: None,
            server_name: None,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            verify_hostname: true,
        }
    }
}

/// A TLS protocol version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TlsVersion {
    #[default]
    V1_2,
    V1_3,
}

impl TlsVersion {
    /// `1.2` or `1.3`, as the configuration spells it.
    pub fn parse(text: &str) -> Option<TlsVersion> {
        match text.trim() {
            "1.2" | "TLSv1.2" | "tls1.2" => Some(TlsVersion::V1_2),
            "1.3" | "TLSv1.3" | "tls1.3" => Some(TlsVersion::V1_3),
            _ => None,
        }
    }

    fn versions(self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            TlsVersion::V1_2 => rustls::ALL_VERSIONS,
            TlsVersion::V1_3 => &TLS13_ONLY,
        }
    }
}

/// Which end of a connection a config is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

/// What is wrong with the TLS material: which file, and why. Fixing the file (or the
/// configuration) is what helps; reading it again unchanged will not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsError {
    pub path: Option<PathBuf>,
    pub message: String,
}

impl TlsError {
    fn at(path: &Path, message: impl Into<String>) -> TlsError {
        TlsError {
            path: Some(path.to_path_buf()),
            message: message.into(),
        }
    }

    fn general(message: impl Into<String>) -> TlsError {
        TlsError {
            path: None,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{}: {}", path.display(), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for TlsError {}

/// The bytes of the files a config names, read once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Files {
    cert: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
    ca: Option<Vec<u8>>,
}

impl Files {
    /// Reads every file `config` names.
    ///
    /// # Errors
    ///
    /// A file cannot be read (missing, no permission), with its path.
    pub fn read(config: &TlsConfig) -> Result<Files, TlsError> {
        let read = |path: &Option<PathBuf>| -> Result<Option<Vec<u8>>, TlsError> {
            path.as_deref().map(read_pem_file).transpose()
        };
        Ok(Files {
            cert: read(&config.cert)?,
            key: read(&config.key)?,
            ca: read(&config.ca)?,
        })
    }
}

/// The largest PEM file read: a CA bundle of a few hundred certificates fits many times over.
pub const MAX_PEM_FILE: u64 = 4 * 1024 * 1024;

/// Reads one regular file of at most [`MAX_PEM_FILE`] bytes. A device or a FIFO named by
/// mistake (`/dev/zero`, `/dev/stdin`) would otherwise be read forever or block.
fn read_pem_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read as _;
    let file =
        std::fs::File::open(path).map_err(|e| TlsError::at(path, format!("cannot read: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| TlsError::at(path, format!("cannot read: {e}")))?;
    if !meta.is_file() {
        return Err(TlsError::at(path, "is not a regular file".to_string()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PEM_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| TlsError::at(path, format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_PEM_FILE {
        return Err(TlsError::at(
            path,
            format!(
                "is larger than {} MiB; is it a PEM file?",
                MAX_PEM_FILE >> 20
            ),
        ));
    }
    Ok(bytes)
}

/// The certificate chain with its signing key, checked to belong together (a key that does not
/// match its certificate is named, with the certificate's path).
fn certified_key(
    provider: &CryptoProvider,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    cert_path: &Path,
    key_path: &Path,
) -> Result<rustls::sign::CertifiedKey, TlsError> {
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::at(key_path, format!("not a usable private key: {e}")))?;
    let certified = rustls::sign::CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|_| {
        TlsError::at(
            key_path,
            format!(
                "the key does not match the certificate in {}",
                cert_path.display()
            ),
        )
    })?;
    Ok(certified)
}

/// Checks that `config`'s files make a working config for `role` (what `loghaul validate`
/// runs); `Ok` holds what works here but will fail with some peers (warnings).
///
/// # Errors
///
/// What is wrong, with the file's path.
pub fn check(config: &TlsConfig, role: Role) -> Result<Vec<String>, TlsError> {
    let files = Files::read(config)?;
    match role {
        Role::Server => {
            build_server(config, &files, &[])?;
            let (Some(path), Some(pem)) = (&config.cert, &files.cert) else {
                return Ok(Vec::new());
            };
            let chain = parse_certs(path, pem)?;
            Ok(chain.first().map(server_concerns).unwrap_or_default())
        }
        Role::Client => build_client(config, &files).map(|_| Vec::new()),
    }
}

/// What makes a server certificate fail with clients that verify as webpki (rustls, so
/// loghaul's own clients and Vector's) and Go do, though OpenSSL-based clients take it.
fn server_concerns(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Vec::new();
    };
    let mut concerns = Vec::new();
    if let Ok(Some(bc)) = parsed.basic_constraints()
        && bc.value.ca
    {
        concerns.push(
            "the server certificate is a CA certificate (CA:TRUE, as `openssl req -x509` makes): rustls-based clients refuse it as a server's unless they are given this very certificate to trust (loghaul's clients: as their `ca`)".to_owned(),
        );
    }
    let names = parsed
        .subject_alternative_name()
        .ok()
        .flatten()
        .is_some_and(|san| !san.value.general_names.is_empty());
    if !names {
        concerns.push(
            "the server certificate has no subject alternative names (its host only in the common name): clients that check names (rustls, Go) find none, unless they trust this very certificate or skip the name check".to_owned(),
        );
    }
    concerns
}

/// A rustls server config from `config` and the files' bytes; `alpn` lists the application
/// protocols offered, most preferred first.
///
/// # Errors
///
/// A missing certificate or key, a file that does not parse, a key that does not match its
/// certificate, a certificate outside its validity period, an unknown cipher suite.
pub fn build_server(
    config: &TlsConfig,
    files: &Files,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let (Some(cert_path), Some(cert)) = (&config.cert, &files.cert) else {
        return Err(TlsError::general(
            "a TLS listener needs `cert` (its certificate chain) and `key`",
        ));
    };
    let (Some(key_path), Some(key)) = (&config.key, &files.key) else {
        return Err(TlsError::general(
            "a TLS listener needs `key` (the private key of `cert`)",
        ));
    };
    let chain = parse_certs(cert_path, cert)?;
    let key = parse_key(key_path, key)?;
    let provider = provider(config)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(config.min_version.versions())
        .map_err(|e| TlsError::general(format!("no usable protocol version: {e}")))?;
    let builder = match (&config.ca, &files.ca) {
        (Some(ca_path), Some(ca)) => {
            let roots = Arc::new(roots_of(ca_path, &parse_certs(ca_path, ca)?)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
            let verifier = if config.verify_client {
                verifier.build()
            } else {
                // A CA without verify_client: a client may present a certificate (and its
                // subject is then known), or none.
                verifier.allow_unauthenticated().build()
            }
            .map_err(|e| TlsError::at(ca_path, format!("cannot verify clients with it: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ if config.verify_client => {
            return Err(TlsError::general(
                "`verify_client` needs `ca`: the CA whose signature client certificates must carry",
            ));
        }
        _ => builder.with_no_client_auth(),
    };
    let certified = certified_key(&provider, chain, key, cert_path, key_path)?;
    let mut server = builder.with_cert_resolver(Arc::new(SingleCert(Arc::new(certified))));
    server.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(server))
}

/// Always the one certificate chain and key.
#[derive(Debug)]
struct SingleCert(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for SingleCert {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A rustls client config from `config` and the files' bytes.
///
/// # Errors
///
/// A file that does not parse, a certificate without its key (or the reverse), a key that does
/// not match, a certificate outside its validity period, no CA at all (none given and none in
/// the system's store), an unknown cipher suite.
pub fn build_client(
    config: &TlsConfig,
    files: &Files,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let provider = provider(config)?;
    let mut pinned = Vec::new();
    let roots = match (&config.ca, &files.ca) {
        (Some(ca_path), Some(ca)) => {
            // Each certificate of `ca` is also trusted as it is when a server presents it
            // (a self-signed server certificate, CA:TRUE or not): see verify.rs.
            pinned = parse_certs(ca_path, ca)?;
            roots_of(ca_path, &pinned)?
        }
        _ => {
            let native = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                return Err(TlsError::general(
                    "no `ca` given and no CA certificates found in the system's trust store",
                ));
            }
            roots
        }
    };
    let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|e| TlsError::general(format!("cannot verify servers: {e}")))?;
    let verifier = verify::ServerVerifier {
        inner,
        pinned,
        check_name: config.verify_hostname,
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(config.min_version.versions())
        .map_err(|e| TlsError::general(format!("no usable protocol version: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let client = match (&config.cert, &files.cert, &config.key, &files.key) {
        (Some(cert_path), Some(cert), Some(key_path), Some(key)) => {
            let chain = parse_certs(cert_path, cert)?;
            let key = parse_key(key_path, key)?;
            certified_key(
                &provider,
                chain.clone(),
                key.clone_key(),
                cert_path,
                key_path,
            )?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError::at(cert_path, format!("cannot use it: {e}")))?
        }
        (None, _, None, _) => builder.with_no_client_auth(),
        _ => {
            return Err(TlsError::general(
                "a client certificate needs both `cert` and `key`",
            ));
        }
    };
    Ok(Arc::new(client))
}

/// ring's provider, with the cipher suites narrowed to `config.ciphers` when given.
fn provider(config: &TlsConfig) -> Result<Arc<CryptoProvider>, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(names) = &config.ciphers {
        let all = rustls::crypto::ring::ALL_CIPHER_SUITES;
        let mut chosen = Vec::new();
        for name in names {
            match all
                .iter()
                .find(|s| s.suite().as_str() == Some(name.as_str()))
            {
                Some(suite) => chosen.push(*suite),
                None => {
                    let known: Vec<&str> = all.iter().filter_map(|s| s.suite().as_str()).collect();
                    return Err(TlsError::general(format!(
                        "unknown cipher suite `{name}`; known: {}",
                        known.join(", ")
                    )));
                }
            }
        }
        provider.cipher_suites = chosen;
    }
    Ok(Arc::new(provider))
}

fn parse_certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::at(path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::at(path, "holds no PEM certificate"));
    }
    for cert in &certs {
        check_validity(path, cert)?;
    }
    Ok(certs)
}

fn parse_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| TlsError::at(path, format!("holds no usable PEM private key: {e}")))
}

/// The CA certificates `certs` (of the file at `path`) as trust anchors.
fn roots_of(path: &Path, certs: &[CertificateDer<'static>]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert.clone())
            .map_err(|e| TlsError::at(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// A certificate outside its validity period is refused now, not at the first handshake.
fn check_validity(path: &Path, cert: &CertificateDer<'_>) -> Result<(), TlsError> {
    let info = describe(cert)
        .ok_or_else(|| TlsError::at(path, "holds a certificate that does not parse (X.509)"))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if now > info.not_after {
        return Err(TlsError::at(
            path,
            format!(
                "the certificate for `{}` expired (not after {} UTC)",
                info.subject, info.not_after_text
            ),
        ));
    }
    if now < info.not_before {
        return Err(TlsError::at(
            path,
            format!(
                "the certificate for `{}` is not valid yet (not before {} UTC)",
                info.subject, info.not_before_text
            ),
        ));
    }
    Ok(())
}

/// What loghaul reports of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// The subject's distinguished name, as RFC 4514 writes it (`CN=agent-7,O=Example`; see
    /// [`dn`]).
    pub subject: String,
    /// The serial number in hexadecimal, as `openssl x509 -serial` prints it.
    pub serial: String,
    pub not_before: i64,
    pub not_after: i64,
    not_before_text: String,
    not_after_text: String,
}

/// The subject, serial and validity of a DER certificate; `None` if it does not parse.
pub fn describe(cert: &CertificateDer<'_>) -> Option<CertInfo> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let validity = parsed.validity();
    Some(CertInfo {
        subject: dn::rfc4514(parsed.subject()),
        serial: parsed
            .raw_serial_as_string()
            .replace(':', "")
            .to_uppercase(),
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
        not_before_text: validity.not_before.to_string(),
        not_after_text: validity.not_after.to_string(),
    })
}

/// What [`Watched::poll`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    /// The files are as they were.
    Unchanged,
    /// They changed and the new config is in use for new handshakes.
    Reloaded,
    /// They changed and do not make a config: the previous one stays in use.
    Failed(TlsError),
}

/// How a [`Watched`] config is built from its files.
type Build<T> = Box<dyn Fn(&TlsConfig, &Files) -> Result<Arc<T>, TlsError> + Send + Sync>;

/// A config rebuilt when its files change: [`Watched::current`] is what the next handshake
/// uses.
pub struct Watched<T> {
    config: TlsConfig,
    build: Build<T>,
    current: RwLock<Arc<T>>,
    /// The bytes last seen (used, or refused): a change is reported once, not at every poll.
    seen: Mutex<Files>,
    /// The last file that could not be read, reported once until it can be.
    unreadable: Mutex<Option<TlsError>>,
}

impl<T> std::fmt::Debug for Watched<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("config", &self.config)
            .finish()
    }
}

impl Watched<rustls::ServerConfig> {
    /// A listener's config, offering `alpn`.
    ///
    /// # Errors
    ///
    /// As [`build_server`], or a file that cannot be read.
    pub fn server(
        config: &TlsConfig,
        alpn: &'static [&'static [u8]],
    ) -> Result<Watched<rustls::ServerConfig>, TlsError> {
        Watched::new(
            config,
            Box::new(move |config, files| build_server(config, files, alpn)),
        )
    }
}

impl Watched<rustls::ClientConfig> {
    /// A client's config.
    ///
    /// # Errors
    ///
    /// As [`build_client`], or a file that cannot be read.
    pub fn client(config: &TlsConfig) -> Result<Watched<rustls::ClientConfig>, TlsError> {
        Watched::new(config, Box::new(build_client))
    }
}

impl<T> Watched<T> {
    fn new(config: &TlsConfig, build: Build<T>) -> Result<Watched<T>, TlsError> {
        let files = Files::read(config)?;
        let current = build(config, &files)?;
        Ok(Watched {
            config: config.clone(),
            build,
            current: RwLock::new(current),
            seen: Mutex::new(files),
            unreadable: Mutex::new(None),
        })
    }

    /// The config new handshakes use.
    pub fn current(&self) -> Arc<T> {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The configuration this was built from.
    pub fn config(&self) -> &TlsConfig {
        &self.config
    }

    /// Reads the files again and, if they changed, rebuilds. A file that cannot be read is a
    /// failed change, reported once; the files are read again at the next poll (a rotation that
    /// removes a file before writing the new one is picked up once it is complete).
    pub fn poll(&self) -> Reload {
        let files = match Files::read(&self.config) {
            Ok(files) => {
                if let Ok(mut unreadable) = self.unreadable.lock() {
                    *unreadable = None;
                }
                files
            }
            Err(error) => {
                return match self.unreadable.lock() {
                    Ok(mut unreadable) if unreadable.as_ref() != Some(&error) => {
                        *unreadable = Some(error.clone());
                        Reload::Failed(error)
                    }
                    _ => Reload::Unchanged,
                };
            }
        };
        let Ok(mut seen) = self.seen.lock() else {
            return Reload::Unchanged;
        };
        if *seen == files {
            return Reload::Unchanged;
        }
        let built = (self.build)(&self.config, &files);
        *seen = files;
        match built {
            Ok(config) => {
                match self.current.write() {
                    Ok(mut current) => *current = config,
                    Err(poisoned) => *poisoned.into_inner() = config,
                }
                Reload::Reloaded
            }
            Err(error) => Reload::Failed(error),
        }
    }
}

/// The subject of the first certificate a peer presented, if any.
pub fn peer_subject(certs: Option<&[CertificateDer<'_>]>) -> Option<String> {
    certs?.first().and_then(describe).map(|info| info.subject)
}

pub mod dn;
pub mod pki;
mod verify;

#[cfg(test)]
mod tests;
