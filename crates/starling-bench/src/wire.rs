//! What the load tools read and check: files of encoded request messages, and the answers every
//! response is held to.
//!
//! A request file holds each message as a little-endian `u32` length and that many protobuf
//! bytes (written by `grpc-requests` and `compare-requests`). An answers file (written by
//! `compare/content.mjs` from answers it checked against the data) has one line per message:
//! the hex SHA-256 of the exact bytes its response must have; `unordered HEX`, the SHA-256 of
//! the response's canonical form ([`canonical`]), for answers whose element order no query
//! fixes; or `-` when no answer was verified, so no response is right. An expectations file
//! (`FIELD m|p COUNT` per message) gives only the size of each response.

use std::path::Path;

use sha2::{Digest as _, Sha256};

/// A SHA-256 digest of a response's bytes.
pub type Digest = [u8; 32];

/// Why a request, answers or expectations file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The failure.
        source: std::io::Error,
    },
    /// The file's bytes or a line of it are not what its kind holds.
    #[error("{path}: {what}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong, with the line where there is one.
        what: String,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, WireError> {
    std::fs::read(path).map_err(|source| WireError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn malformed(path: &Path, what: String) -> WireError {
    WireError::Malformed {
        path: path.display().to_string(),
        what,
    }
}

/// Reads a file of length-prefixed request messages; it must hold at least one.
pub fn read_messages(path: &Path) -> Result<Vec<Vec<u8>>, WireError> {
    let data = read(path)?;
    let mut rest = data.as_slice();
    let mut messages = Vec::new();
    while !rest.is_empty() {
        let (prefix, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| malformed(path, "truncated length prefix".into()))?;
        let len = u32::from_le_bytes(*prefix) as usize;
        if tail.len() < len {
            return Err(malformed(
                path,
                format!("message of {len} bytes runs past the end"),
            ));
        }
        let (message, tail) = tail.split_at(len);
        messages.push(message.to_vec());
        rest = tail;
    }
    if messages.is_empty() {
        return Err(malformed(path, "no messages".into()));
    }
    Ok(messages)
}

/// What the response to one request message must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// No answer to the message was verified (`-`): no response is right.
    Unknown,
    /// The digest of the exact bytes.
    Exact(Digest),
    /// The digest of the canonical form ([`canonical`]).
    Unordered(Digest),
}

impl Answer {
    /// Whether a response is the expected one, and the digest it was compared by (zero when
    /// it did not parse for its canonical form).
    pub fn check(&self, response: &[u8]) -> (bool, Digest) {
        match self {
            Answer::Unknown => (false, digest(response)),
            Answer::Exact(want) => {
                let got = digest(response);
                (got == *want, got)
            }
            Answer::Unordered(want) => match canonical(response) {
                Some(form) => {
                    let got = digest(&form);
                    (got == *want, got)
                }
                None => (false, [0; 32]),
            },
        }
    }
}

/// The SHA-256 of a response's bytes.
pub fn digest(response: &[u8]) -> Digest {
    Sha256::digest(response).into()
}

/// Lowercase hex of a digest.
pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Option<Digest> {
    let text = text.as_bytes();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0; 32];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// Reads an answers file (see the module's description).
pub fn read_answers(path: &Path) -> Result<Vec<Answer>, WireError> {
    let data = read(path)?;
    let text = String::from_utf8_lossy(&data);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    text.split('\n')
        .enumerate()
        .map(|(n, line)| {
            if line == "-" {
                return Ok(Answer::Unknown);
            }
            let (hex, unordered) = match line.strip_prefix("unordered ") {
                Some(hex) => (hex, true),
                None => (line, false),
            };
            let digest = unhex(hex).ok_or_else(|| {
                malformed(
                    path,
                    format!("{}: not `[unordered ]SHA256HEX` or `-`: {line:?}", n + 1),
                )
            })?;
            Ok(if unordered {
                Answer::Unordered(digest)
            } else {
                Answer::Exact(digest)
            })
        })
        .collect()
}

/// One response's expected size: how many elements its top-level field `field` holds, counting
/// messages or, when `packed`, the values of a packed repeated integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expectation {
    /// The field's number.
    pub field: u64,
    /// Whether the field is a packed repeated integer.
    pub packed: bool,
    /// How many elements it holds.
    pub count: usize,
}

