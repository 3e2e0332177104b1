//! `bsky.Service` request messages for load generators, encoded by hand.
//!
//! Each request is kept twice: as JSON (for `ghz --data-file` and for reading) and as protobuf
//! bytes (for `grpc-load`, which sends pre-encoded messages). The few messages the benchmarks
//! send are encoded here field by field, so this crate does not depend on the API crate.

use std::error::Error;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// One request message, as JSON and as protobuf.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The message as JSON, with the proto field names.
    pub json: String,
    /// The message encoded as protobuf.
    pub proto: Vec<u8>,
}

impl Request {
    /// `{ actor_did = 1, limit = 2 }`: GetTimeline, GetAuthorFeed (posts and replies),
    /// GetFollowers, GetFollows.
    pub fn actor_page(actor_did: &str, limit: u32) -> Request {
        let mut proto = Vec::new();
        put_string(&mut proto, 1, actor_did);
        put_uint(&mut proto, 2, u64::from(limit));
        Request {
            json: format!(r#"{{"actor_did":"{actor_did}","limit":{limit}}}"#),
            proto,
        }
    }

    /// `GetNotificationsRequest { actor_did = 1, limit = 2, priority = 4 }`, with no cursor
    /// (a first page); `priority` false is left out, as protobuf encodes a default.
    pub fn notifications(actor_did: &str, limit: u32, priority: bool) -> Request {
        let mut res = Request::actor_page(actor_did, limit);
        if priority {
            put_uint(&mut res.proto, 4, 1);
            res.json = format!(r#"{{"actor_did":"{actor_did}","limit":{limit},"priority":true}}"#);
        }
        res
    }

    /// `{ actor_did = 1 }`: GetUnreadNotificationCount.
    pub fn actor(actor_did: &str) -> Request {
        let mut proto = Vec::new();
        put_string(&mut proto, 1, actor_did);
        Request {
            json: format!(r#"{{"actor_did":"{actor_did}"}}"#),
            proto,
        }
    }

    /// `GetListMembersRequest { list_uri = 1, limit = 2 }`.
    pub fn list_page(list_uri: &str, limit: u32) -> Request {
        let mut proto = Vec::new();
        put_string(&mut proto, 1, list_uri);
        put_uint(&mut proto, 2, u64::from(limit));
        Request {
            json: format!(r#"{{"list_uri":"{list_uri}","limit":{limit}}}"#),
            proto,
        }
    }

    /// `SearchActorsRequest { term = 1, limit = 2 }`; the term is a handle or part of one, so
    /// it needs no JSON escaping.
    pub fn search(term: &str, limit: u32) -> Request {
        let mut proto = Vec::new();
        put_string(&mut proto, 1, term);
        put_uint(&mut proto, 2, u64::from(limit));
        Request {
            json: format!(r#"{{"term":"{term}","limit":{limit}}}"#),
            proto,
        }
    }

    /// `GetFollowsFollowingRequest { actor_did = 1, repeated target_dids = 2 }`.
    pub fn follows_following(actor_did: &str, target_dids: &[String]) -> Request {
        let mut proto = Vec::new();
        put_string(&mut proto, 1, actor_did);
        for target in target_dids {
            put_string(&mut proto, 2, target);
        }
        Request {
            json: format!(
                r#"{{"actor_did":"{actor_did}","target_dids":{}}}"#,
                json_strings(target_dids)
            ),
            proto,
        }
    }

    /// `GetCountsForUsersRequest { repeated dids = 1 }`.
    pub fn counts_for_users(dids: &[String]) -> Request {
        let mut proto = Vec::new();
        for did in dids {
            put_string(&mut proto, 1, did);
        }
        Request {
            json: format!(r#"{{"dids":{}}}"#, json_strings(dids)),
            proto,
        }
    }

    /// `GetInteractionCountsRequest { repeated RecordRef refs = 1 }`, `RecordRef { uri = 1,
    /// cid = 2 }`.
    pub fn interaction_counts(refs: &[(String, String)]) -> Request {
        let mut proto = Vec::new();
        let mut json = Vec::with_capacity(refs.len());
        for (uri, cid) in refs {
            let mut record_ref = Vec::new();
            put_string(&mut record_ref, 1, uri);
            put_string(&mut record_ref, 2, cid);
            put_bytes(&mut proto, 1, &record_ref);
            json.push(format!(r#"{{"uri":"{uri}","cid":"{cid}"}}"#));
        }
        Request {
            json: format!(r#"{{"refs":[{}]}}"#, json.join(",")),
            proto,
        }
    }
}

fn json_strings(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| format!("\"{item}\"")).collect();
    format!("[{}]", quoted.join(","))
}

/// A protobuf varint.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A varint field (wire type 0).
pub fn put_uint(out: &mut Vec<u8>, field: u64, value: u64) {
    put_varint(out, field << 3);
    put_varint(out, value);
}

/// A length-delimited field (wire type 2) holding `bytes`.
pub fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A string field.
pub fn put_string(out: &mut Vec<u8>, field: u64, text: &str) {
    put_bytes(out, field, text.as_bytes());
}

/// Writes `OUT/NAME.json` (a JSON array) and `OUT/NAME.bin` (each message behind its length as
/// a little-endian `u32`).
pub fn write_requests(out: &Path, name: &str, requests: &[Request]) -> Result<(), Box<dyn Error>> {
    let mut json = BufWriter::new(File::create(out.join(format!("{name}.json")))?);
    let mut bin = BufWriter::new(File::create(out.join(format!("{name}.bin")))?);
    writeln!(json, "[")?;
    for (idx, request) in requests.iter().enumerate() {
        let comma = if idx + 1 < requests.len() { "," } else { "" };
        writeln!(json, "{}{comma}", request.json)?;
        let len = u32::try_from(request.proto.len())?;
        bin.write_all(&len.to_le_bytes())?;
        bin.write_all(&request.proto)?;
    }
    writeln!(json, "]")?;
    json.into_inner()
        .map_err(|err| err.into_error())?
        .sync_all()?;
    bin.into_inner()
        .map_err(|err| err.into_error())?
        .sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the hand encoding against bytes worked out from the protobuf encoding rules:
    // field 1 as tag 0x0a, length, text; field 2 as a varint (0x10) or a string (0x12); a
    // nested message under field 1; and a two-byte varint.
    #[test]
    fn requests_encode_as_protobuf() {
        let page = Request::actor_page("did:x", 50);
        assert_eq!(page.proto, b"\x0a\x05did:x\x10\x32");
        assert_eq!(page.json, r#"{"actor_did":"did:x","limit":50}"#);
        let follows = Request::follows_following("did:a", &["did:b".to_owned()]);
        assert_eq!(follows.proto, b"\x0a\x05did:a\x12\x05did:b");
        assert_eq!(
            follows.json,
            r#"{"actor_did":"did:a","target_dids":["did:b"]}"#
        );
        let counts = Request::interaction_counts(&[("u".into(), "c".into())]);
        assert_eq!(counts.proto, b"\x0a\x06\x0a\x01u\x12\x01c");
        assert_eq!(counts.json, r#"{"refs":[{"uri":"u","cid":"c"}]}"#);
        let list = Request::list_page("at://l", 3);
        assert_eq!(list.proto, b"\x0a\x06at://l\x10\x03");
        assert_eq!(list.json, r#"{"list_uri":"at://l","limit":3}"#);
        let search = Request::search("user1", 10);
        assert_eq!(search.proto, b"\x0a\x05user1\x10\x0a");
        assert_eq!(search.json, r#"{"term":"user1","limit":10}"#);
        let mut varint = Vec::new();
        put_varint(&mut varint, 300);
        assert_eq!(varint, [0xac, 0x02]);
    }
}
