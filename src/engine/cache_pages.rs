//! Rows read straight from the pages of a damaged result cache, for `cache repair`.
//!
//! SQLite's own reader walks a table's b-tree and gives up at the first page it cannot
//! read, so one overwritten page near the start of a table hid every entry after it. This
//! reader looks at every page of the file on its own: a page that still parses as a page
//! of the cache's tables gives up its entries whatever happened to its neighbours or to
//! the interior pages above it, and a damaged page loses only the entries it held.
//!
//! It knows only what the cache's two tables need of SQLite's file format: the header
//! (page size, reserved bytes, free-list), index b-tree pages (both tables are `WITHOUT
//! ROWID`, so each is an index b-tree whose entries are whole records, on interior pages
//! as well as leaves), records and overflow chains. An entry is kept only when its record
//! decodes exactly into the column types of one of the two tables. Pages of the free-list
//! are skipped (they hold nothing live); a page that is neither a b-tree page, an overflow
//! page of an entry that was read, nor on the free-list is counted as unreadable. Frames
//! of a write-ahead log beside the file are read the same way (pages committed there but
//! not yet copied into the file).

use std::collections::HashSet;

use rusqlite::types::Value;

/// What [`scan`] read from a database file (and its write-ahead log).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PageScan {
    /// `label_results` rows: model, template, prompt, labels (text), logprobs (blob),
    /// label_mass (real), prompt_tokens (integer).
    pub label_rows: Vec<Vec<Value>>,
    /// `text_results` rows: model, kind, key, value (text).
    pub text_rows: Vec<Vec<Value>>,
    /// Pages of the database file.
    pub pages: usize,
    /// Pages of the file that could be read as none of: a b-tree page, an overflow page
    /// (of an entry read, or one that looks like one), a free-list page, the header page.
    pub unreadable_pages: usize,
    /// Entries on readable b-tree pages that did not decode into either table's columns
    /// (an overwritten part of a page, a broken overflow chain).
    pub undecodable: usize,
    /// B-tree pages that gave up entries of the cache's tables.
    pub entry_pages: usize,
}

const MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// SQLite's default page size, assumed when the header itself was overwritten.
const DEFAULT_PAGE_SIZE: usize = 4096;
const WAL_HEADER: usize = 32;
const WAL_FRAME_HEADER: usize = 24;

/// Read every entry that can be read from `file` (the bytes of a database) and `wal`
/// (the bytes of its write-ahead log, empty when there is none).
pub fn scan(file: &[u8], wal: &[u8]) -> PageScan {
    let layout = Layout::of(file);
    let pages = file.len() / layout.page_size;
    let page = |n: usize| -> Option<&[u8]> {
        let start = n.checked_sub(1)? * layout.page_size;
        file.get(start..start + layout.page_size)
    };
    let free = free_pages(&layout, pages, &page);
    let mut out = PageScan {
        pages,
        ..PageScan::default()
    };
    let mut claimed: HashSet<usize> = HashSet::new();
    let mut unrecognised = Vec::new();
    for n in 1..=pages {
        if free.contains(&n) {
            continue;
        }
        let Some(bytes) = page(n) else { break };
        match read_page(bytes, n, &layout, &page, &mut out, &mut claimed) {
            PageKind::Entries | PageKind::Other => {}
            PageKind::Unrecognised => unrecognised.push(n),
        }
    }
    // Pages the file holds that no entry claimed as its overflow: unreadable, unless they
    // look like the overflow page of an entry lost with another page (they start with the
    // number of a page of the file, or 0, and are not all zeros). Page 1 is the header and
    // the schema's own table, never an entry page.
    let orphan_overflow = |n: usize| {
        page(n).is_some_and(|bytes| {
            let next = be32(&bytes[..4]);
            (next == 0 || (2..=pages).contains(&next)) && bytes.iter().any(|&b| b != 0)
        })
    };
    out.unreadable_pages = unrecognised
        .iter()
        .filter(|&&n| {
            n != 1 && !claimed.contains(&n) && n != layout.lock_byte_page() && !orphan_overflow(n)
        })
        .count();
    scan_wal(wal, &layout, &mut out);
    out
}

/// Page size and usable bytes per page, from the header when it is readable.
struct Layout {
    page_size: usize,
    usable: usize,
    /// First free-list trunk page and the number of free pages, when the header is sound.
    free_list: Option<(usize, usize)>,
}

impl Layout {
    fn of(file: &[u8]) -> Self {
        let guessed = Self {
            page_size: DEFAULT_PAGE_SIZE,
            usable: DEFAULT_PAGE_SIZE,
            free_list: None,
        };
        if file.len() < 100 || &file[..16] != MAGIC {
            return guessed;
        }
        let page_size = match u16::from_be_bytes([file[16], file[17]]) {
            1 => 65536,
            n => usize::from(n),
        };
        if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
            return guessed;
        }
        let reserved = usize::from(file[20]);
        if page_size - reserved < 480 {
            return guessed;
        }
        Self {
            page_size,
            usable: page_size - reserved,
            free_list: Some((be32(&file[32..36]), be32(&file[36..40]))),
        }
    }

    /// The page that holds the bytes at 1 GiB, which SQLite never uses.
    fn lock_byte_page(&self) -> usize {
        (1 << 30) / self.page_size + 1
    }
}

