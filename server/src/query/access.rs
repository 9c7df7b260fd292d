//! Who may query what. Every call is made by a principal: the holder of a token from
//! `--query-tokens FILE` (or the single `--query-token`), or of a client certificate whose
//! subject that file names. Each principal has a [`Scope`]: `system` reads the gateway's own
//! tables, `sinks` also what the sinks are sent (`live.SINK.*`, `recent.SINK.*`), `all` also the
//! sources, i.e. the data before any pipeline touched it.
//!
//! The file has one principal per line, `NAME SCOPE CREDENTIAL`, `#` starting a comment. The
//! credential is a token as clients send it, `sha256:HEX` (the SHA-256 of the token, so that
//! the file holds no token), or `cert:SUBJECT` (a client certificate's subject, e.g.
//! `cert:CN=alice, O=SRE`). One name may have several lines (a token and a certificate), all
//! of one scope.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use penstock_dialect::query::{CheckedQuery, Relation};
use sha2::{Digest, Sha256};

/// What a principal may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// The gateway's own tables (`system.*`) and queries of values only.
    System,
    /// Also what sinks are sent: `live.SINK.*` and `recent.SINK.*`.
    Sinks,
    /// Also the sources (`live.SOURCE.*`, `live.all.*`, `recent.*` of sources): data before the
    /// pipelines.
    All,
}

impl Scope {
    /// Every scope, narrowest first.
    pub const ALL: [Scope; 3] = [Scope::System, Scope::Sinks, Scope::All];

    /// Its name, as files and flags spell it.
    pub fn name(self) -> &'static str {
        match self {
            Scope::System => "system",
            Scope::Sinks => "sinks",
            Scope::All => "all",
        }
    }

    /// The scope named `name` (any case).
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// Whether this scope reads the telemetry of stream `stream` (None: every source), where
    /// `sinks` are the names of the gateway's sinks.
    pub fn reads_stream(self, stream: Option<&str>, sinks: &[String]) -> bool {
        match self {
            Scope::All => true,
            Scope::Sinks => stream.is_some_and(|name| sinks.iter().any(|s| s == name)),
            Scope::System => false,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Who makes a call, and what they may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Its name, as audit lines and `system.queries` show it.
    pub name: Arc<str>,
    /// What it may read.
    pub scope: Scope,
}

impl Principal {
    /// The principal of a service that asks for no credential: it reads everything.
    pub fn anonymous() -> Principal {
        Principal {
            name: "anonymous".into(),
            scope: Scope::All,
        }
    }

    /// Whether it may read what `query` reads; if not, the table it may not read.
    pub fn may_read(&self, query: &CheckedQuery, sinks: &[String]) -> Result<(), String> {
        let allowed = match &query.relation {
            Relation::Values | Relation::System { .. } => true,
            // Lookup tables are the pipelines' own data, not telemetry: what sinks are sent
            // may hold their values already.
            Relation::Lookup { .. } => self.scope != Scope::System,
            Relation::Live { stream } | Relation::Recent { stream } => {
                self.scope.reads_stream(stream.as_deref(), sinks)
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(table_name(query))
        }
    }
}

/// The full name of the table `query` reads, e.g. `live.demo.logs` or `system.all.sources`.
pub fn table_name(query: &CheckedQuery) -> String {
    let table = query.table.map_or("", |t| t.name());
    match &query.relation {
        Relation::Live { stream } => format!("live.{}.{table}", stream_name(stream)),
        Relation::Recent { stream } => format!("recent.{}.{table}", stream_name(stream)),
        Relation::System { table } => format!("system.{table}"),
        Relation::Lookup { table } => format!("lookup.{table}"),
        Relation::Values => String::new(),
    }
}

fn stream_name(stream: &Option<String>) -> &str {
    stream
        .as_deref()
        .unwrap_or(penstock_dialect::query::ALL_SOURCES)
}

/// Why the principals could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The file could not be read.
    #[error("reading the query principals {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line of it is wrong.
    #[error("{}:{line}: {message}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// The principals a service knows, by credential.
#[derive(Debug, Default, Clone)]
pub struct Principals {
    /// By the SHA-256 of their tokens.
    tokens: HashMap<[u8; 32], Principal>,
    /// By their certificates' subjects, normalized by [`subject_key`].
    subjects: HashMap<Vec<(String, String)>, Principal>,
}

impl Principals {
    /// One principal holding `token`.
    pub fn single(name: &str, scope: Scope, token: &str) -> Principals {
        let mut principals = Principals::default();
        principals.tokens.insert(
            digest(token),
            Principal {
                name: name.into(),
                scope,
            },
        );
        principals
    }

    /// Reads a principals file.
    pub fn load(path: &Path) -> Result<Principals, AccessError> {
        let text = std::fs::read_to_string(path).map_err(|source| AccessError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Principals::parse(&text).map_err(|(line, message)| AccessError::Line {
            path: path.to_path_buf(),
            line,
            message,
        })
    }

    /// Reads the text of a principals file; an error names its line (from 1).
    pub fn parse<'a>(text: &'a str) -> Result<Principals, (usize, String)> {
        let mut principals = Principals::default();
        let mut scopes: HashMap<String, Scope> = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let line = without_comment(line).trim();
            if line.is_empty() {
                continue;
            }
            let fail = |message: String| Err((number, message));
            let field = |text: &'a str| {
                text.split_once(char::is_whitespace)
                    .map(|(first, rest)| (first, rest.trim()))
            };
            let Some((name, (scope, credential))) =
                field(line).and_then(|(name, rest)| Some((name, field(rest)?)))
            else {
                return fail("expected NAME SCOPE CREDENTIAL".into());
            };
            let Some(scope) = Scope::parse(scope) else {
                return fail(format!(
                    "unknown scope '{scope}'; scopes are system, sinks and all"
                ));
            };
            if let Some(earlier) = scopes.insert(name.to_string(), scope)
                && earlier != scope
            {
                return fail(format!(
                    "'{name}' has scope {earlier} on an earlier line and {scope} here"
                ));
            }
            let principal = Principal {
                name: name.into(),
                scope,
            };
            if let Some(subject) = credential.strip_prefix("cert:") {
                let key = subject_key(subject);
                if key.is_empty() {
                    return fail("'cert:' needs a subject such as CN=alice".into());
                }
                if principals.subjects.insert(key, principal).is_some() {
                    return fail(format!("subject '{subject}' is given twice"));
                }
                continue;
            }
            let token = match credential.strip_prefix("sha256:") {
                Some(hex) => hashed(hex).ok_or((
                    number,
                    "sha256: needs the 64 hex digits of the token's SHA-256".to_string(),
                ))?,
                None if credential.chars().any(char::is_whitespace) => {
                    return fail("a token has no spaces".into());
                }
                None => digest(credential),
            };
            if principals.tokens.insert(token, principal).is_some() {
                return fail(format!("the token of '{name}' is given twice"));
            }
        }
        Ok(principals)
    }

    /// How many credentials it holds.
    pub fn len(&self) -> usize {
        self.tokens.len() + self.subjects.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The principal holding `token`.
    pub fn by_token(&self, token: &str) -> Option<&Principal> {
        self.tokens.get(&digest(token))
    }

    /// The principal of a client certificate whose subject has the attributes `subject`
    /// (`(TYPE, value)` in order, types in upper case; see [`certificate_subjects`]).
    pub fn by_subject(&self, subject: &[(String, String)]) -> Option<&Principal> {
        self.subjects.get(subject)
    }
}

/// `line` without its comment: from a `#` at its start or after a space (a `#` inside a token
/// is part of it).
fn without_comment(line: &str) -> &str {
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        if c == '#' && previous.is_whitespace() {
            return &line[..at];
        }
        previous = c;
    }
    line
}

