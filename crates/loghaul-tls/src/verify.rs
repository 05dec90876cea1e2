//! How a loghaul client judges a server's certificate: webpki's chain and name checks against
//! the configured roots, plus two things OpenSSL-based peers (Fluentd's
//! `tls_allow_self_signed_cert`, `tls_verify_hostname false`) let their users do:
//!
//! - **Pinned certificates.** A certificate in `ca` that the server presents itself is trusted
//!   as it is, whatever webpki thinks of it as a chain: a self-signed certificate made with
//!   `openssl req -x509` carries `CA:TRUE`, which webpki refuses for a server
//!   (`CaUsedAsEndEntity`), and often names its host in the common name only, which webpki does
//!   not read. That exact certificate and its key identify the server, as a pin does, so its
//!   names are not checked; it must still be within its validity period.
//! - **`verify_hostname: false`.** A chain that verifies but names another host is accepted.
//!
//! The handshake's signatures are always verified with the presented certificate's key, so a
//! server must hold the private key of what it presents.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

/// The verifier of [`crate::build_client`].
#[derive(Debug)]
pub(crate) struct ServerVerifier {
    pub(crate) inner: Arc<WebPkiServerVerifier>,
    /// The certificates of `ca`, trusted as they are when a server presents one of them.
    pub(crate) pinned: Vec<CertificateDer<'static>>,
    /// `verify_hostname`: whether a certificate verified through a chain must carry the
    /// server's name.
    pub(crate) check_name: bool,
}

fn name_error(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        )
    )
}

impl ServerVerifier {
    /// A pinned certificate the server presented: within its validity period.
    fn verify_pinned(
        end_entity: &CertificateDer<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let info = crate::describe(end_entity)
            .ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        if now > info.not_after {
            return Err(Error::InvalidCertificate(CertificateError::Expired));
        }
        if now < info.not_before {
            return Err(Error::InvalidCertificate(CertificateError::NotValidYet));
        }
        Ok(ServerCertVerified::assertion())
    }
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => Ok(verified),
            // webpki checks the name last: a name error means the chain itself verified.
            Err(e) if !self.check_name && name_error(&e) => Ok(ServerCertVerified::assertion()),
            Err(_)
                if self
                    .pinned
                    .iter()
                    .any(|p| p.as_ref() == end_entity.as_ref()) =>
            {
                Self::verify_pinned(end_entity, now)
            }
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