/// Reads an expectations file: one `FIELD m|p COUNT` line per message.
pub fn read_expectations(path: &Path) -> Result<Vec<Expectation>, WireError> {
    let data = read(path)?;
    let text = String::from_utf8_lossy(&data);
    text.trim()
        .split('\n')
        .enumerate()
        .map(|(n, line)| {
            let bad = || malformed(path, format!("{}: not `FIELD m|p COUNT`: {line:?}", n + 1));
            let mut words = line.split_whitespace();
            let (Some(field), Some(kind), Some(count), None) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return Err(bad());
            };
            let packed = match kind {
                "m" => false,
                "p" => true,
                _ => return Err(bad()),
            };
            Ok(Expectation {
                field: field.parse().map_err(|_| bad())?,
                packed,
                count: count.parse().map_err(|_| bad())?,
            })
        })
        .collect()
}

fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// One top-level field of a protobuf message: its key, its whole encoding, and for a
/// length-delimited field its payload.
struct Field<'a> {
    key: u64,
    encoded: &'a [u8],
    payload: &'a [u8],
}

/// Splits a protobuf message into its top-level fields, or `None` if it does not parse.
fn fields(mut message: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut out = Vec::new();
    while !message.is_empty() {
        let (key, key_len) = varint(message)?;
        let after_key = message.get(key_len..)?;
        let (header, payload_len) = match key & 7 {
            0 => (varint(after_key)?.1, 0),
            1 => (0, 8),
            5 => (0, 4),
            2 => {
                let (len, n) = varint(after_key)?;
                (n, usize::try_from(len).ok()?)
            }
            _ => return None,
        };
        let size = key_len.checked_add(header)?.checked_add(payload_len)?;
        let encoded = message.get(..size)?;
        let payload = if key & 7 == 2 {
            encoded.get(key_len + header..)?
        } else {
            &[]
        };
        out.push(Field {
            key,
            encoded,
            payload,
        });
        message = message.get(size..)?;
    }
    Some(out)
}

/// The response with the fields of each element of its top-level field 1 sorted by their
/// encoded bytes (the elements keep their order and sizes), or `None` if it does not parse.
/// Two answers that differ only in the order of an element's repeated values, such as the
/// known followers of one target in GetFollowsFollowing, have one canonical form.
pub fn canonical(response: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(response.len());
    for field in fields(response)? {
        if field.key != (1 << 3 | 2) {
            out.extend_from_slice(field.encoded);
            continue;
        }
        let mut inner = fields(field.payload)?;
        inner.sort_by(|a, b| a.encoded.cmp(b.encoded));
        let header = field.encoded.len() - field.payload.len();
        out.extend_from_slice(field.encoded.get(..header)?);
        for element in inner {
            out.extend_from_slice(element.encoded);
        }
    }
    Some(out)
}

/// How many elements a response's top-level field holds (see [`Expectation`]), or `None` if it
/// does not parse.
pub fn count_field(response: &[u8], field: u64, packed: bool) -> Option<usize> {
    let mut count = 0;
    for top in fields(response)? {
        if top.key >> 3 != field || matches!(top.key & 7, 1 | 5) {
            continue;
        }
        if !packed || top.key & 7 != 2 {
            count += 1;
            continue;
        }
        let mut values = top.payload;
        while !values.is_empty() {
            let (_, n) = varint(values)?;
            values = values.get(n..)?;
            count += 1;
        }
    }
    Some(count)
}

