//! `com.atproto.label.subscribeLabels` frames: a small DAG-CBOR reader (the subset a frame
//! uses: integers, strings, bytes, arrays, maps, booleans, null, CID links) and the canonical
//! DAG-CBOR encoding of a label without its signature, which is what a labeler signs.
//!
//! A frame is two CBOR values back to back: a header `{op, t}` and a body. `op: 1, t: #labels`
//! carries `{seq, labels: [label]}`; `t: #info` carries `{name, message}`; `op: -1` is an
//! error `{error, message}`. Anything else, a value nested too deep, a length past the frame,
//! or trailing bytes is a [`FrameError`] naming what is wrong.

use crate::syntax::{
    is_valid_at_uri, is_valid_cid, is_valid_datetime, is_valid_did, parse_datetime_micros,
};

/// Nesting depth of a frame's values at most.
pub const FRAME_DEPTH_MAX: usize = 16;
/// Bytes of one frame at most (a labeler's frames carry a few labels each).
pub const FRAME_BYTES_MAX: usize = 1 << 20;
/// Bytes of a label value at most (the lexicon's `maxLength`).
pub const LABEL_VALUE_BYTES_MAX: usize = 128;

/// A decoded CBOR value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// An integer.
    Int(i64),
    /// A byte string.
    Bytes(Vec<u8>),
    /// A text string.
    Text(String),
    /// An array.
    Array(Vec<Value>),
    /// A map with text keys, in the order read.
    Map(Vec<(String, Value)>),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// A CID link (tag 42), its bytes after the multibase prefix.
    Link(Vec<u8>),
    /// A float (DAG-CBOR's 64-bit ones).
    Float(f64),
}

impl Value {
    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn text(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(Value::Text(text)) => Some(text),
            _ => None,
        }
    }
}

/// Why a frame was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The bytes are not the CBOR a frame is made of.
    #[error("frame is not DAG-CBOR: {0}")]
    Cbor(&'static str),
    /// The header or body lacks a field or has one of the wrong kind.
    #[error("frame field `{0}` is missing or malformed")]
    Field(&'static str),
    /// A label does not follow `com.atproto.label.defs#label`.
    #[error("label field `{0}` is missing or malformed")]
    Label(&'static str),
    /// The frame is over [`FRAME_BYTES_MAX`].
    #[error("frame is {0} bytes, over the {FRAME_BYTES_MAX}-byte limit")]
    TooLarge(usize),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], FrameError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(FrameError::Cbor("a length past the end of the frame"))?;
        let res = self.bytes.get(self.at..end).unwrap_or_default();
        self.at = end;
        Ok(res)
    }

    fn argument(&mut self, info: u8) -> Result<u64, FrameError> {
        Ok(match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.take(1)?.first().copied().unwrap_or_default()),
            25 => u64::from(u16::from_be_bytes(
                self.take(2)?.try_into().unwrap_or_default(),
            )),
            26 => u64::from(u32::from_be_bytes(
                self.take(4)?.try_into().unwrap_or_default(),
            )),
            27 => u64::from_be_bytes(self.take(8)?.try_into().unwrap_or_default()),
            _ => return Err(FrameError::Cbor("an indefinite or reserved length")),
        })
    }

    fn length(&mut self, info: u8) -> Result<usize, FrameError> {
        let n = self.argument(info)?;
        // Every item takes at least one byte: a count past the bytes left is malformed.
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.bytes.len() - self.at)
            .ok_or(FrameError::Cbor("a length past the end of the frame"))
    }

    fn value(&mut self, depth: usize) -> Result<Value, FrameError> {
        if depth > FRAME_DEPTH_MAX {
            return Err(FrameError::Cbor("nested too deep"));
        }
        let initial = *self.take(1)?.first().unwrap_or(&0);
        let (major, info) = (initial >> 5, initial & 0x1f);
        Ok(match major {
            0 => Value::Int(
                i64::try_from(self.argument(info)?)
                    .map_err(|_| FrameError::Cbor("integer range"))?,
            ),
            1 => Value::Int(
                -1 - i64::try_from(self.argument(info)?)
                    .map_err(|_| FrameError::Cbor("integer range"))?,
            ),
            2 => {
                let n = self.length(info)?;
                Value::Bytes(self.take(n)?.to_vec())
            }
            3 => {
                let n = self.length(info)?;
                let text = std::str::from_utf8(self.take(n)?)
                    .map_err(|_| FrameError::Cbor("text is not UTF-8"))?;
                Value::Text(text.to_owned())
            }
            4 => {
                let n = self.length(info)?;
                let mut items = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            5 => {
                let n = self.length(info)?;
                let mut entries = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    let Value::Text(key) = self.value(depth + 1)? else {
                        return Err(FrameError::Cbor("a map key that is not text"));
                    };
                    entries.push((key, self.value(depth + 1)?));
                }
                Value::Map(entries)
            }
            6 => match (self.argument(info)?, self.value(depth + 1)?) {
                (42, Value::Bytes(bytes)) if bytes.first() == Some(&0) => {
                    Value::Link(bytes.get(1..).unwrap_or_default().to_vec())
                }
                _ => return Err(FrameError::Cbor("a tag other than a CID link")),
            },
            _ => match info {
                20 => Value::Bool(false),
                21 => Value::Bool(true),
                22 => Value::Null,
                27 => Value::Float(f64::from_bits(self.argument(27)?)),
                _ => return Err(FrameError::Cbor("a simple value DAG-CBOR does not allow")),
            },
        })
    }
}

