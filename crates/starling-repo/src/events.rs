//! Jetstream v1 events written from repository data, so that records from a relay or a CAR
//! export take exactly the path Jetstream events take into the store
//! (`starling_core::jetstream::decode`, then the store's apply rules).

use crate::json::write_string;
use std::fmt::Write as _;

/// A commit operation, as Jetstream names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `create`
    Create,
    /// `update`
    Update,
    /// `delete`
    Delete,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }
}

/// One record operation of a commit, to write as a Jetstream `commit` event.
#[derive(Clone, Copy, Debug)]
pub struct CommitOp<'a> {
    /// The repository.
    pub did: &'a str,
    /// The event's time (Jetstream's cursor unit: microseconds since the epoch).
    pub time_us: u64,
    /// The commit's revision (a TID).
    pub rev: &'a str,
    /// What was done.
    pub action: Action,
    /// The collection NSID.
    pub collection: &'a str,
    /// The record key.
    pub rkey: &'a str,
    /// The record's CID and JSON, for creates and updates.
    pub record: Option<(&'a str, &'a str)>,
}

/// Appends `op` as one Jetstream event (no newline) to `out`.
pub fn write_commit(op: &CommitOp<'_>, out: &mut String) {
    out.push_str("{\"did\":");
    write_string(op.did, out);
    let _ = write!(
        out,
        ",\"time_us\":{},\"kind\":\"commit\",\"commit\":{{\"rev\":",
        op.time_us
    );
    write_string(op.rev, out);
    let _ = write!(
        out,
        ",\"operation\":\"{}\",\"collection\":",
        op.action.as_str()
    );
    write_string(op.collection, out);
    out.push_str(",\"rkey\":");
    write_string(op.rkey, out);
    if let Some((cid, json)) = op.record {
        out.push_str(",\"record\":");
        out.push_str(json);
        out.push_str(",\"cid\":");
        write_string(cid, out);
    }
    out.push_str("}}");
}

/// Appends a Jetstream `identity` event to `out`.
pub fn write_identity(did: &str, time_us: u64, seq: u64, handle: Option<&str>, out: &mut String) {
    out.push_str("{\"did\":");
    write_string(did, out);
    let _ = write!(
        out,
        ",\"time_us\":{time_us},\"kind\":\"identity\",\"identity\":{{\"did\":"
    );
    write_string(did, out);
    let _ = write!(out, ",\"seq\":{seq}");
    if let Some(handle) = handle {
        out.push_str(",\"handle\":");
        write_string(handle, out);
    }
    out.push_str("}}");
}

/// Appends a Jetstream `account` event to `out`.
pub fn write_account(
    did: &str,
    time_us: u64,
    seq: u64,
    active: bool,
    status: Option<&str>,
    out: &mut String,
) {
    out.push_str("{\"did\":");
    write_string(did, out);
    let _ = write!(
        out,
        ",\"time_us\":{time_us},\"kind\":\"account\",\"account\":{{\"did\":"
    );
    write_string(did, out);
    let _ = write!(out, ",\"seq\":{seq},\"active\":{active}");
    if let Some(status) = status {
        out.push_str(",\"status\":");
        write_string(status, out);
    }
    out.push_str("}}");
}