/// A token's SHA-256.
fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The 32 bytes written as 64 hex digits.
fn hashed(hex: &str) -> Option<[u8; 32]> {
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(hex.trim(), &mut bytes).ok()?;
    Some(bytes)
}

/// A subject as a file writes it (RFC 4514: `CN=alice, O=SRE`, `\,` for a comma inside a
/// value) as its attributes, `(TYPE, value)` in order, the type in upper case and spaces
/// around `,` `+` and `=` ignored. A part without `=` makes it no subject (empty).
fn subject_key(subject: &str) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut chars = subject.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                part.push('\\');
                part.extend(chars.next());
            }
            ',' | '+' => parts.push(std::mem::take(&mut part)),
            c => part.push(c),
        }
    }
    parts.push(part);
    let mut key = Vec::with_capacity(parts.len());
    for part in parts {
        let Some((kind, value)) = split_unescaped(&part, '=') else {
            return Vec::new();
        };
        key.push((kind.trim().to_ascii_uppercase(), unescape(value.trim())));
    }
    key
}

/// `text` split at its first `sep` not escaped by a backslash.
fn split_unescaped(text: &str, sep: char) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == sep => return Some((&text[..at], &text[at + c.len_utf8()..])),
            _ => {}
        }
    }
    None
}

/// `text` with its backslash escapes resolved.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// How a service tells who calls: nobody is asked (everyone reads everything), or the
/// principals known, reloaded from their file on SIGHUP.
pub struct Access {
    /// The principals file, if they come from one.
    file: Option<PathBuf>,
    /// The principals now (None: no credential is asked for).
    principals: RwLock<Option<Arc<Principals>>>,
}

