//! The one metadata value candle's GGUF reader trusts before it can be checked:
//! `general.alignment`, which it divides by while it parses (a zero would panic there). This
//! walk over the metadata finds it, skipping every other value by its declared size, so a zero
//! is refused before candle reads the file. Everything else is read and checked after candle's
//! parse ([`crate::gguf::GgufFile::open`]).

use std::io::{Read, Seek, SeekFrom};

/// Deepest array nesting walked (arrays of arrays); a file nesting deeper is left to candle.
const MAX_DEPTH: usize = 4;

/// Metadata entries walked at most (a header declaring more is left to candle, which refuses
/// counts beyond what the file can hold).
const MAX_ENTRIES: u64 = 1 << 20;

/// `general.alignment` as candle will read it: `Ok(Some(a))` for the value of a key of an
/// unsigned or non-negative signed type of up to 32 bits, `Ok(None)` when the key is absent or
/// of another type (candle then uses its default of 32) or when the walk cannot finish
/// (candle's parse then reports the damage itself). The last of repeated keys counts, as in
/// candle. Reads from the start of `reader` and leaves it there.
pub(crate) fn declared_alignment(reader: &mut (impl Read + Seek)) -> std::io::Result<Option<u64>> {
    reader.seek(SeekFrom::Start(0))?;
    let found = walk(reader).unwrap_or(None);
    reader.seek(SeekFrom::Start(0))?;
    Ok(found)
}

/// The walk; any read error (a short file) ends it with `Err`.
fn walk(r: &mut impl Read) -> std::io::Result<Option<u64>> {
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic)?;
    if &magic != b"GGUF" {
        return Ok(None);
    }
    let version = u32_of(r)?;
    // Version 1 writes counts and string lengths as u32; later versions as u64.
    let wide = match version {
        1 => false,
        2 | 3 => true,
        _ => return Ok(None),
    };
    let _tensors = len_of(r, wide)?;
    let entries = len_of(r, wide)?;
    // candle keeps the last of repeated keys.
    let mut found = None;
    for _ in 0..entries.min(MAX_ENTRIES) {
        let key_len = len_of(r, wide)?;
        if key_len != "general.alignment".len() as u64 {
            skip(r, key_len)?;
            let kind = u32_of(r)?;
            skip_value(r, kind, wide, 0)?;
            continue;
        }
        let mut key = [0u8; 17];
        r.read_exact(&mut key)?;
        let kind = u32_of(r)?;
        if &key != b"general.alignment" {
            skip_value(r, kind, wide, 0)?;
            continue;
        }
        found = match kind {
            0 => Some(u64::from(byte(r)?)),
            1 => u64::try_from(byte(r)? as i8).ok(),
            2 => Some(u64::from(u16::from_le_bytes(bytes(r)?))),
            3 => u64::try_from(i16::from_le_bytes(bytes(r)?)).ok(),
            4 => Some(u64::from(u32_of(r)?)),
            5 => u64::try_from(i32::from_le_bytes(bytes(r)?)).ok(),
            _ => {
                skip_value(r, kind, wide, 0)?;
                None
            }
        };
    }
    Ok(found)
}

/// Skips one value of GGUF type `kind`.
fn skip_value(r: &mut impl Read, kind: u32, wide: bool, depth: usize) -> std::io::Result<()> {
    match kind {
        0 | 1 | 7 => skip(r, 1),
        2 | 3 => skip(r, 2),
        4..=6 => skip(r, 4),
        10..=12 => skip(r, 8),
        8 => {
            let n = len_of(r, wide)?;
            skip(r, n)
        }
        9 if depth < MAX_DEPTH => {
            let element = u32_of(r)?;
            let n = len_of(r, wide)?;
            match element {
                0 | 1 | 7 => skip(r, n),
                2 | 3 => skip(r, n.saturating_mul(2)),
                4..=6 => skip(r, n.saturating_mul(4)),
                10..=12 => skip(r, n.saturating_mul(8)),
                _ => {
                    for _ in 0..n.min(MAX_ENTRIES) {
                        skip_value(r, element, wide, depth + 1)?;
                    }
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

fn bytes<const N: usize>(r: &mut impl Read) -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn byte(r: &mut impl Read) -> std::io::Result<u8> {
    Ok(bytes::<1>(r)?[0])
}

fn u32_of(r: &mut impl Read) -> std::io::Result<u32> {
    Ok(u32::from_le_bytes(bytes(r)?))
}

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

    /// A version-3 header with `entries` (key, type, value bytes).
    fn header(entries: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend((entries.len() as u64).to_le_bytes());
        for (key, kind, value) in entries {
            b.extend((key.len() as u64).to_le_bytes());
            b.extend(key.as_bytes());
            b.extend(kind.to_le_bytes());
            b.extend(value);
        }
        b
    }

    fn string(s: &str) -> Vec<u8> {
        let mut b = (s.len() as u64).to_le_bytes().to_vec();
        b.extend(s.as_bytes());
        b
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
        assert_eq!(declared_alignment(&mut r).unwrap(), Some(0));
        assert_eq!(
            r.position(),
            0,
            "the reader is left at the start for candle"
        );
    }

    #[test]
    fn types_candle_ignores_and_damage_give_none() {
        let wide = header(&[("general.alignment", 10, 64u64.to_le_bytes().to_vec())]);
        assert_eq!(declared_alignment(&mut Cursor::new(wide)).unwrap(), None);
        let negative = header(&[("general.alignment", 5, (-8i32).to_le_bytes().to_vec())]);
        assert_eq!(
            declared_alignment(&mut Cursor::new(negative)).unwrap(),
            None
        );
        let mut short = header(&[("general.alignment", 4, 16u32.to_le_bytes().to_vec())]);
        assert_eq!(
            declared_alignment(&mut Cursor::new(short.clone())).unwrap(),
            Some(16)
        );
        short.truncate(short.len() - 2);
        assert_eq!(declared_alignment(&mut Cursor::new(short)).unwrap(), None);
        assert_eq!(
            declared_alignment(&mut Cursor::new(b"GGML".to_vec())).unwrap(),
            None
        );
    }
}
