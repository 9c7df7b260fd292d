//! The HTTP headers an OTLP/HTTP sink sends, written as `'name=value,name=value'`.

/// Headers an OTLP/HTTP sink sets itself, which the `headers` option may not set.
const RESERVED_HEADERS: [&str; 9] = [
    "content-type",
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
];

/// Parses a `headers` option: comma-separated `name=value` pairs, as in
/// `OTEL_EXPORTER_OTLP_HEADERS` (spaces around names and values are trimmed, values are
/// percent-decoded, so `%2C` is a comma). Names are HTTP tokens, returned in lower case, and
/// may not be headers the sink sets itself; values are printable ASCII. `''` is no headers.
pub fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut headers = Vec::new();
    if text.trim().is_empty() {
        return Ok(headers);
    }
    for entry in text.split(',') {
        let (name, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("'{}' has no '=' between name and value", entry.trim()))?;
        let name = name.trim().to_ascii_lowercase();
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) {
            return Err(format!("'{name}' is not a header name"));
        }
        if RESERVED_HEADERS.contains(&name.as_str()) {
            return Err(format!("the sink sets '{name}' itself"));
        }
        let value = percent_decode(value.trim()).ok_or_else(|| {
            format!(
                "the value of '{name}' has a '%' not followed by two hex digits or is not UTF-8"
            )
        })?;
        if !value.chars().all(|c| c == '\t' || (' '..='~').contains(&c)) {
            return Err(format!("the value of '{name}' is not printable ASCII"));
        }
        headers.push((name, value));
    }
    Ok(headers)
}

/// Decodes `%XX` escapes; `None` for a malformed escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::parse_headers;

    #[test]
    fn headers_are_name_value_pairs_with_percent_decoded_values() {
        assert_eq!(
            parse_headers(" X-Api-Key = abc%2C123= , tenant=a b").unwrap(),
            vec![
                ("x-api-key".to_string(), "abc,123=".to_string()),
                ("tenant".to_string(), "a b".to_string())
            ]
        );
        assert_eq!(parse_headers("").unwrap(), vec![]);
        for (bad, why) in [
            ("a=1,,b=2", "has no '='"),
            ("novalue", "has no '='"),
            ("=v", "is not a header name"),
            ("a b=1", "is not a header name"),
            ("Content-Type=text/plain", "sets 'content-type' itself"),
            ("a=%zz", "two hex digits"),
            ("a=%0a", "not printable ASCII"),
        ] {
            let error = parse_headers(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }
}