/// The elements of a response's top-level field 1, each as the string of its own field 1,
/// followed by `<` and its field 3 when it has one (a feed item's post and repost URIs); `?`
/// for an element that does not parse. `None` if the response does not parse.
pub fn element_uris(response: &[u8]) -> Option<Vec<String>> {
    let elements = fields(response)?.into_iter().filter(|f| f.key >> 3 == 1);
    Some(
        elements
            .map(|element| {
                let Some(inner) = fields(element.payload) else {
                    return "?".to_owned();
                };
                let text = |number| {
                    inner
                        .iter()
                        .rfind(|f| f.key >> 3 == number)
                        .map(|f| String::from_utf8_lossy(f.payload).into_owned())
                        .unwrap_or_default()
                };
                let (uri, repost) = (text(1), text(3));
                if repost.is_empty() {
                    uri
                } else {
                    format!("{uri}<{repost}")
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // GetFollowsFollowingResponse { results { target_did "t", dids ["a", "b"] } }, and the same
    // with the DIDs the other way round.
    const AB: &[u8] = &[
        0x0a, 0x09, 0x0a, 0x01, b't', 0x12, 0x01, b'a', 0x12, 0x01, b'b',
    ];
    const BA: &[u8] = &[
        0x0a, 0x09, 0x0a, 0x01, b't', 0x12, 0x01, b'b', 0x12, 0x01, b'a',
    ];

    // An answers file's three kinds of line hold a response to what they say: the exact
    // bytes, the bytes up to the order of an element's fields, or nothing.
    #[test]
    fn answers_hold_responses_to_what_they_say() {
        assert_eq!(canonical(BA).as_deref(), Some(AB));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("set.answers");
        let text = format!("{}\nunordered {}\n-\n", hex(&digest(AB)), hex(&digest(AB)));
        std::fs::write(&path, text).unwrap();
        let answers = read_answers(&path).unwrap();
        assert_eq!(answers.len(), 3);
        let cases: [(usize, &[u8], bool); 6] = [
            (0, AB, true),
            (0, BA, false),
            (1, AB, true),
            (1, BA, true),
            (1, &AB[..5], false),
            (2, AB, false),
        ];
        for (line, response, want) in cases {
            assert_eq!(
                answers[line].check(response).0,
                want,
                "line {line}, {response:x?}"
            );
        }
        std::fs::write(&path, format!("{}\n", &hex(&digest(AB))[1..])).unwrap();
        assert!(read_answers(&path).is_err(), "a 63-digit digest was read");
    }

    // Sizes and URIs read from a response agree with how it was built.
    #[test]
    fn counts_and_uris_follow_the_encoding() {
        assert_eq!(count_field(AB, 1, false), Some(1));
        assert_eq!(count_field(AB, 2, false), Some(0));
        // Field 4 packed: [1, 300, 2].
        let packed = [0x22, 0x04, 0x01, 0xac, 0x02, 0x02];
        assert_eq!(count_field(&packed, 4, true), Some(3));
        assert_eq!(count_field(&packed[..5], 4, true), None);
        // Two feed items: {1: "p"} and {1: "q", 3: "r"}.
        let feed = [
            0x0a, 0x03, 0x0a, 0x01, b'p', 0x0a, 0x06, 0x0a, 0x01, b'q', 0x1a, 0x01, b'r',
        ];
        assert_eq!(element_uris(&feed), Some(vec!["p".into(), "q<r".into()]));
    }

    // A request file round-trips, and a truncated one names what is wrong.
    #[test]
    fn request_files_are_length_prefixed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("set.bin");
        std::fs::write(&path, [2, 0, 0, 0, 7, 8, 0, 0, 0, 0]).unwrap();
        assert_eq!(read_messages(&path).unwrap(), vec![vec![7, 8], vec![]]);
        std::fs::write(&path, [3, 0, 0, 0, 7]).unwrap();
        let err = read_messages(&path).unwrap_err().to_string();
        assert!(err.contains("runs past the end"), "{err}");
        std::fs::write(&path, []).unwrap();
        assert!(read_messages(&path).is_err());
    }
}
