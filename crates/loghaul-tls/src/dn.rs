//! Distinguished names as text, the way RFC 4514 writes them (as OpenSSL's `-nameopt RFC2253`
//! and nginx's `$ssl_client_s_dn` do): what a client certificate's subject becomes in an
//! event's `tls_subject`, where it is compared, routed on and audited, so it must be one
//! exact string for one name.
//!
//! ```text
//! Name (DER, in certificate order):  C=US  /  O=Example, Inc.  /  CN=agent-7 + UID=7
//! RFC 4514 (last RDN first):         CN=agent-7+UID=7,O=Example\, Inc.,C=US
//! ```
//!
//! - RDNs from the last to the first, joined by `,` (no spaces); the attributes of a
//!   multi-valued RDN joined by `+`.
//! - Attribute types by the short names RFC 4514 lists (and `emailAddress`), any other type by
//!   its dotted OID.
//! - A string value with `"` `+` `,` `;` `<` `>` `\` escaped by a backslash, as are a leading
//!   space or `#` and a trailing space; NUL and other control characters as `\XX` (hex).
//! - A value of an unnamed type, or one that is no string, as `#` and the hex of its DER.

use std::fmt::Write as _;

use x509_parser::asn1_rs::{Any, Tag, ToDer};
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

/// Attribute types written by name: RFC 4514's table, and `emailAddress`, which OpenSSL and
/// most tools print by name.
const SHORT_NAMES: [(&str, &str); 10] = [
    ("2.5.4.3", "CN"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.6", "C"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
    ("1.2.840.113549.1.9.1", "emailAddress"),
];

/// `name` as RFC 4514 writes it (see the module docs).
pub fn rfc4514(name: &X509Name<'_>) -> String {
    let rdns: Vec<_> = name.iter_rdn().collect();
    let mut out = String::new();
    for (i, rdn) in rdns.into_iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attribute) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            write_attribute(attribute, &mut out);
        }
    }
    out
}

fn write_attribute(attribute: &AttributeTypeAndValue<'_>, out: &mut String) {
    let oid = attribute.attr_type().to_id_string();
    let short = SHORT_NAMES
        .iter()
        .find(|(dotted, _)| *dotted == oid)
        .map(|(_, short)| *short);
    out.push_str(short.unwrap_or(&oid));
    out.push('=');
    match short.and_then(|_| text(attribute.attr_value())) {
        Some(value) => escape(&value, out),
        None => {
            // The value's whole DER (tag and length too), as RFC 4514 §2.4 asks.
            let value = attribute.attr_value();
            let der = value.to_der_vec().unwrap_or_else(|_| value.data.to_vec());
            out.push('#');
            for b in der {
                let _ = write!(out, "{b:02x}");
            }
        }
    }
}

/// The value as text, if it is one of the string types and decodes.
fn text(value: &Any<'_>) -> Option<String> {
    let data = value.data;
    match value.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::Ia5String
        | Tag::NumericString
        | Tag::VisibleString => std::str::from_utf8(data).ok().map(str::to_owned),
        // Teletex strings in certificates carry Latin-1 in practice.
        Tag::T61String => Some(data.iter().map(|&b| char::from(b)).collect()),
        Tag::BmpString => {
            if !data.len().is_multiple_of(2) {
                return None;
            }
            let units = data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]));
            char::decode_utf16(units)
                .collect::<Result<String, _>>()
                .ok()
        }
        Tag::UniversalString => {
            if !data.len().is_multiple_of(4) {
                return None;
            }
            data.chunks_exact(4)
                .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
                .collect()
        }
        _ => None,
    }
}

/// Appends `value` with RFC 4514's escapes (see the module docs).
fn escape(value: &str, out: &mut String) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' ' | '#' if i == 0 => {
                out.push('\\');
                out.push(c);
            }
            ' ' if i == last => out.push_str("\\ "),
            c if c.is_ascii_control() => {
                let _ = write!(out, "\\{:02x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use x509_parser::prelude::FromDer;

    use super::*;

    /// A DER TLV with a short-form length.
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        assert!(content.len() < 128);
        let mut v = vec![tag, content.len() as u8];
        v.extend_from_slice(content);
        v
    }

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    const C: &[u8] = &[0x55, 0x04, 0x06];
    const UID: &[u8] = &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01];
    const UTF8: u8 = 0x0c;
    const PRINTABLE: u8 = 0x13;

    /// One attribute: its type OID and its value's tag and bytes.
    fn atv(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        tlv(0x30, &[tlv(0x06, oid), tlv(tag, value)].concat())
    }

    /// A name of RDNs (each a list of attributes), in certificate order.
    fn name(rdns: &[&[Vec<u8>]]) -> String {
        let rdns: Vec<u8> = rdns
            .iter()
            .flat_map(|rdn| tlv(0x31, &rdn.concat()))
            .collect();
        let der = tlv(0x30, &rdns);
        let (rest, name) = X509Name::from_der(&der).expect("a DER name");
        assert!(rest.is_empty());
        rfc4514(&name)
    }

    #[test]
    fn rdns_come_last_first_joined_by_commas_without_spaces() {
        assert_eq!(
            name(&[
                &[atv(C, PRINTABLE, b"US")],
                &[atv(O, UTF8, b"Example")],
                &[atv(CN, UTF8, b"client")],
            ]),
            "CN=client,O=Example,C=US"
        );
        assert_eq!(name(&[&[atv(CN, UTF8, b"agent-7")]]), "CN=agent-7");
        assert_eq!(name(&[]), "");
    }

    #[test]
    fn a_multi_valued_rdn_joins_its_attributes_with_plus() {
        assert_eq!(
            name(&[
                &[atv(O, UTF8, b"Example")],
                &[atv(CN, UTF8, b"agent-7"), atv(UID, UTF8, b"7")],
            ]),
            "CN=agent-7+UID=7,O=Example"
        );
    }

    #[test]
    fn special_characters_are_escaped() {
        assert_eq!(
            name(&[&[atv(O, UTF8, b"Example, Inc.")]]),
            r"O=Example\, Inc."
        );
        assert_eq!(
            name(&[&[atv(CN, UTF8, br#"a+b;c<d>e"f\g"#)]]),
            r#"CN=a\+b\;c\<d\>e\"f\\g"#
        );
        assert_eq!(name(&[&[atv(CN, UTF8, b"#1 ")]]), r"CN=\#1\ ");
        assert_eq!(name(&[&[atv(CN, UTF8, b" x#")]]), r"CN=\ x#");
        assert_eq!(name(&[&[atv(CN, UTF8, b"a\0b\nc")]]), r"CN=a\00b\0ac");
        assert_eq!(name(&[&[atv(CN, UTF8, "Zürich".as_bytes())]]), "CN=Zürich");
    }

    #[test]
    fn other_string_types_are_decoded() {
        // BMPString (UTF-16BE) and TeletexString (Latin-1 in practice).
        assert_eq!(name(&[&[atv(CN, 0x1e, &[0, b'h', 0, 0xe9])]]), "CN=hé");
        assert_eq!(name(&[&[atv(CN, 0x14, &[b'h', 0xe9])]]), "CN=hé");
    }

    #[test]
    fn unnamed_types_and_values_that_are_no_strings_are_hex_der() {
        assert_eq!(
            name(&[&[atv(&[0x2a, 0x03, 0x04], UTF8, b"x")]]),
            "1.2.3.4=#0c0178"
        );
        // An INTEGER where a string belongs.
        assert_eq!(name(&[&[atv(CN, 0x02, &[0x07])]]), "CN=#020107");
    }
}