/// Appends a CBOR head: `major` type and argument `n`, in the shortest form.
fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let major = major << 5;
    match n {
        0..=23 => out.push(major | n as u8),
        24..=0xff => out.extend_from_slice(&[major | 24, n as u8]),
        0x100..=0xffff => {
            out.push(major | 25);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(major | 26);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(major | 27);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// Appends `value` in canonical DAG-CBOR: shortest heads, map keys by length then bytes.
pub fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Int(n) if *n >= 0 => head(out, 0, *n as u64),
        Value::Int(n) => head(out, 1, (-1 - *n) as u64),
        Value::Bytes(bytes) => {
            head(out, 2, bytes.len() as u64);
            out.extend_from_slice(bytes);
        }
        Value::Text(text) => {
            head(out, 3, text.len() as u64);
            out.extend_from_slice(text.as_bytes());
        }
        Value::Array(items) => {
            head(out, 4, items.len() as u64);
            for item in items {
                encode(item, out);
            }
        }
        Value::Map(entries) => {
            let mut sorted: Vec<&(String, Value)> = entries.iter().collect();
            sorted.sort_by(|a, b| (a.0.len(), a.0.as_bytes()).cmp(&(b.0.len(), b.0.as_bytes())));
            head(out, 5, sorted.len() as u64);
            for (key, value) in sorted {
                head(out, 3, key.len() as u64);
                out.extend_from_slice(key.as_bytes());
                encode(value, out);
            }
        }
        Value::Bool(false) => out.push(0xf4),
        Value::Bool(true) => out.push(0xf5),
        Value::Null => out.push(0xf6),
        Value::Link(bytes) => {
            head(out, 6, 42);
            head(out, 2, bytes.len() as u64 + 1);
            out.push(0);
            out.extend_from_slice(bytes);
        }
        Value::Float(f) => {
            out.push(0xfb);
            out.extend_from_slice(&f.to_bits().to_be_bytes());
        }
    }
}

/// A label as a labeler sent it, checked against the lexicon.
#[derive(Clone, Debug, PartialEq)]
pub struct SignedLabel {
    /// The labeler's DID.
    pub src: String,
    /// The subject: an AT-URI or a DID.
    pub uri: String,
    /// The subject record's CID (empty: none).
    pub cid: String,
    /// The value.
    pub val: String,
    /// A negation.
    pub neg: bool,
    /// Created at, as written.
    pub cts: String,
    /// Expires at, as written.
    pub exp: Option<String>,
    /// `exp` in microseconds since the Unix epoch.
    pub exp_us: Option<i64>,
    /// The signature (64 bytes `r ‖ s`).
    pub sig: Vec<u8>,
    /// The canonical DAG-CBOR of the label without `sig`: the bytes the signature covers.
    pub signed_bytes: Vec<u8>,
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// `#labels`: labels at sequence `seq`.
    Labels {
        /// The frame's sequence number: the cursor to resume after.
        seq: i64,
        /// Its labels.
        labels: Vec<SignedLabel>,
    },
    /// `#info` (for instance `OutdatedCursor`).
    Info {
        /// The info's name.
        name: String,
    },
    /// An error frame: the labeler closes the stream after it.
    Error {
        /// The error's name.
        error: String,
    },
    /// A message type this reader does not know (skipped, as the spec asks).
    Unknown,
}

