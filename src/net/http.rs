//! What the HTTP source, sink and API share: the `Authorization` header value they send or
//! expect, and how it is compared.

/// Compares without stopping at the first difference, so the time taken says nothing about how
/// much of a secret was right.
pub use loghaul_codec::forward::handshake::constant_time_eq;

/// The `Authorization` value for a bearer token or a user and password: `Some(None)` when none
/// of them is given, `None` when what is given is not one of the two (mixed, or empty).
pub fn authorization(
    bearer: Option<String>,
    username: Option<String>,
    password: Option<String>,
) -> Option<Option<String>> {
    match (bearer, username, password) {
        (None, None, None) => Some(None),
        (Some(t), None, None) if !t.is_empty() => Some(Some(format!("Bearer {t}"))),
        (None, Some(u), Some(p)) if !u.is_empty() => Some(Some(format!(
            "Basic {}",
            base64(format!("{u}:{p}").as_bytes())
        ))),
        _ => None,
    }
}

/// Standard base64 with padding (RFC 4648), for basic auth headers.
pub fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn a_token_or_a_user_never_both() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(authorization(None, None, None), Some(None));
        assert_eq!(authorization(s("t"), None, None), Some(s("Bearer t")));
        assert_eq!(
            authorization(None, s("Aladdin"), s("open sesame")),
            Some(s("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="))
        );
        assert_eq!(authorization(s("t"), s("u"), s("p")), None);
        assert_eq!(authorization(s(""), None, None), None);
        assert_eq!(authorization(None, s("u"), None), None);
    }
}
