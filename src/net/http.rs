//! What the HTTP source, sink and API share: the `Authorization` header value they send or
//! expect, and how it is compared.

/// Compares without stopping at the first difference, so the time taken says nothing about how
/// much of a secret was right.
pub use loghaul_codec::forward::handshake::constant_time_eq;

/// Whether an `Authorization` header value `given` carries the credentials of `expected`
/// (`Bearer TOKEN` or `Basic BASE64`, as [`authorization`] makes it). The scheme is compared
/// without regard to case (RFC 9110 §11.1: `bearer t` is `Bearer t`) and may be followed by more
/// than one space; the credentials are compared in constant time.
pub fn authorization_matches(given: &[u8], expected: &str) -> bool {
    let Some((want_scheme, want)) = expected.split_once(' ') else {
        return constant_time_eq(given, expected.as_bytes());
    };
    let Some(space) = given.iter().position(|&b| b == b' ') else {
        return false;
    };
    let (scheme, rest) = given.split_at(space);
    let credentials = rest.trim_ascii_start();
    // Checked either way, so the time taken does not tell whether the scheme was right.
    let scheme_ok = scheme.eq_ignore_ascii_case(want_scheme.as_bytes());
    constant_time_eq(credentials, want.as_bytes()) & scheme_ok
}

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
    fn the_scheme_is_case_insensitive_and_the_credentials_are_not() {
        let expected = "Bearer s3cret";
        for given in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "Bearer   s3cret",
        ] {
            assert!(authorization_matches(given.as_bytes(), expected), "{given}");
        }
        for given in [
            "Bearer S3CRET",
            "Bearer s3cre",
            "Basic s3cret",
            "s3cret",
            "Bearers3cret",
            "",
        ] {
            assert!(
                !authorization_matches(given.as_bytes(), expected),
                "{given}"
            );
        }
        assert!(authorization_matches(
            b"basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==",
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        ));
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