fn be32(bytes: &[u8]) -> usize {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize
}

fn be16(bytes: &[u8]) -> usize {
    usize::from(u16::from_be_bytes([bytes[0], bytes[1]]))
}

/// The free-list's pages (trunks and leaves), as far as it can be followed.
fn free_pages<'a>(
    layout: &Layout,
    pages: usize,
    page: &impl Fn(usize) -> Option<&'a [u8]>,
) -> HashSet<usize> {
    let mut free = HashSet::new();
    let Some((mut trunk, count)) = layout.free_list else {
        return free;
    };
    while trunk >= 2 && trunk <= pages && free.len() < count && free.insert(trunk) {
        let Some(bytes) = page(trunk) else { break };
        let leaves = be32(&bytes[4..8]).min((layout.usable - 8) / 4);
        for k in 0..leaves {
            let leaf = be32(&bytes[8 + 4 * k..12 + 4 * k]);
            if leaf >= 2 && leaf <= pages {
                free.insert(leaf);
            }
        }
        trunk = be32(&bytes[..4]);
    }
    free
}

enum PageKind {
    /// An index b-tree page (its entries were read, or counted as undecodable).
    Entries,
    /// A table b-tree page (the schema): readable, holds no entries of ours.
    Other,
    /// Not a b-tree page: an overflow page, or damage.
    Unrecognised,
}

const INDEX_INTERIOR: u8 = 0x02;
const TABLE_INTERIOR: u8 = 0x05;
const INDEX_LEAF: u8 = 0x0A;
const TABLE_LEAF: u8 = 0x0D;

/// Read page `n` (its bytes `bytes`): entries of an index b-tree page go into `out`,
/// their overflow pages into `claimed`.
fn read_page<'a>(
    bytes: &[u8],
    n: usize,
    layout: &Layout,
    page: &impl Fn(usize) -> Option<&'a [u8]>,
    out: &mut PageScan,
    claimed: &mut HashSet<usize>,
) -> PageKind {
    let start = if n == 1 { 100 } else { 0 };
    let usable = layout.usable.min(bytes.len());
    let kind = bytes[start];
    let header = match kind {
        INDEX_INTERIOR | TABLE_INTERIOR => 12,
        INDEX_LEAF | TABLE_LEAF => 8,
        _ => return PageKind::Unrecognised,
    };
    let cells = be16(&bytes[start + 3..start + 5]);
    let pointers = start + header;
    if pointers + 2 * cells > usable {
        return PageKind::Unrecognised;
    }
    if kind == TABLE_INTERIOR || kind == TABLE_LEAF {
        return PageKind::Other;
    }
    let mut found = false;
    for k in 0..cells {
        let at = be16(&bytes[pointers + 2 * k..pointers + 2 * k + 2]);
        let cell = if at >= pointers + 2 * cells && at < usable {
            let body = if kind == INDEX_INTERIOR { at + 4 } else { at };
            payload(&bytes[..usable], body, layout, page)
        } else {
            None
        };
        let row = cell.and_then(|(payload, chain)| Some((record(&payload)?, chain)));
        match row.and_then(|(values, chain)| Some((classify(values)?, chain))) {
            Some(((table, values), chain)) => {
                found = true;
                claimed.extend(chain);
                match table {
                    Table::Label => out.label_rows.push(values),
                    Table::Text => out.text_rows.push(values),
                }
            }
            None => out.undecodable += 1,
        }
    }
    if found {
        out.entry_pages += 1;
    }
    PageKind::Entries
}

/// An index cell's payload at `at` (its size varint first): the local bytes followed
/// by its overflow chain, and the chain's pages; `None` when any of it is out of bounds.
fn payload<'a>(
    bytes: &[u8],
    at: usize,
    layout: &Layout,
    page: &impl Fn(usize) -> Option<&'a [u8]>,
) -> Option<(Vec<u8>, Vec<usize>)> {
    let (size, read) = varint(bytes.get(at..)?)?;
    let size = usize::try_from(size).ok()?;
    let u = layout.usable;
    let most = (u - 12) * 64 / 255 - 23;
    let least = (u - 12) * 32 / 255 - 23;
    let local = if size <= most {
        size
    } else {
        let k = least + (size - least) % (u - 4);
        if k <= most {
            k
        } else {
            least
        }
    };
    let begin = at + read;
    let mut data = bytes.get(begin..begin + local)?.to_vec();
    let mut chain = Vec::new();
    if local < size {
        let mut next = be32(bytes.get(begin + local..begin + local + 4)?);
        while data.len() < size {
            if next < 2 || chain.contains(&next) {
                return None;
            }
            let overflow = page(next)?;
            chain.push(next);
            let take = (size - data.len()).min(u - 4);
            data.extend_from_slice(overflow.get(4..4 + take)?);
            next = be32(&overflow[..4]);
        }
    }
    Some((data, chain))
}

