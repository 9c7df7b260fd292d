//! HPACK's indexing tables (RFC 7541, section 2.3): the static table, then the entries the
//! sender added to the dynamic table, newest first.

use std::collections::VecDeque;

use super::error::HpackError;

/// RFC 7541 Appendix A: indices 1 to 61.
#[rustfmt::skip]
const STATIC: [(&str, &str); 61] = [
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
    ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
    ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
    ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
    ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
];

/// A field the sender added to the dynamic table: name, value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// What an entry costs in the dynamic table besides its name and value (section 4.1).
const ENTRY_OVERHEAD: usize = 32;

/// The dynamic table of one sender's encoder.
#[derive(Debug)]
pub struct Table {
    /// Newest first.
    entries: VecDeque<Entry>,
    /// The entries' size (section 4.1).
    size: usize,
    /// The size the sender set (at most `allowed`).
    max: usize,
    /// The most the sender may set.
    allowed: usize,
}

impl Table {
    /// An empty table the sender may size up to `allowed` bytes (and starts at that size).
    pub fn new(allowed: usize) -> Table {
        Table {
            entries: VecDeque::new(),
            size: 0,
            max: allowed,
            allowed,
        }
    }

    /// The field at `index` (1-based: static entries, then dynamic ones).
    pub fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::BadIndex(0)),
            1..=61 => {
                let (name, value) = STATIC[index - 1];
                Ok((name.as_bytes(), value.as_bytes()))
            }
            _ => self
                .entries
                .get(index - 62)
                .map(|(n, v)| (&n[..], &v[..]))
                .ok_or(HpackError::BadIndex(index)),
        }
    }

    /// Adds a field, evicting the oldest entries to make room; a field larger than the table
    /// empties it and is not added (section 4.4).
    pub fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        self.evict_to(self.max.saturating_sub(size));
        if size <= self.max {
            self.entries.push_front((name.into(), value.into()));
            self.size += size;
        }
    }

    /// The sender's dynamic table size update (section 6.3).
    pub fn resize(&mut self, max: usize) -> Result<(), HpackError> {
        if max > self.allowed {
            return Err(HpackError::TableTooLarge {
                asked: max,
                allowed: self.allowed,
            });
        }
        self.max = max;
        self.evict_to(max);
        Ok(())
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let Some((name, value)) = self.entries.pop_back() else {
                break;
            };
            self.size -= name.len() + value.len() + ENTRY_OVERHEAD;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn entries_are_evicted_oldest_first_and_oversized_ones_empty_the_table() {
        let mut table = Table::new(100);
        table.insert(b"a", b"1"); // 34 bytes
        table.insert(b"b", b"2");
        assert_eq!(table.get(62).unwrap(), (&b"b"[..], &b"2"[..]));
        assert_eq!(table.get(63).unwrap(), (&b"a"[..], &b"1"[..]));
        table.insert(b"c", b"3"); // 102 > 100: "a" goes
        assert_eq!(table.get(63).unwrap(), (&b"b"[..], &b"2"[..]));
        assert!(matches!(table.get(64), Err(HpackError::BadIndex(64))));
        table.insert(&[b'x'; 80], b""); // 112 > 100: empties the table, not added
        assert!(table.get(62).is_err());
        assert_eq!(table.size, 0);
        assert_eq!(table.get(2).unwrap(), (&b":method"[..], &b"GET"[..]));
        assert_eq!(table.get(61).unwrap().0, b"www-authenticate");
        assert!(table.get(0).is_err());
    }

    #[test]
    fn resizing_evicts_and_is_bounded() {
        let mut table = Table::new(100);
        table.insert(b"a", b"1");
        table.insert(b"b", b"2");
        table.resize(40).unwrap();
        assert_eq!(table.get(62).unwrap().0, b"b");
        assert!(table.get(63).is_err());
        assert!(matches!(
            table.resize(101),
            Err(HpackError::TableTooLarge { asked: 101, .. })
        ));
    }
}
