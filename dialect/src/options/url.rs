//! The URLs of sinks: gRPC endpoints and OTLP/HTTP base URLs.

/// Checks a gRPC endpoint: scheme `http` or `https`, a host, an optional port from 1 to
/// 65535 (80 or 443 without one), and no path, query or credentials.
pub fn check_endpoint(url: &str) -> Result<(), String> {
    let (authority, rest) = split_url(url)?;
    if !rest.is_empty() && rest != "/" {
        return Err("a gRPC endpoint has no path or query: give only scheme://host:port".into());
    }
    check_authority(authority)
}

/// The paths an OTLP/HTTP sink appends to its base URL.
const SIGNAL_PATHS: [&str; 3] = ["/v1/logs", "/v1/traces", "/v1/metrics"];

/// Checks an OTLP/HTTP base URL: a gRPC endpoint's scheme, host and port, then an optional
/// path prefix (no query or fragment) that does not already end in a signal's path.
pub fn check_base_url(url: &str) -> Result<(), String> {
    let (authority, path) = split_url(url)?;
    check_authority(authority)?;
    if path.contains(['?', '#']) {
        return Err("a base URL has no query or fragment".into());
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:@".contains(c);
    if let Some(c) = path.chars().find(|c| !allowed(*c)) {
        return Err(format!("'{c}' is not allowed in a URL path"));
    }
    let trimmed = path.trim_end_matches('/');
    if let Some(signal) = SIGNAL_PATHS.iter().find(|p| trimmed.ends_with(*p)) {
        let base = &url[..url.len() - path.len() + trimmed.len() - signal.len()];
        return Err(format!(
            "the sink appends {signal} (and the other signals' paths) itself: write '{base}'"
        ));
    }
    Ok(())
}

/// Splits `scheme://authority/rest` into the authority and the rest (from its first `/`,
/// `?` or `#`); the scheme must be `http` or `https`.
fn split_url(url: &str) -> Result<(&str, &str), String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        format!("it has no scheme; write 'http://{url}' (or 'https://{url}' for TLS)")
    })?;
    if scheme != "http" && scheme != "https" {
        return Err(format!("the scheme must be http or https, not '{scheme}'"));
    }
    Ok(match rest.find(['/', '?', '#']) {
        None => (rest, ""),
        Some(at) => rest.split_at(at),
    })
}

/// Checks a URL's `host[:port]`: a host, an optional port from 1 to 65535, no credentials.
fn check_authority(authority: &str) -> Result<(), String> {
    if authority.contains('@') {
        return Err("credentials do not go in the endpoint: use the auth_token option".into());
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or("an IPv6 address needs its closing ']'")?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or("expected ':' and a port after ']'")?,
                ),
            ),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("it has no host".into());
    }
    let host_ok = host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%'));
    if !host_ok {
        return Err(format!("'{host}' is not a host name or address"));
    }
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => {
                return Err(format!(
                    "the port must be a number from 1 to 65535, not '{port}'"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_base_url, check_endpoint};

    /// Asserts `check` accepts each of `good` and refuses each of `bad`.
    fn sorts(check: fn(&str) -> Result<(), String>, good: &[&str], bad: &[&str]) {
        for url in good {
            assert_eq!(check(url), Ok(()), "{url}");
        }
        for url in bad {
            assert!(check(url).is_err(), "{url} was accepted");
        }
    }

    #[test]
    fn endpoints_need_a_scheme_a_host_and_a_valid_port() {
        let good = [
            "http://127.0.0.1:4317",
            "https://collector.example.com:443",
            "https://collector.example.com",
            "http://[::1]:4317",
            "http://localhost:4317/",
        ];
        let bad = [
            "127.0.0.1:4317",
            "localhost",
            "grpc://h:1",
            "http://",
            "http://:4317",
            "http://h:0",
            "http://h:65536",
            "http://h:port",
            "http://h:4317/v1/logs",
            "http://user:pw@h:4317",
            "http://[::1:4317",
            "http://h h:1",
        ];
        sorts(check_endpoint, &good, &bad);
    }

    #[test]
    fn base_urls_take_a_path_prefix_but_no_signal_path() {
        let good = [
            "http://127.0.0.1:4318",
            "https://otlp.example.com",
            "https://otlp.example.com:443/",
            "https://gateway.example.com/otlp",
            "https://gateway.example.com/tenant-1/otlp/",
        ];
        let bad = [
            "127.0.0.1:4318",
            "ftp://h:1",
            "http://:4318",
            "http://h:4318?x=1",
            "http://h:4318/a b",
            "http://user@h:4318",
        ];
        sorts(check_base_url, &good, &bad);
        assert_eq!(
            check_base_url("https://h:4318/otlp/v1/traces/"),
            Err(
                "the sink appends /v1/traces (and the other signals' paths) itself: \
                 write 'https://h:4318/otlp'"
                    .into()
            )
        );
    }
}