/// A SQLite varint: its value and its length in bytes.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(9) {
        if i == 8 {
            return Some(((value << 8) | u64::from(byte), 9));
        }
        value = (value << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The values of a record; `None` unless its header and body use its bytes exactly.
fn record(payload: &[u8]) -> Option<Vec<Value>> {
    let (header_size, mut at) = varint(payload)?;
    let header_size = usize::try_from(header_size).ok()?;
    if header_size > payload.len() || header_size < at {
        return None;
    }
    let mut types = Vec::new();
    while at < header_size {
        let (serial, read) = varint(&payload[at..header_size])?;
        types.push(serial);
        at += read;
    }
    let mut body = header_size;
    let mut values = Vec::with_capacity(types.len());
    for serial in types {
        let width = match serial {
            0 | 8 | 9 => 0,
            1..=4 => serial as usize,
            5 => 6,
            6 | 7 => 8,
            10 | 11 => return None,
            n => usize::try_from((n - 12) / 2).ok()?,
        };
        let bytes = payload.get(body..body.checked_add(width)?)?;
        body += width;
        values.push(match serial {
            0 => Value::Null,
            8 => Value::Integer(0),
            9 => Value::Integer(1),
            1..=6 => {
                // Big-endian two's complement of `width` bytes.
                let negative = bytes[0] & 0x80 != 0;
                let mut value: i64 = if negative { -1 } else { 0 };
                for &byte in bytes {
                    value = (value << 8) | i64::from(byte);
                }
                Value::Integer(value)
            }
            7 => {
                let mut raw = [0u8; 8];
                raw.copy_from_slice(bytes);
                Value::Real(f64::from_be_bytes(raw))
            }
            n if n % 2 == 0 => Value::Blob(bytes.to_vec()),
            _ => Value::Text(String::from_utf8(bytes.to_vec()).ok()?),
        });
    }
    (body == payload.len()).then_some(values)
}

enum Table {
    Label,
    Text,
}

/// Which table a record is a row of, by its columns' types; label masses stored as
/// integers (SQLite keeps whole reals that way on disk) are turned back into reals.
fn classify(mut values: Vec<Value>) -> Option<(Table, Vec<Value>)> {
    let text = |v: &Value| matches!(v, Value::Text(_));
    match values.as_slice() {
        [a, b, c, d, Value::Blob(logprobs), mass, Value::Integer(_)]
            if [a, b, c, d].into_iter().all(text)
                && !logprobs.is_empty()
                && logprobs.len() % 8 == 0 =>
        {
            let mass = match mass {
                Value::Real(x) => *x,
                Value::Integer(n) => *n as f64,
                _ => return None,
            };
            values[5] = Value::Real(mass);
            Some((Table::Label, values))
        }
        [a, b, c, d] if [a, b, c, d].into_iter().all(text) => Some((Table::Text, values)),
        _ => None,
    }
}

/// Entries of the pages a write-ahead log holds (frames whose header is consistent).
fn scan_wal(wal: &[u8], layout: &Layout, out: &mut PageScan) {
    if wal.len() < WAL_HEADER {
        return;
    }
    let page_size = be32(&wal[8..12]);
    if page_size != layout.page_size {
        return;
    }
    let mut ignored = PageScan::default();
    let mut claimed = HashSet::new();
    // An entry of the log whose payload overflows is left out: its overflow pages may be
    // in the log or in the file, in a version of another time.
    let no_overflow = |_: usize| -> Option<&'static [u8]> { None };
    let frame = WAL_FRAME_HEADER + page_size;
    let mut at = WAL_HEADER;
    while at + frame <= wal.len() {
        let number = be32(&wal[at..at + 4]);
        let bytes = &wal[at + WAL_FRAME_HEADER..at + frame];
        if number >= 1 {
            let kind = read_page(
                bytes,
                number,
                layout,
                &no_overflow,
                &mut ignored,
                &mut claimed,
            );
            if matches!(kind, PageKind::Entries) {
                out.label_rows.append(&mut ignored.label_rows);
                out.text_rows.append(&mut ignored.text_rows);
            }
        }
        at += frame;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_records_decode_as_the_format_says() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0xff; 9]), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x80]), None);
        // Header of 4 bytes: text "ab" (17), integer 1 byte (1), constant one (9).
        let record_bytes = [4, 17, 1, 9, b'a', b'b', 0xfe];
        assert_eq!(
            record(&record_bytes),
            Some(vec![
                Value::Text("ab".into()),
                Value::Integer(-2),
                Value::Integer(1)
            ])
        );
        // One byte too many, one too few, a reserved serial type.
        assert_eq!(record(&[4, 17, 1, 9, b'a', b'b', 0xfe, 0]), None);
        assert_eq!(record(&[4, 17, 1, 9, b'a', b'b']), None);
        assert_eq!(record(&[2, 10]), None);
    }
}
