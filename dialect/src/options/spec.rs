//! What an option of a source or sink is: its name, the type of its values, whether it must
//! be given, and what it does.

/// What values an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionType {
    /// A string.
    Str,
    /// A non-negative integer.
    Count,
    /// A duration string: `'500ms'`, `'10s'`, `'2m'`, `'1h'`.
    Duration,
    /// A boolean.
    Bool,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// A gRPC endpoint URL: `http://host:port` or `https://host:port`.
    Endpoint,
    /// An OTLP/HTTP base URL: `http://host:port` or `https://host:port`, with an optional
    /// path prefix; the sink appends each signal's path (`/v1/logs`, ...).
    BaseUrl,
    /// HTTP headers sent with every request: `'name=value,name=value'` (see
    /// [`parse_headers`](super::parse_headers)).
    Headers,
    /// A size in bytes: a count, or a string with a unit such as `'512MiB'` or `'10GB'` (see
    /// [`parse_size`](super::parse_size)); read with [`Options::count`](super::Options::count).
    Size,
}

/// One option a source or sink kind accepts.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub ty: OptionType,
    /// Whether it must be given.
    pub required: bool,
    /// What it does (for `docs/dialect.md` and error messages).
    pub doc: &'static str,
}

/// An [`OptionSpec`], written briefly in the tables of options.
pub(super) const fn opt(
    name: &'static str,
    ty: OptionType,
    required: bool,
    doc: &'static str,
) -> OptionSpec {
    OptionSpec {
        name,
        ty,
        required,
        doc,
    }
}
