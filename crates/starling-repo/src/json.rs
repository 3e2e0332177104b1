//! DAG-CBOR records to the JSON form of the atproto data model, as Jetstream carries them.
//!
//! The mapping (atproto data model spec, "JSON Representation"): a CID link becomes
//! `{"$link": "<base32 CID>"}`, a byte string `{"$bytes": "<base64, no padding>"}`, so a blob
//! (`{$type: "blob", ref: link, mimeType, size}`) gets `"ref": {"$link": …}`; integers stay
//! integers; floats are not part of the data model and are refused. Map keys come out in byte
//! order, as Jetstream writes them, so the same record gives the same JSON text either way.

use std::fmt::Write as _;

use base64::Engine as _;
use ipld_core::ipld::Ipld;

/// The deepest nesting of lists and maps accepted in a record, equal to what the Jetstream
/// decoder accepts (`starling_core::jetstream::NESTING_DEPTH_MAX`) less the envelope's two
/// levels, so every converted record decodes there too.
pub const RECORD_DEPTH_MAX: usize = starling_core::jetstream::NESTING_DEPTH_MAX - 2;

/// Why a value has no JSON form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JsonError {
    Float,
    IntegerRange,
    TooDeep,
    NotMap,
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JsonError::Float => "floats are not allowed in atproto data",
            JsonError::IntegerRange => "integer outside the 64-bit range",
            JsonError::TooDeep => "lists and maps nest too deep",
            JsonError::NotMap => "a record must be a map",
        })
    }
}

/// Appends the JSON form of `record` (a map) to `out`.
pub(crate) fn write_record(record: &Ipld, out: &mut String) -> Result<(), JsonError> {
    if !matches!(record, Ipld::Map(_)) {
        return Err(JsonError::NotMap);
    }
    write_value(record, out, 0)
}

fn write_value(value: &Ipld, out: &mut String, depth: usize) -> Result<(), JsonError> {
    match value {
        Ipld::Null => out.push_str("null"),
        Ipld::Bool(true) => out.push_str("true"),
        Ipld::Bool(false) => out.push_str("false"),
        Ipld::Integer(int) => {
            let int = i64::try_from(*int).map_err(|_| JsonError::IntegerRange)?;
            let _ = write!(out, "{int}");
        }
        Ipld::Float(_) => return Err(JsonError::Float),
        Ipld::String(text) => write_string(text, out),
        Ipld::Bytes(bytes) => {
            out.push_str("{\"$bytes\":\"");
            base64::engine::general_purpose::STANDARD_NO_PAD.encode_string(bytes, out);
            out.push_str("\"}");
        }
        Ipld::Link(cid) => {
            let _ = write!(out, "{{\"$link\":\"{cid}\"}}");
        }
        Ipld::List(items) => {
            let depth = deeper(depth)?;
            out.push('[');
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                write_value(item, out, depth)?;
            }
            out.push(']');
        }
        Ipld::Map(entries) => {
            let depth = deeper(depth)?;
            out.push('{');
            for (idx, (key, item)) in entries.iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(item, out, depth)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn deeper(depth: usize) -> Result<usize, JsonError> {
    if depth >= RECORD_DEPTH_MAX {
        return Err(JsonError::TooDeep);
    }
    Ok(depth + 1)
}

/// Appends `text` as a JSON string: quotes, backslashes and control characters escaped.
pub(crate) fn write_string(text: &str, out: &mut String) {
    out.push('"');
    let mut start = 0;
    for (idx, byte) in text.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(text.get(start..idx).unwrap_or_default());
        if escape.is_empty() {
            let _ = write!(out, "\\u{byte:04x}");
        } else {
            out.push_str(escape);
        }
        start = idx + 1;
    }
    out.push_str(text.get(start..).unwrap_or_default());
    out.push('"');
}