/// Decodes one websocket message of `subscribeLabels`.
pub fn decode_frame(bytes: &[u8]) -> Result<Frame, FrameError> {
    if bytes.len() > FRAME_BYTES_MAX {
        return Err(FrameError::TooLarge(bytes.len()));
    }
    let mut reader = Reader { bytes, at: 0 };
    let header = reader.value(0)?;
    let body = reader.value(0)?;
    if reader.at != bytes.len() {
        return Err(FrameError::Cbor("trailing bytes after the body"));
    }
    match header.get("op") {
        Some(Value::Int(-1)) => {
            return Ok(Frame::Error {
                error: body.text("error").unwrap_or_default().to_owned(),
            });
        }
        Some(Value::Int(1)) => {}
        _ => return Err(FrameError::Field("op")),
    }
    match header.text("t").ok_or(FrameError::Field("t"))? {
        "#labels" => {
            let Some(Value::Int(seq)) = body.get("seq") else {
                return Err(FrameError::Field("seq"));
            };
            let Some(Value::Array(items)) = body.get("labels") else {
                return Err(FrameError::Field("labels"));
            };
            let labels = items.iter().map(label).collect::<Result<_, _>>()?;
            Ok(Frame::Labels { seq: *seq, labels })
        }
        "#info" => Ok(Frame::Info {
            name: body.text("name").unwrap_or_default().to_owned(),
        }),
        _ => Ok(Frame::Unknown),
    }
}

fn label(value: &Value) -> Result<SignedLabel, FrameError> {
    let Value::Map(entries) = value else {
        return Err(FrameError::Label("label"));
    };
    let text = |key: &'static str| value.text(key).ok_or(FrameError::Label(key));
    let src = text("src")?;
    if !is_valid_did(src) {
        return Err(FrameError::Label("src"));
    }
    let uri = text("uri")?;
    if !is_valid_at_uri(uri) && !is_valid_did(uri) {
        return Err(FrameError::Label("uri"));
    }
    let cid = match value.get("cid") {
        None => "",
        Some(Value::Text(cid)) if is_valid_cid(cid) => cid,
        Some(_) => return Err(FrameError::Label("cid")),
    };
    let val = text("val")?;
    if val.is_empty() || val.len() > LABEL_VALUE_BYTES_MAX {
        return Err(FrameError::Label("val"));
    }
    let neg = match value.get("neg") {
        None => false,
        Some(Value::Bool(neg)) => *neg,
        Some(_) => return Err(FrameError::Label("neg")),
    };
    let cts = text("cts")?;
    if !is_valid_datetime(cts) {
        return Err(FrameError::Label("cts"));
    }
    let (exp, exp_us) = match value.get("exp") {
        None => (None, None),
        Some(Value::Text(exp)) => {
            let micros = parse_datetime_micros(exp).ok_or(FrameError::Label("exp"))?;
            (Some(exp.clone()), Some(micros))
        }
        Some(_) => return Err(FrameError::Label("exp")),
    };
    let Some(Value::Bytes(sig)) = value.get("sig") else {
        return Err(FrameError::Label("sig"));
    };
    let unsigned = Value::Map(
        entries
            .iter()
            .filter(|(k, _)| k != "sig")
            .cloned()
            .collect(),
    );
    let mut signed_bytes = Vec::with_capacity(256);
    encode(&unsigned, &mut signed_bytes);
    Ok(SignedLabel {
        src: src.to_owned(),
        uri: uri.to_owned(),
        cid: cid.to_owned(),
        val: val.to_owned(),
        neg,
        cts: cts.to_owned(),
        exp,
        exp_us,
        sig: sig.clone(),
        signed_bytes,
    })
}

