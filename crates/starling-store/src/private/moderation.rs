//! The operator's moderation state, kept as private rows beside each user's private state (so
//! both backends store it with the same three calls, durably and atomically): takedowns of
//! actors, records and blobs, upstream account statuses set by the operator, and labels from
//! labelers with each labeler's stream cursor.
//!
//! The rules, as the reference dataplane keeps them:
//! - A takedown keeps its reference (`TAKEDOWN` when none is given); a second takedown
//!   replaces the reference; an untakedown removes it. Unlike the reference, a takedown does
//!   not need the actor or record to be indexed yet: one taken down before it arrives stays
//!   hidden when it does.
//! - An upstream status set by the operator holds until the next `#account` event of the
//!   actor (it records the account sequence it was set at).
//! - A label is keyed by (source, subject URI, CID, value), as the reference's `label` table:
//!   a second one with the same key replaces it; a negation removes it. Expired labels stay
//!   stored and are left out when read.

use super::*;

/// Takedowns of actors: did -> reference.
pub(super) const TAKEDOWN_ACTOR: u8 = b'T';
/// Takedowns of records: the record URI (whole partition) -> reference.
pub(super) const TAKEDOWN_RECORD: u8 = b'R';
/// Takedowns of blobs: did, CID -> reference.
pub(super) const TAKEDOWN_BLOB: u8 = b'G';
/// Upstream statuses set by the operator: did -> account sequence (8) ‖ status.
pub(super) const UPSTREAM_STATUS: u8 = b'U';
/// Labels by subject: subject, source length (2) ‖ source ‖ CID length (2) ‖ CID ‖ value ->
/// expiry (8, `i64::MAX` when none) ‖ the label's JSON as the AppView reads it.
pub(super) const LABEL: u8 = b'J';
/// Labeler stream cursors: labeler DID -> sequence (8).
pub(super) const LABELER_CURSOR: u8 = b'Z';

/// The reference the reference dataplane records when a takedown gives none.
pub const DEFAULT_TAKEDOWN_REF: &str = "TAKEDOWN";
/// Labels read for one subject at most.
pub const LABELS_PER_SUBJECT_MAX: usize = 1_000;

/// What a takedown applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TakedownSubject {
    /// An account, by DID.
    Actor {
        /// The DID.
        did: String,
    },
    /// A record, by AT-URI.
    Record {
        /// `at://did/collection/rkey`.
        uri: String,
    },
    /// A blob of an account.
    Blob {
        /// The account's DID.
        did: String,
        /// The blob's CID.
        cid: String,
    },
}

impl TakedownSubject {
    pub(super) fn key(&self) -> PrivateKey {
        match self {
            TakedownSubject::Actor { did } => key(TAKEDOWN_ACTOR, did, Vec::new()),
            TakedownSubject::Record { uri } => PrivateKey {
                partition: [&[TAKEDOWN_RECORD][..], uri.as_bytes()].concat(),
                clustering: Vec::new(),
            },
            TakedownSubject::Blob { did, cid } => key(TAKEDOWN_BLOB, did, cid.as_bytes().to_vec()),
        }
    }
}

/// The stored value of a takedown: its reference, or the default one.
pub(super) fn takedown_value(reference: &str) -> Vec<u8> {
    match reference {
        "" => DEFAULT_TAKEDOWN_REF.as_bytes().to_vec(),
        reference => reference.as_bytes().to_vec(),
    }
}

/// An upstream status the operator set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamStatus {
    /// The status string, as given (empty: active).
    pub status: String,
    /// The actor's account sequence when it was set: it holds while no newer `#account` event
    /// has been applied.
    pub account_seq: u64,
}

pub(super) fn upstream_key(actor: &str) -> PrivateKey {
    key(UPSTREAM_STATUS, actor, Vec::new())
}

pub(super) fn encode_upstream(status: &str, account_seq: u64) -> Vec<u8> {
    [&account_seq.to_be_bytes()[..], status.as_bytes()].concat()
}

pub(super) fn decode_upstream(
    bytes: &[u8],
    row: &PrivateKey,
) -> Result<UpstreamStatus, StoreError> {
    let (seq, status) = bytes
        .split_first_chunk::<8>()
        .ok_or_else(|| corrupt("an upstream status sequence", row))?;
    Ok(UpstreamStatus {
        status: text(status, row)?,
        account_seq: u64::from_be_bytes(*seq),
    })
}

/// A label from a labeler, validated (`com.atproto.label.defs#label`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// The labeler's DID.
    pub src: String,
    /// The subject: an AT-URI or a DID.
    pub uri: String,
    /// The subject record's CID, if the label is on one version only (empty: none).
    pub cid: String,
    /// The label value.
    pub val: String,
    /// A negation of an earlier label.
    pub neg: bool,
    /// When it was created, as the labeler wrote it.
    pub cts: String,
    /// When it expires, as the labeler wrote it, if ever.
    pub exp: Option<String>,
    /// `exp` in microseconds since the Unix epoch.
    pub exp_us: Option<i64>,
}

