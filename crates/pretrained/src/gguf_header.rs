//! A walk over a GGUF header (metadata and tensor index) before candle's GGUF reader parses it,
//! for what candle trusts or drops silently: `general.alignment`, which it divides by while it
//! parses (a zero would panic there), and names given twice (a metadata key or a tensor name:
//! candle keeps the last in a map). Every value is skipped by its declared size; the rest is
//! read and checked after candle's parse ([`crate::gguf::GgufFile::open`]).

use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom};

/// Deepest array nesting walked (arrays of arrays), candle's limit.
const MAX_DEPTH: usize = 64;

/// Metadata entries, tensors and array elements walked at most, and the longest name read
/// (candle's limits: a header declaring more is left to candle, which refuses it).
const MAX_COUNT: u64 = 1 << 30;

/// Dimensions of a tensor at most (candle's limit).
const MAX_DIMS: u32 = 4;

/// What the walk over a GGUF header found. Every field but `version` is None when the walk
/// could not finish (candle's parse then reports the damage itself).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Header {
    /// The format version, whenever the file starts with GGUF's magic (read before the walk,
    /// so that a version ropelab does not read is refused as such, not as the garbage its
    /// layout makes of the rest).
    pub(crate) version: Option<u32>,
    /// `general.alignment` as candle will read it: the value of a key of an unsigned or
    /// non-negative signed type of up to 32 bits; None when the key is absent or of another
    /// type (candle then uses its default of 32).
    pub(crate) alignment: Option<u64>,
    /// The first metadata key given twice, as candle names it.
    pub(crate) repeated_key: Option<String>,
    /// The first tensor name given twice, as candle names it.
    pub(crate) repeated_tensor: Option<String>,
    /// The first tensor whose GGML type candle does not read, with that type (found even when
    /// the walk stops later, at damage further on).
    pub(crate) unknown_type: Option<(String, u32)>,
    /// The first key, string value (`key` or `key[i]`) or tensor name whose bytes are not
    /// UTF-8, which GGUF requires (candle replaces such bytes with U+FFFD silently).
    pub(crate) not_utf8: Option<String>,
}

/// The GGML types candle's reader knows (F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, the K
/// quants Q2_K to Q8_K, BF16).
const KNOWN_TYPES: [u32; 15] = [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 30];

/// Walks the header of the GGUF file in `reader`, from its start, and leaves the reader there.
pub(crate) fn scan(reader: &mut (impl Read + Seek)) -> std::io::Result<Header> {
    reader.seek(SeekFrom::Start(0))?;
    let version = version_of(reader).ok().flatten();
    let mut found = match version {
        Some(v) => {
            let mut types = None;
            let mut header = walk(reader, v, &mut types).unwrap_or_default();
            header.unknown_type = types;
            header
        }
        None => Header::default(),
    };
    found.version = version;
    reader.seek(SeekFrom::Start(0))?;
    Ok(found)
}

/// The version of a file starting with GGUF's magic (None for another magic).
fn version_of(r: &mut impl Read) -> std::io::Result<Option<u32>> {
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic)?;
    if &magic != b"GGUF" {
        return Ok(None);
    }
    Ok(Some(u32_of(r)?))
}