/// Encodes a frame from its header and body (for labelers written in Rust, and tests).
pub fn encode_frame(header: &Value, body: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    encode(header, &mut out);
    encode(body, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, Value)]) -> Value {
        Value::Map(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    }

    fn text(s: &str) -> Value {
        Value::Text(s.to_owned())
    }

    // Checks the encoder against bytes worked out by hand from RFC 8949 (shortest heads,
    // keys by length then bytes), and that decoding them gives the value back.
    #[test]
    fn canonical_encoding_round_trips() {
        let value = map(&[
            ("val", text("a")),
            ("ab", Value::Int(-2)),
            ("b", Value::Int(500)),
        ]);
        let mut out = Vec::new();
        encode(&value, &mut out);
        let want = [
            0xa3, 0x61, b'b', 0x19, 0x01, 0xf4, 0x62, b'a', b'b', 0x21, 0x63, b'v', b'a', b'l',
            0x61, b'a',
        ];
        assert_eq!(out, want);
        let mut reader = Reader { bytes: &out, at: 0 };
        let back = reader.value(0).unwrap();
        assert_eq!(
            back,
            map(&[
                ("b", Value::Int(500)),
                ("ab", Value::Int(-2)),
                ("val", text("a")),
            ])
        );
    }

    fn labels_frame(label: Value) -> Vec<u8> {
        encode_frame(
            &map(&[("op", Value::Int(1)), ("t", text("#labels"))]),
            &map(&[
                ("seq", Value::Int(7)),
                ("labels", Value::Array(vec![label])),
            ]),
        )
    }

    fn good_label() -> Vec<(&'static str, Value)> {
        vec![
            ("ver", Value::Int(1)),
            ("src", text("did:plc:labeler")),
            (
                "uri",
                text("at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaab2"),
            ),
            ("val", text("porn")),
            ("cts", text("2024-09-01T00:00:00.000Z")),
            ("sig", Value::Bytes(vec![1; 64])),
        ]
    }

    // Checks frames: a good one decodes with the signed bytes being the label without `sig`;
    // each kind of bad frame is an error naming what is wrong; no input panics.
    #[test]
    fn frames_decode_or_name_what_is_wrong() {
        let frame = decode_frame(&labels_frame(map(&good_label()))).unwrap();
        let Frame::Labels { seq, labels } = frame else {
            panic!("{frame:?}")
        };
        assert_eq!(seq, 7);
        let mut unsigned = good_label();
        unsigned.retain(|(k, _)| *k != "sig");
        let mut want = Vec::new();
        encode(&map(&unsigned), &mut want);
        assert_eq!(labels[0].signed_bytes, want);
        assert_eq!(labels[0].val, "porn");
        for (field, bad) in [
            ("src", text("labeler")),
            ("uri", text("https://example.com")),
            ("val", text("")),
            ("cts", text("yesterday")),
            ("neg", text("yes")),
            ("sig", text("x")),
        ] {
            let mut label = good_label();
            label.retain(|(k, _)| *k != field);
            label.push((field, bad));
            assert_eq!(
                decode_frame(&labels_frame(map(&label))),
                Err(FrameError::Label(field)),
                "{field}"
            );
        }
        let good = labels_frame(map(&good_label()));
        for len in 0..good.len() {
            assert!(decode_frame(&good[..len]).is_err(), "prefix of {len} bytes");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode_frame(&trailing).is_err());
        let deep = (0..40).fold(Value::Null, |v, _| Value::Array(vec![v]));
        assert_eq!(
            decode_frame(&encode_frame(&deep, &Value::Null)),
            Err(FrameError::Cbor("nested too deep"))
        );
        let error = encode_frame(
            &map(&[("op", Value::Int(-1))]),
            &map(&[("error", text("FutureCursor"))]),
        );
        assert_eq!(
            decode_frame(&error),
            Ok(Frame::Error {
                error: "FutureCursor".into()
            })
        );
    }
}
