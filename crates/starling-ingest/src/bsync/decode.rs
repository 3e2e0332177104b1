//! bsync's answers (Connect protocol, JSON encoding) into [`PrivateOp`]s, validated: a
//! malformed operation is counted and skipped, never applied and never fatal.
//!
//! The three scans answer `{"operations": [...], "cursor": "N"}`; proto3 JSON leaves out
//! fields at their defaults (`false`, empty strings), spells enums by name (numbers are
//! accepted too) and bytes as base64.

use serde::Deserialize;
use starling_core::syntax::{RecordUri, is_valid_did, is_valid_record_key};
use starling_store::{PRIVATE_PAYLOAD_BYTES_MAX, PRIVATE_TEXT_BYTES_MAX, PrivateOp};

/// bsync's namespaces (`app.bsky.*.defs#*`) that Starling keeps; others are ignored, as the
/// reference dataplane keeps them only in a generic table nothing reads.
pub(crate) mod namespace {
    /// Bookmarks.
    pub(crate) const BOOKMARK: &str = "app.bsky.bookmark.defs#bookmark";
    /// Drafts.
    pub(crate) const DRAFT: &str = "app.bsky.draft.defs#draftWithId";
    /// Notification preferences (key `self`).
    pub(crate) const PREFERENCES: &str = "app.bsky.notification.defs#preferences";
    /// Activity subscriptions.
    pub(crate) const ACTIVITY: &str = "app.bsky.notification.defs#subjectActivitySubscription";
}

/// A page of one scan, decoded.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// The valid operations, in order.
    pub(crate) ops: Vec<PrivateOp>,
    /// Operations that were malformed (skipped).
    pub(crate) n_malformed: u64,
    /// Well-formed operations Starling keeps nothing of (other namespaces, empty priority).
    pub(crate) n_ignored: u64,
    /// The cursor after the page (the request's own when the page is empty).
    pub(crate) cursor: String,
}