impl Access {
    /// A service that asks for no credential.
    pub fn open() -> Access {
        Access {
            file: None,
            principals: RwLock::new(None),
        }
    }

    /// A service that knows `principals`, from `file` if they come from one.
    pub fn known(principals: Principals, file: Option<PathBuf>) -> Access {
        Access {
            file,
            principals: RwLock::new(Some(Arc::new(principals))),
        }
    }

    /// The principals now (None: no credential is asked for).
    fn now(&self) -> Option<Arc<Principals>> {
        self.principals.read().ok().and_then(|p| p.clone())
    }

    /// Reads the principals file again; on an error the principals stay as they were.
    /// Returns how many credentials it holds now (None: no file to read).
    pub fn reload(&self) -> Result<Option<usize>, AccessError> {
        let Some(file) = &self.file else {
            return Ok(None);
        };
        let principals = Principals::load(file)?;
        let count = principals.len();
        if let Ok(mut now) = self.principals.write() {
            *now = Some(Arc::new(principals));
        }
        Ok(Some(count))
    }

    /// Who makes a call: the holder of its bearer token (`authorization: Bearer TOKEN`), else
    /// of its client certificate (`certificates`: the subjects of the certificates the TLS
    /// layer verified, the client's own first).
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
        certificates: &[Vec<(String, String)>],
    ) -> Result<Principal, tonic::Status> {
        let Some(principals) = self.now() else {
            return Ok(Principal::anonymous());
        };
        if let Some(value) = authorization {
            let token = value.strip_prefix("Bearer ").ok_or_else(|| {
                tonic::Status::unauthenticated(
                    "the query service takes `authorization: Bearer TOKEN`",
                )
            })?;
            return principals.by_token(token.trim()).cloned().ok_or_else(|| {
                tonic::Status::unauthenticated(
                    "the query service knows no such token (`authorization: Bearer TOKEN`)",
                )
            });
        }
        if let Some(subject) = certificates.first() {
            return principals.by_subject(subject).cloned().ok_or_else(|| {
                let shown: Vec<String> = subject.iter().map(|(k, v)| format!("{k}={v}")).collect();
                tonic::Status::unauthenticated(format!(
                    "the client certificate of subject '{}' is no principal of the query \
                     service",
                    shown.join(", ")
                ))
            });
        }
        Err(tonic::Status::unauthenticated(
            "the query service needs `authorization: Bearer TOKEN` with a token it knows, or a \
             client certificate",
        ))
    }
}

