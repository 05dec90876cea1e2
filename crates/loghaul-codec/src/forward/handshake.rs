//! The forward protocol's optional handshake (`shared_key`, and users), both sides.
//!
//! ```text
//! server → ["HELO", {"nonce": bin(16), "auth": bin(16) | "", "keepalive": true}]
//! client → ["PING", client_hostname, shared_key_salt, hex(sha512(salt ‖ client_hostname ‖ nonce ‖ key)),
//!           username, hex(sha512(auth ‖ username ‖ password))]       (username, password "" without users)
//! server → ["PONG", true, "", server_hostname, hex(sha512(salt ‖ server_hostname ‖ nonce ‖ key))]
//!        | ["PONG", false, reason, "", ""]   and the server closes the connection
//! ```
//!
//! Digests are lowercase hex SHA-512 over the plain concatenation. `nonce`, `auth` and the salt
//! may arrive as `str` or `bin`: the raw bytes are hashed either way.

use sha2::{Digest, Sha512};

use super::msgpack::{
    Head, Reader, write_array_len, write_bin, write_bool, write_map_len, write_str,
};

/// Why a handshake message was refused; the text is what a PONG sends back.
pub type Refusal = &'static str;

/// What fluentd answers for a PING of the wrong shape.
pub const INVALID_PING: Refusal = "invalid ping message";
/// What fluentd answers for a wrong shared key.
pub const SHARED_KEY_MISMATCH: Refusal = "shared_key mismatch";
/// What fluentd answers for an unknown user or a wrong password.
pub const USER_MISMATCH: Refusal = "username/password mismatch";

/// Lowercase hex of the SHA-512 of `parts` concatenated.
pub fn digest(parts: &[&[u8]]) -> String {
    let mut h = Sha512::new();
    for p in parts {
        h.update(p);
    }
    let out = h.finalize();
    let mut hex = String::with_capacity(out.len() * 2);
    for b in out {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 15)]));
    }
    hex
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Appends a HELO. `auth` is empty when the server has no users.
pub fn write_helo(out: &mut Vec<u8>, nonce: &[u8], auth: &[u8], keepalive: bool) {
    write_array_len(out, 2);
    write_str(out, b"HELO");
    write_map_len(out, 3);
    write_str(out, b"nonce");
    write_bin(out, nonce);
    write_str(out, b"auth");
    if auth.is_empty() {
        write_str(out, b"");
    } else {
        write_bin(out, auth);
    }
    write_str(out, b"keepalive");
    write_bool(out, keepalive);
}

/// A HELO, as a client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helo {
    pub nonce: Vec<u8>,
    /// The salt for password digests; empty when the server has no users.
    pub auth: Vec<u8>,
    pub keepalive: bool,
}

/// Reads a HELO.
///
/// # Errors
///
/// The message is not a HELO.
pub fn read_helo(bytes: &[u8]) -> Result<Helo, Refusal> {
    const BAD: Refusal = "invalid HELO message";
    let mut r = Reader::new(bytes, 0);
    if r.head() != Ok(Head::Array(2)) || blob(&mut r) != Some(&b"HELO"[..]) {
        return Err(BAD);
    }
    let Ok(Head::Map(n)) = r.head() else {
        return Err(BAD);
    };
    let mut helo = Helo {
        nonce: Vec::new(),
        auth: Vec::new(),
        keepalive: true,
    };
    for _ in 0..n {
        match blob(&mut r).ok_or(BAD)? {
            b"nonce" => helo.nonce = blob(&mut r).ok_or(BAD)?.to_vec(),
            b"auth" => helo.auth = blob(&mut r).ok_or(BAD)?.to_vec(),
            b"keepalive" => helo.keepalive = r.head() != Ok(Head::Bool(false)),
            _ => r.skip().map_err(|_| BAD)?,
        }
    }
    if helo.nonce.is_empty() {
        return Err(BAD);
    }
    Ok(helo)
}

/// A PING, as a server reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    pub hostname: Vec<u8>,
    pub salt: Vec<u8>,
    pub digest: Vec<u8>,
    pub username: Vec<u8>,
    pub password: Vec<u8>,
}

/// Reads a PING: exactly six elements, the first `"PING"`, the rest strings.
///
/// # Errors
///
/// [`INVALID_PING`] for anything else.
pub fn read_ping(bytes: &[u8]) -> Result<Ping, Refusal> {
    let mut r = Reader::new(bytes, 0);
    if r.head() != Ok(Head::Array(6)) || blob(&mut r) != Some(&b"PING"[..]) {
        return Err(INVALID_PING);
    }
    let mut next = || blob(&mut r).map(<[u8]>::to_vec).ok_or(INVALID_PING);
    Ok(Ping {
        hostname: next()?,
        salt: next()?,
        digest: next()?,
        username: next()?,
        password: next()?,
    })
}