impl Label {
    pub(super) fn key(&self) -> PrivateKey {
        let mut clustering =
            Vec::with_capacity(4 + self.src.len() + self.cid.len() + self.val.len());
        for part in [&self.src, &self.cid] {
            clustering.extend_from_slice(&(part.len() as u16).to_be_bytes());
            clustering.extend_from_slice(part.as_bytes());
        }
        clustering.extend_from_slice(self.val.as_bytes());
        key(LABEL, &self.uri, clustering)
    }

    /// The JSON the AppView reads from GetLabels (the reference's row: `cid`, `neg` and `exp`
    /// only when set).
    pub fn json(&self) -> String {
        let mut out = String::with_capacity(64 + self.uri.len() + self.val.len());
        out.push('{');
        json_field(&mut out, "src", &self.src);
        out.push(',');
        json_field(&mut out, "uri", &self.uri);
        if !self.cid.is_empty() {
            out.push(',');
            json_field(&mut out, "cid", &self.cid);
        }
        out.push(',');
        json_field(&mut out, "val", &self.val);
        if self.neg {
            out.push_str(",\"neg\":true");
        }
        out.push(',');
        json_field(&mut out, "cts", &self.cts);
        if let Some(exp) = &self.exp {
            out.push(',');
            json_field(&mut out, "exp", exp);
        }
        out.push('}');
        out
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        timed(self.exp_us.unwrap_or(i64::MAX), self.json().as_bytes())
    }
}

/// A stored label, as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredLabel {
    /// The labeler's DID.
    pub src: String,
    /// When it expires, in microseconds, if ever.
    pub exp_us: Option<i64>,
    /// The JSON the AppView reads.
    pub json: String,
}

pub(super) fn decode_label(
    clustering: &[u8],
    bytes: &[u8],
    row: &PrivateKey,
) -> Result<StoredLabel, StoreError> {
    let (len, rest) = clustering
        .split_first_chunk::<2>()
        .ok_or_else(|| corrupt("a label source length", row))?;
    let src = rest
        .get(..usize::from(u16::from_be_bytes(*len)))
        .ok_or_else(|| corrupt("a label source", row))?;
    let (exp_us, json) = time_of(bytes, row)?;
    Ok(StoredLabel {
        src: text(src, row)?,
        exp_us: (exp_us != i64::MAX).then_some(exp_us),
        json: text(json, row)?,
    })
}

pub(super) fn labeler_cursor_key(labeler: &str) -> PrivateKey {
    PrivateKey {
        partition: vec![LABELER_CURSOR],
        clustering: labeler.as_bytes().to_vec(),
    }
}

impl<R: PrivateReads> PrivateQueries<'_, R> {
    /// The reference of `subject`'s takedown, if taken down.
    pub(crate) fn takedown(
        &mut self,
        subject: &TakedownSubject,
    ) -> Result<Option<String>, StoreError> {
        let row = subject.key();
        self.0
            .get(&row)?
            .map(|bytes| text(&bytes, &row))
            .transpose()
    }

    /// The upstream status the operator set for `actor`, if any.
    pub(crate) fn upstream_status(
        &mut self,
        actor: &str,
    ) -> Result<Option<UpstreamStatus>, StoreError> {
        let row = upstream_key(actor);
        self.0
            .get(&row)?
            .map(|bytes| decode_upstream(&bytes, &row))
            .transpose()
    }

    /// The labels on `subject` (at most [`LABELS_PER_SUBJECT_MAX`]), expired ones included.
    pub(crate) fn labels(&mut self, subject: &str) -> Result<Vec<StoredLabel>, StoreError> {
        let row = key(LABEL, subject, Vec::new());
        self.0
            .scan(&row.partition, None, LABELS_PER_SUBJECT_MAX)?
            .iter()
            .map(|(clustering, value)| decode_label(clustering, value, &row))
            .collect()
    }

    /// The sequence a labeler's stream reached.
    pub(crate) fn labeler_cursor(&mut self, labeler: &str) -> Result<Option<i64>, StoreError> {
        let row = labeler_cursor_key(labeler);
        match self.0.get(&row)? {
            Some(bytes) => Ok(Some(u64_of(&bytes, &row)? as i64)),
            None => Ok(None),
        }
    }
}

/// Appends `"name":"value"` with `value` escaped as a JSON string.
fn json_field(out: &mut String, name: &str, value: &str) {
    use std::fmt::Write as _;
    out.push('"');
    out.push_str(name);
    out.push_str("\":\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
