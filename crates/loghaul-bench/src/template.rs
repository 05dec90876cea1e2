//! The peers' config templates: text files under `bench/peers/<peer>/`, embedded in the binary
//! with `include_str!` (so `loghaul bench` needs no checkout to run), with `{{name}}` placeholders
//! filled in here.
//!
//! A template is the config as the peer reads it, so it can be read (and tried) on its own; the
//! lab only fills in ports, paths and the fragments that differ between subjects. Rendering is one
//! pass: a value is never scanned for placeholders itself, and a placeholder without a value is
//! left as it is (the configs' test data catches it).

/// `template` with every `{{name}}` of `vars` replaced by its value.
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let value = after.find("}}").and_then(|end| {
            let name = &after[..end];
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v, end + 2))
        });
        match value {
            Some((v, len)) => {
                out.push_str(v);
                rest = &after[len..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A fragment of a template: its text without the newline that ends the file, to be placed
/// inside a line of another template.
pub fn fragment(text: &str) -> &str {
    text.strip_suffix('\n').unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_placeholders_once_and_keeps_unknown_ones() {
        assert_eq!(
            render(
                "a {{x}} b {{y}} {{z}} ${tag}",
                &[("x", "{{y}}"), ("y", "2")]
            ),
            "a {{y}} b 2 {{z}} ${tag}"
        );
        assert_eq!(render("{{x", &[("x", "1")]), "{{x");
        assert_eq!(fragment("line\n"), "line");
    }
}