/// Appends a PING answering `helo`. With users (`helo.auth` not empty) the password digest is
/// salted with `helo.auth`; without, username and password are sent empty.
pub fn write_ping(
    out: &mut Vec<u8>,
    helo: &Helo,
    hostname: &[u8],
    salt: &[u8],
    shared_key: &[u8],
    user: Option<(&[u8], &[u8])>,
) {
    write_array_len(out, 6);
    write_str(out, b"PING");
    write_str(out, hostname);
    write_str(out, salt);
    write_str(
        out,
        digest(&[salt, hostname, &helo.nonce, shared_key]).as_bytes(),
    );
    match user {
        Some((name, password)) if !helo.auth.is_empty() => {
            write_str(out, name);
            write_str(out, digest(&[&helo.auth, name, password]).as_bytes());
        }
        _ => {
            write_str(out, b"");
            write_str(out, b"");
        }
    }
}

/// Appends a PONG: accepted with the server's digest, or refused with the reason.
pub fn write_pong(out: &mut Vec<u8>, result: Result<(&[u8], &str), Refusal>) {
    write_array_len(out, 5);
    write_str(out, b"PONG");
    match result {
        Ok((hostname, digest)) => {
            write_bool(out, true);
            write_str(out, b"");
            write_str(out, hostname);
            write_str(out, digest.as_bytes());
        }
        Err(reason) => {
            write_bool(out, false);
            write_str(out, reason.as_bytes());
            write_str(out, b"");
            write_str(out, b"");
        }
    }
}

/// A PONG, as a client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pong {
    pub accepted: bool,
    pub reason: String,
    pub hostname: Vec<u8>,
    pub digest: Vec<u8>,
}

/// Reads a PONG: five elements, the first `"PONG"`.
///
/// # Errors
///
/// The message is not a PONG.
pub fn read_pong(bytes: &[u8]) -> Result<Pong, Refusal> {
    const BAD: Refusal = "invalid PONG message";
    let mut r = Reader::new(bytes, 0);
    if r.head() != Ok(Head::Array(5)) || blob(&mut r) != Some(&b"PONG"[..]) {
        return Err(BAD);
    }
    let accepted = match r.head() {
        Ok(Head::Bool(b)) => b,
        _ => return Err(BAD),
    };
    let reason = String::from_utf8_lossy(blob(&mut r).ok_or(BAD)?).into_owned();
    let hostname = blob(&mut r).ok_or(BAD)?.to_vec();
    let digest = blob(&mut r).ok_or(BAD)?.to_vec();
    Ok(Pong {
        accepted,
        reason,
        hostname,
        digest,
    })
}

/// A `str` or `bin` value's bytes; `None` for anything else.
fn blob<'a>(r: &mut Reader<'a>) -> Option<&'a [u8]> {
    let span = r.blob().ok()??;
    Some(r.slice(span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_lowercase_hex_sha512_of_the_concatenation() {
        // sha512("abc"), FIPS 180-2 appendix C.1.
        assert_eq!(
            digest(&[b"a", b"", b"bc"]),
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
             2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
        );
    }

    #[test]
    fn a_full_handshake_verifies_on_both_sides() {
        let mut helo_bytes = Vec::new();
        write_helo(&mut helo_bytes, &[7; 16], &[9; 16], true);
        let helo = read_helo(&helo_bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (helo.nonce.len(), helo.auth.len(), helo.keepalive),
            (16, 16, true)
        );

        let mut ping_bytes = Vec::new();
        let user = Some((&b"alice"[..], &b"secret"[..]));
        write_ping(&mut ping_bytes, &helo, b"client", b"saltsalt", b"key", user);
        let ping = read_ping(&ping_bytes).unwrap_or_else(|e| panic!("{e}"));
        let want = digest(&[&ping.salt, &ping.hostname, &[7; 16], b"key"]);
        assert!(constant_time_eq(want.as_bytes(), &ping.digest));
        let pw = digest(&[&[9; 16], b"alice", b"secret"]);
        assert!(constant_time_eq(pw.as_bytes(), &ping.password));

        let server_digest = digest(&[&ping.salt, b"server", &[7; 16], b"key"]);
        let mut pong_bytes = Vec::new();
        write_pong(&mut pong_bytes, Ok((b"server", &server_digest)));
        let pong = read_pong(&pong_bytes).unwrap_or_else(|e| panic!("{e}"));
        assert!(pong.accepted);
        assert_eq!(pong.digest, server_digest.as_bytes());

        let mut refused = Vec::new();
        write_pong(&mut refused, Err(SHARED_KEY_MISMATCH));
        let pong = read_pong(&refused).unwrap_or_else(|e| panic!("{e}"));
        assert!(!pong.accepted);
        assert_eq!(pong.reason, "shared_key mismatch");
    }

    #[test]
    fn pings_of_the_wrong_shape_are_invalid() {
        let mut five = Vec::new();
        write_array_len(&mut five, 5);
        for s in ["PING", "h", "s", "d", "u"] {
            write_str(&mut five, s.as_bytes());
        }
        assert_eq!(read_ping(&five), Err(INVALID_PING));
        let mut not_ping = Vec::new();
        write_array_len(&mut not_ping, 6);
        for s in ["PONG", "h", "s", "d", "u", "p"] {
            write_str(&mut not_ping, s.as_bytes());
        }
        assert_eq!(read_ping(&not_ping), Err(INVALID_PING));
        assert_eq!(read_ping(&[0xc0]), Err(INVALID_PING));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