/// Why a whole answer was refused (then nothing of it is applied, and the scan is retried).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// The body is not the JSON of a scan answer.
    #[error("bsync answer is not a scan response: {0}")]
    Json(String),
    /// The cursor is not a decimal number.
    #[error("bsync answered cursor `{0}`, not a decimal number")]
    Cursor(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum EnumValue {
    Name(String),
    Number(i64),
}

impl EnumValue {
    /// The value as a number, given the names of 1, 2, 3 in order.
    fn number(&self, names: [&str; 3]) -> i64 {
        match self {
            EnumValue::Number(n) => *n,
            EnumValue::Name(name) => names
                .iter()
                .position(|known| known == name)
                .map_or(0, |idx| idx as i64 + 1),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page<T> {
    #[serde(default = "Vec::new")]
    operations: Vec<T>,
    #[serde(default)]
    cursor: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MuteOperation {
    #[serde(rename = "type")]
    kind: Option<EnumValue>,
    #[serde(default)]
    actor_did: String,
    #[serde(default)]
    subject: String,
    #[serde(default)]
    only_reposts: bool,
    #[serde(default)]
    only_quoteposts: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NotifOperation {
    #[serde(default)]
    actor_did: String,
    priority: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Operation {
    #[serde(default)]
    actor_did: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    key: String,
    method: Option<EnumValue>,
    #[serde(default)]
    payload: String,
}

/// What one operation came to.
enum Verdict {
    Op(PrivateOp),
    Ignored,
    Malformed,
}

fn page<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<Page<T>, AnswerError> {
    let page: Page<T> =
        serde_json::from_slice(body).map_err(|err| AnswerError::Json(err.to_string()))?;
    if !page.cursor.bytes().all(|b| b.is_ascii_digit()) || page.cursor.len() > 20 {
        return Err(AnswerError::Cursor(page.cursor.chars().take(64).collect()));
    }
    Ok(page)
}

fn collect<T>(page: Page<T>, verdict: impl Fn(T) -> Verdict) -> Decoded {
    let mut res = Decoded {
        cursor: page.cursor,
        ..Decoded::default()
    };
    for op in page.operations {
        match verdict(op) {
            Verdict::Op(op) => res.ops.push(op),
            Verdict::Ignored => res.n_ignored += 1,
            Verdict::Malformed => res.n_malformed += 1,
        }
    }
    res
}

fn did(text: &str) -> Option<String> {
    (text.len() <= PRIVATE_TEXT_BYTES_MAX && is_valid_did(text)).then(|| text.to_owned())
}

fn record_uri(text: &str) -> Option<RecordUri<'_>> {
    if text.len() > PRIVATE_TEXT_BYTES_MAX {
        return None;
    }
    RecordUri::parse(text)
}

/// A `ScanMuteOperations` answer.
pub(crate) fn mute_page(body: &[u8]) -> Result<Decoded, AnswerError> {
    Ok(collect(page::<MuteOperation>(body)?, |op| {
        mute_op(op).map_or(Verdict::Malformed, Verdict::Op)
    }))
}

fn mute_op(op: MuteOperation) -> Option<PrivateOp> {
    let actor = did(&op.actor_did)?;
    let kind = op.kind?.number(["TYPE_ADD", "TYPE_REMOVE", "TYPE_CLEAR"]);
    if kind == 3 {
        return Some(PrivateOp::ClearMutes { actor });
    }
    let add = match kind {
        1 => true,
        2 => false,
        _ => return None,
    };
    if let Some(subject) = did(&op.subject) {
        return Some(match add {
            true => PrivateOp::MuteActor {
                actor,
                subject,
                only_reposts: op.only_reposts,
                only_quoteposts: op.only_quoteposts,
            },
            false => PrivateOp::UnmuteActor { actor, subject },
        });
    }
    let uri = record_uri(&op.subject)?;
    let subject = op.subject.clone();
    Some(match (uri.collection == "app.bsky.graph.list", add) {
        (true, true) => PrivateOp::MuteList {
            actor,
            list: subject,
        },
        (true, false) => PrivateOp::UnmuteList {
            actor,
            list: subject,
        },
        (false, true) => PrivateOp::MuteThread {
            actor,
            root: subject,
        },
        (false, false) => PrivateOp::UnmuteThread {
            actor,
            root: subject,
        },
    })
}

/// A `ScanNotifOperations` answer.
pub(crate) fn notif_page(body: &[u8]) -> Result<Decoded, AnswerError> {
    Ok(collect(page::<NotifOperation>(body)?, |op| {
        match (did(&op.actor_did), op.priority) {
            (None, _) => Verdict::Malformed,
            (Some(_), None) => Verdict::Ignored,
            (Some(actor), Some(priority)) => {
                Verdict::Op(PrivateOp::NotificationPriority { actor, priority })
            }
        }
    }))
}

/// A `ScanOperations` answer.
pub(crate) fn operation_page(body: &[u8]) -> Result<Decoded, AnswerError> {
    Ok(collect(page::<Operation>(body)?, operation))
}

fn operation(op: Operation) -> Verdict {
    let known = [
        namespace::BOOKMARK,
        namespace::DRAFT,
        namespace::PREFERENCES,
        namespace::ACTIVITY,
    ];
    if !known.contains(&op.namespace.as_str()) {
        return Verdict::Ignored;
    }
    match known_operation(op) {
        Some(op) => Verdict::Op(op),
        None => Verdict::Malformed,
    }
}

fn known_operation(op: Operation) -> Option<PrivateOp> {
    let actor = did(&op.actor_did)?;
    let method = op
        .method?
        .number(["METHOD_CREATE", "METHOD_UPDATE", "METHOD_DELETE"]);
    let (delete, update) = match method {
        1 => (false, false),
        2 => (false, true),
        3 => (true, false),
        _ => return None,
    };
    if op.key.len() > PRIVATE_TEXT_BYTES_MAX || !is_valid_record_key(&op.key) {
        return None;
    }
    let key = op.key;
    let namespace = op.namespace.as_str();
    if delete {
        return Some(match namespace {
            namespace::BOOKMARK => PrivateOp::DeleteBookmark { actor, key },
            namespace::DRAFT => PrivateOp::DeleteDraft { actor, key },
            namespace::PREFERENCES => PrivateOp::DeletePreferences { actor },
            _ => PrivateOp::DeleteActivitySubscription { actor, key },
        });
    }
    let json = payload_json(&op.payload)?;
    let value: serde_json::Value = serde_json::from_str(&json).ok()?;
    match namespace {
        namespace::BOOKMARK => {
            let subject = value.get("subject")?;
            let subject_uri = subject.get("uri")?.as_str()?;
            let subject_cid = subject.get("cid")?.as_str()?;
            record_uri(subject_uri)?;
            (subject_cid.len() <= 1024).then_some(())?;
            Some(PrivateOp::PutBookmark {
                actor,
                key,
                subject_uri: subject_uri.to_owned(),
                subject_cid: subject_cid.to_owned(),
            })
        }
        namespace::ACTIVITY => {
            let subject = did(value.get("subject")?.as_str()?)?;
            let flags = value.get("activitySubscription")?;
            let flag = |name: &str| flags.get(name).and_then(serde_json::Value::as_bool);
            Some(PrivateOp::PutActivitySubscription {
                actor,
                key,
                subject,
                post: flag("post")?,
                reply: flag("reply")?,
                update,
            })
        }
        namespace::DRAFT => Some(PrivateOp::PutDraft {
            actor,
            key,
            json,
            update,
        }),
        _ => (key == "self").then_some(PrivateOp::PutPreferences { actor, json }),
    }
}

/// The payload's bytes (base64, standard or URL-safe alphabet, padded or not) as UTF-8 text,
/// within the size limit.
fn payload_json(base64: &str) -> Option<String> {
    if base64.len() / 4 * 3 > PRIVATE_PAYLOAD_BYTES_MAX {
        return None;
    }
    let mut bytes = Vec::with_capacity(base64.len() / 4 * 3);
    let mut acc = 0u32;
    let mut n_bits = 0;
    for byte in base64.bytes().filter(|&b| b != b'=') {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = acc << 6 | u32::from(value);
        n_bits += 6;
        if n_bits >= 8 {
            n_bits -= 8;
            bytes.push((acc >> n_bits) as u8);
            acc &= (1 << n_bits) - 1;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(text: &str) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in text.as_bytes().chunks(3) {
            let n = chunk.iter().fold(0u32, |acc, &b| acc << 8 | u32::from(b))
                << (8 * (3 - chunk.len()));
            for idx in 0..4 {
                if idx <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * idx) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    // Each kind of mute operation decodes to its private operation; malformed ones (a bad
    // DID, an unknown type, a subject that is neither a DID nor a record URI) are counted.
    #[test]
    fn mute_operations_decode_and_malformed_ones_are_counted() {
        let body = r#"{"operations":[
            {"id":"1","type":"TYPE_ADD","actorDid":"did:plc:a","subject":"did:plc:b","onlyReposts":true},
            {"id":"2","type":2,"actorDid":"did:plc:a","subject":"did:plc:b"},
            {"id":"3","type":"TYPE_ADD","actorDid":"did:plc:a","subject":"at://did:plc:b/app.bsky.graph.list/3kaaaaaaaaaa2"},
            {"id":"4","type":"TYPE_ADD","actorDid":"did:plc:a","subject":"at://did:plc:b/app.bsky.feed.post/3kaaaaaaaaaa2"},
            {"id":"5","type":"TYPE_CLEAR","actorDid":"did:plc:a"},
            {"id":"6","type":"TYPE_ADD","actorDid":"nope","subject":"did:plc:b"},
            {"id":"7","type":"TYPE_SOMETHING","actorDid":"did:plc:a","subject":"did:plc:b"},
            {"id":"8","type":"TYPE_ADD","actorDid":"did:plc:a","subject":"nope"}
        ],"cursor":"8"}"#;
        let decoded = mute_page(body.as_bytes()).unwrap();
        let list = "at://did:plc:b/app.bsky.graph.list/3kaaaaaaaaaa2".to_owned();
        let root = "at://did:plc:b/app.bsky.feed.post/3kaaaaaaaaaa2".to_owned();
        let actor = || "did:plc:a".to_owned();
        assert_eq!(
            decoded.ops,
            vec![
                PrivateOp::MuteActor {
                    actor: actor(),
                    subject: "did:plc:b".to_owned(),
                    only_reposts: true,
                    only_quoteposts: false
                },
                PrivateOp::UnmuteActor {
                    actor: actor(),
                    subject: "did:plc:b".to_owned()
                },
                PrivateOp::MuteList {
                    actor: actor(),
                    list
                },
                PrivateOp::MuteThread {
                    actor: actor(),
                    root
                },
                PrivateOp::ClearMutes { actor: actor() },
            ]
        );
        assert_eq!((decoded.n_malformed, decoded.n_ignored), (3, 0));
        assert_eq!(decoded.cursor, "8");
    }

    // Stash operations: bookmarks, activity subscriptions, drafts and preferences decode from
    // their base64 JSON payloads; other namespaces are ignored; bad payloads are malformed.
    #[test]
    fn stash_operations_decode_from_their_payloads() {
        let bookmark = b64(
            r#"{"$type":"app.bsky.bookmark.defs#bookmark","subject":{"uri":"at://did:plc:b/app.bsky.feed.post/3kaaaaaaaaaa2","cid":"bafyx"}}"#,
        );
        let activity =
            b64(r#"{"subject":"did:plc:c","activitySubscription":{"post":true,"reply":false}}"#);
        let prefs = b64(r#"{"chat":{"include":"all","push":true}}"#);
        let body = format!(
            r#"{{"operations":[
            {{"actorDid":"did:plc:a","namespace":"{}","key":"3kaaaaaaaaab2","method":"METHOD_CREATE","payload":"{bookmark}"}},
            {{"actorDid":"did:plc:a","namespace":"{}","key":"3kaaaaaaaaac2","method":"METHOD_UPDATE","payload":"{activity}"}},
            {{"actorDid":"did:plc:a","namespace":"{}","key":"self","method":"METHOD_UPDATE","payload":"{prefs}"}},
            {{"actorDid":"did:plc:a","namespace":"{}","key":"3kaaaaaaaaad2","method":"METHOD_DELETE"}},
            {{"actorDid":"did:plc:a","namespace":"app.bsky.unspecced.defs#ageAssuranceEvent","key":"x","method":1}},
            {{"actorDid":"did:plc:a","namespace":"{}","key":"3kaaaaaaaaae2","method":"METHOD_CREATE","payload":"!!"}}
            ],"cursor":"12"}}"#,
            namespace::BOOKMARK,
            namespace::ACTIVITY,
            namespace::PREFERENCES,
            namespace::DRAFT,
            namespace::BOOKMARK,
        );
        let decoded = operation_page(body.as_bytes()).unwrap();
        let actor = || "did:plc:a".to_owned();
        assert_eq!(
            decoded.ops,
            vec![
                PrivateOp::PutBookmark {
                    actor: actor(),
                    key: "3kaaaaaaaaab2".to_owned(),
                    subject_uri: "at://did:plc:b/app.bsky.feed.post/3kaaaaaaaaaa2".to_owned(),
                    subject_cid: "bafyx".to_owned(),
                },
                PrivateOp::PutActivitySubscription {
                    actor: actor(),
                    key: "3kaaaaaaaaac2".to_owned(),
                    subject: "did:plc:c".to_owned(),
                    post: true,
                    reply: false,
                    update: true,
                },
                PrivateOp::PutPreferences {
                    actor: actor(),
                    json: r#"{"chat":{"include":"all","push":true}}"#.to_owned(),
                },
                PrivateOp::DeleteDraft {
                    actor: actor(),
                    key: "3kaaaaaaaaad2".to_owned()
                },
            ]
        );
        assert_eq!((decoded.n_malformed, decoded.n_ignored), (1, 1));
    }

    // An answer that is not a scan response, or whose cursor is not a number, is refused whole.
    #[test]
    fn a_bad_answer_is_refused_whole() {
        assert!(matches!(notif_page(b"<html>"), Err(AnswerError::Json(_))));
        assert!(matches!(
            notif_page(br#"{"operations":[],"cursor":"did:x"}"#),
            Err(AnswerError::Cursor(_))
        ));
        let decoded = notif_page(
            br#"{"operations":[{"actorDid":"did:plc:a","priority":true},{"actorDid":"did:plc:a"}],"cursor":"3"}"#,
        )
        .unwrap();
        assert_eq!(decoded.ops.len(), 1);
        assert_eq!((decoded.n_malformed, decoded.n_ignored), (0, 1));
    }
}