/// The subject of a call's client certificate (the client's own, first of the chain), as its
/// attributes in order: `(TYPE, value)`, the type as its abbreviation in upper case (`CN`,
/// `O`, ...; the OID's dotted form when it has none). A subject with an attribute that is not text is none.
pub fn certificate_subjects<T>(request: &tonic::Request<T>) -> Vec<Vec<(String, String)>> {
    let Some(certificates) = request.peer_certs() else {
        return Vec::new();
    };
    let registry = x509_parser::objects::oid_registry();
    certificates
        .iter()
        .take(1)
        .filter_map(|der| x509_parser::parse_x509_certificate(der.as_ref()).ok())
        .filter_map(|(_, certificate)| {
            let mut key = Vec::new();
            for rdn in certificate.subject().iter() {
                for attribute in rdn.iter() {
                    let oid = attribute.attr_type();
                    let kind = x509_parser::objects::oid2abbrev(oid, registry)
                        .map_or_else(|_| oid.to_id_string(), str::to_string);
                    let value = attribute.as_str().ok()?;
                    key.push((kind.to_ascii_uppercase(), value.to_string()));
                }
            }
            Some(key)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use penstock_dialect::query::check_query;

    const FILE: &str = "
        # who reads what
        sre     sinks   s3cret-sre
        admin   all     sha256:fb8e20fc2e4c3f248c60c39bd652f3c1347298bb977b8b4d5903b85055620603
        grafana system  s3cret-grafana   # counters only
        alice   sinks   cert:CN=alice, O=SRE
    ";

    fn query(sql: &str) -> CheckedQuery {
        check_query(sql, &["sources"]).unwrap()
    }

    #[test]
    fn a_file_names_principals_by_token_hashed_token_and_certificate_subject() {
        let principals = Principals::parse(FILE).unwrap();
        assert_eq!(principals.len(), 4);
        let sre = principals.by_token("s3cret-sre").unwrap();
        assert_eq!((&*sre.name, sre.scope), ("sre", Scope::Sinks));
        // sha256("ab") is in the file, not "ab".
        let admin = principals.by_token("ab").unwrap();
        assert_eq!((&*admin.name, admin.scope), ("admin", Scope::All));
        assert_eq!(
            principals.by_token("s3cret-grafana").unwrap().scope,
            Scope::System
        );
        assert!(principals.by_token("s3cret").is_none());
        // A `#` inside a token is part of it.
        let hashed = Principals::parse("ops all a#b # comment\n").unwrap();
        assert!(hashed.by_token("a#b").is_some() && hashed.by_token("a").is_none());
        let alice = principals
            .by_subject(&subject_key("cn=alice,O=SRE"))
            .unwrap();
        assert_eq!(&*alice.name, "alice");
        assert!(principals.by_subject(&subject_key("CN=alice")).is_none());
        // A value holding a comma is one attribute, not two.
        let one = vec![("CN".to_string(), "alice, O=SRE".to_string())];
        assert!(principals.by_subject(&one).is_none());
        assert_eq!(subject_key(r"CN=alice\, O=SRE"), one);
    }

    #[test]
    fn a_wrong_line_is_refused_with_its_number() {
        for (text, line, message) in [
            ("a all\n", 1, "expected NAME SCOPE CREDENTIAL"),
            ("\n a root t\n", 2, "unknown scope 'root'"),
            (
                "a all t\na sinks u\n",
                2,
                "'a' has scope all on an earlier line",
            ),
            ("a all t\nb all t\n", 2, "the token of 'b' is given twice"),
            ("a all sha256:12\n", 1, "64 hex digits"),
            ("a all cert:\n", 1, "needs a subject"),
            ("a all two words\n", 1, "a token has no spaces"),
            (
                "a all # no credential\n",
                1,
                "expected NAME SCOPE CREDENTIAL",
            ),
        ] {
            let (number, error) = Principals::parse(text).unwrap_err();
            assert_eq!(number, line, "{text:?}");
            assert!(error.contains(message), "{text:?}: {error}");
        }
    }

    #[test]
    fn each_scope_reads_its_tables() {
        let sinks = vec!["backend".to_string()];
        let reader = |scope| Principal {
            name: "p".into(),
            scope,
        };
        let cases = [
            ("SELECT 1", [true, true, true]),
            ("SELECT * FROM system.sources", [true, true, true]),
            ("SELECT * FROM live.backend.logs", [false, true, true]),
            ("SELECT * FROM recent.backend.spans", [false, true, true]),
            ("SELECT * FROM live.edge.logs", [false, false, true]),
            ("SELECT * FROM logs", [false, false, true]),
            ("SELECT * FROM recent.all.metrics", [false, false, true]),
        ];
        for (sql, allowed) in cases {
            for (scope, allowed) in Scope::ALL.into_iter().zip(allowed) {
                let result = reader(scope).may_read(&query(sql), &sinks);
                assert_eq!(result.is_ok(), allowed, "{scope}: {sql}: {result:?}");
            }
        }
        let refused = reader(Scope::Sinks).may_read(&query("SELECT * FROM logs"), &sinks);
        assert_eq!(refused, Err("live.all.logs".to_string()));
    }

    #[test]
    fn calls_are_made_by_the_holder_of_their_token_or_certificate() {
        let access = Access::known(Principals::parse(FILE).unwrap(), None);
        let sre = access.authenticate(Some("Bearer s3cret-sre"), &[]).unwrap();
        assert_eq!(&*sre.name, "sre");
        let alice = access
            .authenticate(None, &[subject_key("CN=alice, O=SRE")])
            .unwrap();
        assert_eq!(&*alice.name, "alice");
        for (authorization, subjects) in [
            (Some("Bearer nope"), vec![]),
            (Some("s3cret-sre"), vec![]),
            (None, vec![subject_key("CN=mallory")]),
            (None, vec![]),
        ] {
            let refused = access.authenticate(authorization, &subjects).unwrap_err();
            assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        }
        let open = Access::open().authenticate(None, &[]).unwrap();
        assert_eq!(open, Principal::anonymous());
    }

    #[test]
    fn a_bad_file_on_reload_keeps_the_principals_there_were() {
        let dir = std::env::temp_dir().join(format!("penstock-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("principals");
        std::fs::write(&file, "a all one\n").unwrap();
        let access = Access::known(Principals::load(&file).unwrap(), Some(file.clone()));
        std::fs::write(&file, "a all two\nb nothing three\n").unwrap();
        let error = access.reload().unwrap_err().to_string();
        assert!(
            error.ends_with(
                "principals:2: unknown scope 'nothing'; scopes are system, sinks and all"
            ),
            "{error}"
        );
        assert!(access.authenticate(Some("Bearer one"), &[]).is_ok());
        std::fs::write(&file, "a all two\n").unwrap();
        assert_eq!(access.reload().unwrap(), Some(1));
        assert!(access.authenticate(Some("Bearer one"), &[]).is_err());
        assert!(access.authenticate(Some("Bearer two"), &[]).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