/// The walk after the magic and the version; any read error (a short file) or a count beyond
/// candle's limits ends it with `Err`.
fn walk(
    r: &mut impl Read,
    version: u32,
    unknown_type: &mut Option<(String, u32)>,
) -> std::io::Result<Header> {
    // Version 1 writes counts and string lengths as u32; later versions as u64.
    let wide = match version {
        1 => false,
        2 | 3 => true,
        _ => return Ok(Header::default()),
    };
    let tensors = count(len_of(r, wide)?)?;
    let entries = count(len_of(r, wide)?)?;
    let mut header = Header::default();
    let mut keys = HashSet::new();
    let mut not_utf8 = None;
    for _ in 0..entries {
        let (key, utf8) = name_of(r, wide)?;
        if !utf8 && not_utf8.is_none() {
            not_utf8 = Some(format!("the name of metadata key {key:?}"));
        }
        let kind = u32_of(r)?;
        let mut at = Place {
            key: &key,
            index: None,
            not_utf8: &mut not_utf8,
        };
        if key == "general.alignment" {
            // candle keeps the last of repeated keys (a repeat is refused anyway).
            header.alignment = match kind {
                0 => Some(u64::from(byte(r)?)),
                1 => u64::try_from(byte(r)? as i8).ok(),
                2 => Some(u64::from(u16::from_le_bytes(bytes(r)?))),
                3 => u64::try_from(i16::from_le_bytes(bytes(r)?)).ok(),
                4 => Some(u64::from(u32_of(r)?)),
                5 => u64::try_from(i32::from_le_bytes(bytes(r)?)).ok(),
                _ => {
                    skip_value(r, kind, wide, 0, &mut at)?;
                    None
                }
            };
        } else {
            skip_value(r, kind, wide, 0, &mut at)?;
        }
        if !keys.insert(key.clone()) && header.repeated_key.is_none() {
            header.repeated_key = Some(key);
        }
    }
    let mut names = HashSet::new();
    for _ in 0..tensors {
        let (name, utf8) = name_of(r, wide)?;
        if !utf8 && not_utf8.is_none() {
            not_utf8 = Some(format!("the name of tensor {name:?}"));
        }
        let dims = u32_of(r)?;
        if dims > MAX_DIMS {
            return Err(std::io::Error::other("too many dimensions"));
        }
        skip(r, u64::from(dims) * if wide { 8 } else { 4 })?;
        let kind = u32_of(r)?;
        if !KNOWN_TYPES.contains(&kind) && unknown_type.is_none() {
            *unknown_type = Some((name.clone(), kind));
        }
        skip(r, 8)?; // offset
        if !names.insert(name.clone()) && header.repeated_tensor.is_none() {
            header.repeated_tensor = Some(name);
        }
    }
    header.not_utf8 = not_utf8;
    Ok(header)
}

/// `n` if within [`MAX_COUNT`], else the end of the walk.
fn count(n: u64) -> std::io::Result<u64> {
    if n > MAX_COUNT {
        return Err(std::io::Error::other("count beyond candle's limit"));
    }
    Ok(n)
}

/// A name (metadata key or tensor name) as candle reads it: trailing NUL bytes dropped, bytes
/// that are not UTF-8 replaced; with whether its bytes were UTF-8.
fn name_of(r: &mut impl Read, wide: bool) -> std::io::Result<(String, bool)> {
    let n = count(len_of(r, wide)?)?;
    let mut raw = Vec::new();
    // Read as far as the file goes: a length beyond it allocates nothing of that size.
    r.take(n).read_to_end(&mut raw)?;
    if raw.len() as u64 != n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    while raw.last() == Some(&0) {
        raw.pop();
    }
    let utf8 = std::str::from_utf8(&raw).is_ok();
    Ok((String::from_utf8_lossy(&raw).into_owned(), utf8))
}

/// Where a value lies (its key, and its index in an array), for naming a string that is not
/// UTF-8; the first such place is kept in `not_utf8`.
struct Place<'a> {
    key: &'a str,
    index: Option<u64>,
    not_utf8: &'a mut Option<String>,
}

/// Reads `n` bytes a chunk at a time (a long string allocates no more than a chunk): whether
/// they are UTF-8. A file shorter than that ends the walk.
fn utf8_of(r: &mut impl Read, n: u64) -> std::io::Result<bool> {
    let mut valid = true;
    // The bytes of a character split across two chunks, kept for the next.
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut left = n;
    while left > 0 {
        let want = left.min(chunk.len() as u64) as usize;
        let got = r.read(&mut chunk[..want])?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        left -= got as u64;
        if valid {
            pending.extend_from_slice(&chunk[..got]);
            match std::str::from_utf8(&pending) {
                Ok(_) => pending.clear(),
                // An incomplete character at the end: kept for the next chunk.
                Err(e) if e.error_len().is_none() => {
                    pending.drain(..e.valid_up_to());
                }
                Err(_) => valid = false,
            }
        }
    }
    Ok(valid && pending.is_empty())
}

/// Skips one value of GGUF type `kind` at `at`, reading its strings' bytes to check they are
/// UTF-8.
fn skip_value(
    r: &mut impl Read,
    kind: u32,
    wide: bool,
    depth: usize,
    at: &mut Place<'_>,
) -> std::io::Result<()> {
    match kind {
        0 | 1 | 7 => skip(r, 1),
        2 | 3 => skip(r, 2),
        4..=6 => skip(r, 4),
        10..=12 => skip(r, 8),
        8 => {
            let n = count(len_of(r, wide)?)?;
            if !utf8_of(r, n)? && at.not_utf8.is_none() {
                *at.not_utf8 = Some(match at.index {
                    Some(i) => format!("{}[{i}]", at.key),
                    None => at.key.to_owned(),
                });
            }
            Ok(())
        }
        9 if depth < MAX_DEPTH => {
            let element = u32_of(r)?;
            let n = count(len_of(r, wide)?)?;
            match element {
                0 | 1 | 7 => skip(r, n),
                2 | 3 => skip(r, n * 2),
                4..=6 => skip(r, n * 4),
                10..=12 => skip(r, n * 8),
                _ => {
                    // The outermost array's index names the element.
                    let outer = at.index;
                    for i in 0..n {
                        at.index = outer.or(Some(i));
                        skip_value(r, element, wide, depth + 1, at)?;
                    }
                    at.index = outer;
                    Ok(())
                }
            }
        }
        _ => Err(std::io::Error::other("unknown or too deep value type")),
    }
}

