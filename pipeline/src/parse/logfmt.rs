//! `parse_logfmt(text)`: `key=value` pairs separated by whitespace as string attributes. A value
//! is bare (up to the next whitespace) or double-quoted with backslash escapes (`\"`, `\\`,
//! `\n`, `\t`, `\r`, `\uXXXX`); `key=` is an empty string and a key alone is `true`. A text
//! with an unterminated quote, a key that starts with `=` or `"`, or no pair at all makes no
//! attribute.

use std::borrow::Cow;

use super::made::{Made, MadeAttrs};

/// Reads the pairs of `text` (row `row`) into `out`; false (and nothing added) when it has
/// none or is not logfmt.
pub(crate) fn pairs_into(text: &str, row: u32, out: &mut MadeAttrs) -> bool {
    out.start_row();
    let made = pairs(text, row, out);
    if made != Some(true) {
        out.abandon_row();
    }
    made == Some(true)
}

/// Whether some pair was read; None when the text is not logfmt.
fn pairs(text: &str, row: u32, out: &mut MadeAttrs) -> Option<bool> {
    let s = text.as_bytes();
    let mut pos = 0;
    let mut any = false;
    loop {
        while pos < s.len() && s[pos].is_ascii_whitespace() {
            pos += 1;
        }
        if pos == s.len() {
            return Some(any);
        }
        let start = pos;
        while pos < s.len() && !s[pos].is_ascii_whitespace() && s[pos] != b'=' {
            if s[pos] == b'"' {
                return None;
            }
            pos += 1;
        }
        if pos == start {
            return None;
        }
        let key = &text[start..pos];
        if pos == s.len() || s[pos] != b'=' {
            out.push(row, key, Made::Bool(true));
            any = true;
            continue;
        }
        pos += 1;
        let value: Cow<'_, str> = if s.get(pos) == Some(&b'"') {
            let (value, end) = quoted(text, pos + 1)?;
            pos = end;
            value
        } else {
            let from = pos;
            while pos < s.len() && !s[pos].is_ascii_whitespace() {
                pos += 1;
            }
            Cow::Borrowed(&text[from..pos])
        };
        out.push(row, key, Made::Str(&value));
        any = true;
    }
}

/// The quoted value whose content starts at `from`, unescaped, and where it ends (past the
/// closing quote).
fn quoted(text: &str, from: usize) -> Option<(Cow<'_, str>, usize)> {
    let s = text.as_bytes();
    let stop = memchr::memchr2(b'"', b'\\', &s[from..])? + from;
    if s[stop] == b'"' {
        return Some((Cow::Borrowed(&text[from..stop]), stop + 1));
    }
    let mut owned = String::from(&text[from..stop]);
    let mut pos = stop;
    loop {
        let next = memchr::memchr2(b'"', b'\\', &s[pos..])? + pos;
        owned.push_str(&text[pos..next]);
        if s[next] == b'"' {
            return Some((Cow::Owned(owned), next + 1));
        }
        let escaped = *s.get(next + 1)?;
        pos = next + 2;
        match escaped {
            b'"' => owned.push('"'),
            b'\\' => owned.push('\\'),
            b'n' => owned.push('\n'),
            b't' => owned.push('\t'),
            b'r' => owned.push('\r'),
            b'u' => {
                let hex = text.get(pos..pos + 4)?;
                owned.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
                pos += 4;
            }
            // Any other escaped character stands for itself, backslash included.
            other if other.is_ascii() => {
                owned.push('\\');
                owned.push(char::from(other));
            }
            _ => {
                owned.push('\\');
                pos = next + 1;
            }
        }
    }
}