/// Skips `n` bytes; a file shorter than that ends the walk.
fn skip(r: &mut impl Read, n: u64) -> std::io::Result<()> {
    let skipped = std::io::copy(&mut r.take(n), &mut std::io::sink())?;
    if skipped == n {
        Ok(())
    } else {
        Err(std::io::ErrorKind::UnexpectedEof.into())
    }
}

/// The next `N` bytes.
fn bytes<const N: usize>(r: &mut impl Read) -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

/// The next byte.
fn byte(r: &mut impl Read) -> std::io::Result<u8> {
    Ok(bytes::<1>(r)?[0])
}

/// The next little-endian u32.
fn u32_of(r: &mut impl Read) -> std::io::Result<u32> {
    Ok(u32::from_le_bytes(bytes(r)?))
}

/// The next count or length: a u64 (`wide`, versions 2 and 3) or a u32 (version 1).
fn len_of(r: &mut impl Read, wide: bool) -> std::io::Result<u64> {
    if wide {
        Ok(u64::from_le_bytes(bytes(r)?))
    } else {
        Ok(u64::from(u32_of(r)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A version-3 header with `entries` (key, type, value bytes) and `tensors` (name, dims).
    fn file(entries: &[(&str, u32, Vec<u8>)], tensors: &[(&str, &[u64])]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((tensors.len() as u64).to_le_bytes());
        b.extend((entries.len() as u64).to_le_bytes());
        for (key, kind, value) in entries {
            b.extend(string(key));
            b.extend(kind.to_le_bytes());
            b.extend(value);
        }
        for (name, dims) in tensors {
            b.extend(string(name));
            b.extend((dims.len() as u32).to_le_bytes());
            for d in *dims {
                b.extend(d.to_le_bytes());
            }
            b.extend(0u32.to_le_bytes());
            b.extend(0u64.to_le_bytes());
        }
        b
    }

    /// A version-3 header with `entries` and no tensors.
    fn header(entries: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        file(entries, &[])
    }

    fn string(s: &str) -> Vec<u8> {
        let mut b = (s.len() as u64).to_le_bytes().to_vec();
        b.extend(s.as_bytes());
        b
    }

    fn alignment(bytes: Vec<u8>) -> Option<u64> {
        scan(&mut Cursor::new(bytes)).unwrap().alignment
    }

    #[test]
    fn the_alignment_is_found_after_values_of_every_kind() {
        let mut array = 8u32.to_le_bytes().to_vec();
        array.extend(2u64.to_le_bytes());
        array.extend(string("a"));
        array.extend(string("bcd"));
        let mut ints = 5u32.to_le_bytes().to_vec();
        ints.extend(3u64.to_le_bytes());
        ints.extend([0u8; 12]);
        let file = header(&[
            ("general.name", 8, string("x")),
            ("tokens", 9, array),
            ("ids", 9, ints),
            ("general.alignmenX", 4, 7u32.to_le_bytes().to_vec()),
            ("f", 12, 1.5f64.to_le_bytes().to_vec()),
            ("general.alignment", 4, 0u32.to_le_bytes().to_vec()),
        ]);
        let mut r = Cursor::new(file);
        assert_eq!(scan(&mut r).unwrap().alignment, Some(0));
        assert_eq!(
            r.position(),
            0,
            "the reader is left at the start for candle"
        );
    }

    fn raw_string(b: &[u8]) -> Vec<u8> {
        let mut v = (b.len() as u64).to_le_bytes().to_vec();
        v.extend(b);
        v
    }

    fn not_utf8(bytes: Vec<u8>) -> Option<String> {
        scan(&mut Cursor::new(bytes)).unwrap().not_utf8
    }

    #[test]
    fn strings_that_are_not_utf8_are_named_where_they_lie() {
        let mut tokens = 8u32.to_le_bytes().to_vec();
        tokens.extend(3u64.to_le_bytes());
        tokens.extend(string("a"));
        tokens.extend(string("é"));
        tokens.extend(raw_string(&[b'x', 0xff]));
        let file = header(&[("general.name", 8, string("x")), ("tokens", 9, tokens)]);
        assert_eq!(not_utf8(file).as_deref(), Some("tokens[2]"));
        let value = header(&[("general.name", 8, raw_string(&[0xc3]))]);
        assert_eq!(not_utf8(value).as_deref(), Some("general.name"));
        // A character split across the walk's chunks is whole (8192 bytes, then 2 of "é").
        let mut long = vec![b'a'; 8191];
        long.extend("é".as_bytes());
        assert_eq!(not_utf8(header(&[("k", 8, raw_string(&long))])), None);
        let mut cut = vec![b'a'; 8191];
        cut.push(0xc3);
        assert_eq!(
            not_utf8(header(&[("k", 8, raw_string(&cut))])).as_deref(),
            Some("k")
        );
        let mut key = 1u64.to_le_bytes().to_vec();
        key.push(0xfe);
        let mut named = b"GGUF".to_vec();
        named.extend(3u32.to_le_bytes());
        named.extend(0u64.to_le_bytes());
        named.extend(1u64.to_le_bytes());
        named.extend(key);
        named.extend(4u32.to_le_bytes());
        named.extend(1u32.to_le_bytes());
        assert!(not_utf8(named)
            .unwrap()
            .starts_with("the name of metadata key"));
        let clean = header(&[("general.name", 8, string("llama é"))]);
        assert_eq!(not_utf8(clean), None);
    }

    #[test]
    fn types_candle_ignores_and_damage_give_none() {
        let wide = header(&[("general.alignment", 10, 64u64.to_le_bytes().to_vec())]);
        assert_eq!(alignment(wide), None);
        let negative = header(&[("general.alignment", 5, (-8i32).to_le_bytes().to_vec())]);
        assert_eq!(alignment(negative), None);
        let mut short = header(&[("general.alignment", 4, 16u32.to_le_bytes().to_vec())]);
        assert_eq!(alignment(short.clone()), Some(16));
        short.truncate(short.len() - 2);
        assert_eq!(alignment(short), None);
        assert_eq!(alignment(b"GGML".to_vec()), None);
    }

    /// A key or tensor name given twice is found, also when the two spellings differ only in
    /// what candle drops (trailing NUL bytes); distinct names are not.
    #[test]
    fn names_given_twice_are_found() {
        let one = |v: u32| v.to_le_bytes().to_vec();
        let clean = file(
            &[("a.b", 4, one(1)), ("a.c", 4, one(2))],
            &[("t.weight", &[4, 2]), ("u.weight", &[4])],
        );
        let found = scan(&mut Cursor::new(clean)).unwrap();
        assert_eq!(
            found,
            Header {
                version: Some(3),
                ..Header::default()
            }
        );
        let keys = file(
            &[("a.b", 4, one(1)), ("a.c", 4, one(2)), ("a.b\0", 6, one(3))],
            &[],
        );
        let found = scan(&mut Cursor::new(keys)).unwrap();
        assert_eq!(found.repeated_key.as_deref(), Some("a.b"));
        let tensors = file(&[], &[("t.weight", &[4]), ("t.weight", &[2, 2])]);
        let found = scan(&mut Cursor::new(tensors)).unwrap();
        assert_eq!(found.repeated_tensor.as_deref(), Some("t.weight"));
        assert_eq!(found.repeated_key, None);
    }

    /// The version is found whenever the magic is GGUF's, also where the rest of the header
    /// cannot be walked (a version-1 file read with version 3's layout; adversarial pass 5,
    /// U4); another magic has none.
    #[test]
    fn the_version_is_found_before_the_walk() {
        let mut v1 = header(&[("general.alignment", 4, 32u32.to_le_bytes().to_vec())]);
        v1[4..8].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(scan(&mut Cursor::new(v1)).unwrap().version, Some(1));
        let mut v9 = header(&[]);
        v9[4..8].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(scan(&mut Cursor::new(v9)).unwrap().version, Some(9));
        assert_eq!(
            scan(&mut Cursor::new(b"GGUF".to_vec())).unwrap().version,
            None
        );
        assert_eq!(
            scan(&mut Cursor::new(b"GGMLxxxx".to_vec()))
                .unwrap()
                .version,
            None
        );
    }
}
