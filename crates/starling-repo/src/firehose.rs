//! Frames of the protocol's event streams (`com.atproto.sync.subscribeRepos`, and as well
//! `com.atproto.label.subscribeLabels`): each websocket binary message is two DAG-CBOR
//! values, a header `{op, t}` and a body.
//!
//! [`split`] gives any stream's header and body as [`Ipld`]; [`Frame::decode`] reads the
//! repository stream's message kinds (`#commit`, `#sync`, `#identity`, `#account`, `#info`,
//! and error frames). [`CommitFrame::events`] checks a commit (its CAR slice, the commit's
//! CID, DID, revision and signature, each operation's record block) and writes its
//! operations as Jetstream events.

use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;

use crate::car::Car;
use crate::commit::Commit;
use crate::events::{self, Action, CommitOp};
use crate::sign::PublicKey;
use crate::{RepoError, repo};

/// The largest frame accepted, in bytes: the relay caps a commit's CAR slice at 2 MiB
/// (`tooBig` above that).
pub const FRAME_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The most operations read from one commit frame (the relay allows 200).
pub const OPS_MAX: usize = 1_000;

/// A frame's header: `op` 1 for a message (of type `t`), -1 for an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// 1 or -1.
    pub op: i64,
    /// The message type, such as `#commit`; absent in error frames.
    pub kind: Option<String>,
}

fn bad_frame(detail: impl Into<String>) -> RepoError {
    RepoError::BadBlock {
        cid: "frame".to_owned(),
        what: "firehose frame",
        detail: detail.into(),
    }
}

/// Splits one frame into its header and body.
pub fn split(bytes: &[u8]) -> Result<(Header, Ipld), RepoError> {
    if bytes.len() > FRAME_BYTES_MAX {
        return Err(RepoError::TooLarge {
            what: "frame",
            len: bytes.len() as u64,
            max: FRAME_BYTES_MAX as u64,
        });
    }
    let mut values = serde_ipld_dagcbor::de::Deserializer::from_slice(bytes).into_iter::<Ipld>();
    let header = values
        .next()
        .ok_or_else(|| bad_frame("empty"))?
        .map_err(|err| bad_frame(format!("header: {err}")))?;
    let body = values
        .next()
        .ok_or_else(|| bad_frame("no body"))?
        .map_err(|err| bad_frame(format!("body: {err}")))?;
    if values.next().is_some() {
        return Err(bad_frame("bytes after the body"));
    }
    let op = match header.get("op") {
        Ok(Some(Ipld::Integer(op))) => {
            i64::try_from(*op).map_err(|_| bad_frame("header op out of range"))?
        }
        _ => return Err(bad_frame("header has no integer `op`")),
    };
    let kind = match header.get("t") {
        Ok(Some(Ipld::String(kind))) => Some(kind.clone()),
        _ => None,
    };
    Ok((Header { op, kind }, body))
}

/// One message of `subscribeRepos`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Frame {
    /// `#commit`: a signed commit and its record operations.
    Commit(Box<CommitFrame>),
    /// `#sync`: the repository's current commit, without operations (its history was reset).
    Sync {
        /// The relay sequence.
        seq: u64,
        /// The repository.
        did: String,
        /// The commit's revision.
        rev: String,
    },
    /// `#identity`: the DID document or handle may have changed.
    Identity {
        /// The relay sequence.
        seq: u64,
        /// The account.
        did: String,
        /// The handle, when the frame carries one.
        handle: Option<String>,
        /// The relay's timestamp.
        time: String,
    },
    /// `#account`: the hosting status changed.
    Account {
        /// The relay sequence.
        seq: u64,
        /// The account.
        did: String,
        /// Whether the account is active.
        active: bool,
        /// The status when inactive.
        status: Option<String>,
        /// The relay's timestamp.
        time: String,
    },
    /// `#info`: a notice from the relay (`OutdatedCursor`).
    Info {
        /// The notice's name.
        name: String,
    },
    /// An error frame (`op` -1): the relay closes the stream after it.
    Error {
        /// The error's name (`FutureCursor`, `ConsumerTooSlow`).
        error: String,
    },
    /// A message type this reader does not know (skipped, as the protocol asks).
    Unknown {
        /// Its `t`.
        kind: String,
    },
}

/// A `#commit` message.
#[derive(Clone, Debug)]
pub struct CommitFrame {
    /// The relay sequence.
    pub seq: u64,
    /// The repository.
    pub repo: String,
    /// The commit's CID.
    pub commit: Cid,
    /// The commit's revision.
    pub rev: String,
    /// The relay's timestamp.
    pub time: String,
    /// Whether the relay left the blocks out because they were too big.
    pub too_big: bool,
    /// The CAR slice: the commit block, changed MST nodes and the new records.
    pub blocks: Vec<u8>,
    /// The record operations.
    pub ops: Vec<RepoOp>,
    /// The MST root before this commit, when the relay says (sync 1.1).
    pub prev_data: Option<Cid>,
}

/// One operation of a commit.
#[derive(Clone, Debug)]
pub struct RepoOp {
    /// What was done.
    pub action: Action,
    /// `collection/rkey`.
    pub path: String,
    /// The new record's CID (creates and updates).
    pub cid: Option<Cid>,
}

fn seq_of(body: &Ipld) -> Result<u64, RepoError> {
    match body.get("seq") {
        Ok(Some(Ipld::Integer(seq))) => u64::try_from(*seq).map_err(|_| bad_frame("negative seq")),
        _ => Err(bad_frame("no integer `seq`")),
    }
}

fn string_of(body: &Ipld, name: &str) -> Result<String, RepoError> {
    match body.get(name) {
        Ok(Some(Ipld::String(text))) => Ok(text.clone()),
        _ => Err(bad_frame(format!("no string `{name}`"))),
    }
}

fn optional_string(body: &Ipld, name: &str) -> Option<String> {
    match body.get(name) {
        Ok(Some(Ipld::String(text))) => Some(text.clone()),
        _ => None,
    }
}

impl Frame {
    /// Decodes one `subscribeRepos` frame.
    pub fn decode(bytes: &[u8]) -> Result<Frame, RepoError> {
        let (header, body) = split(bytes)?;
        if header.op == -1 {
            let error = optional_string(&body, "error").unwrap_or_default();
            return Ok(Frame::Error { error });
        }
        if header.op != 1 {
            return Err(bad_frame(format!("header op {}", header.op)));
        }
        let kind = header.kind.ok_or_else(|| bad_frame("header has no `t`"))?;
        Ok(match kind.as_str() {
            "#commit" => Frame::Commit(Box::new(commit_frame(body)?)),
            "#sync" => Frame::Sync {
                seq: seq_of(&body)?,
                did: string_of(&body, "did")?,
                rev: string_of(&body, "rev")?,
            },
            "#identity" => Frame::Identity {
                seq: seq_of(&body)?,
                did: string_of(&body, "did")?,
                handle: optional_string(&body, "handle"),
                time: string_of(&body, "time")?,
            },
            "#account" => Frame::Account {
                seq: seq_of(&body)?,
                did: string_of(&body, "did")?,
                active: matches!(body.get("active"), Ok(Some(Ipld::Bool(true)))),
                status: optional_string(&body, "status"),
                time: string_of(&body, "time")?,
            },
            "#info" => Frame::Info {
                name: optional_string(&body, "name").unwrap_or_default(),
            },
            _ => Frame::Unknown { kind },
        })
    }

    /// The relay sequence of a message that has one.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Frame::Commit(commit) => Some(commit.seq),
            Frame::Sync { seq, .. } | Frame::Identity { seq, .. } | Frame::Account { seq, .. } => {
                Some(*seq)
            }
            Frame::Info { .. } | Frame::Error { .. } | Frame::Unknown { .. } => None,
        }
    }
}

fn commit_frame(body: Ipld) -> Result<CommitFrame, RepoError> {
    let seq = seq_of(&body)?;
    let repo = string_of(&body, "repo")?;
    let rev = string_of(&body, "rev")?;
    let time = string_of(&body, "time")?;
    let Ipld::Map(mut map) = body else {
        return Err(bad_frame("body is not a map"));
    };
    let Some(Ipld::Link(commit)) = map.remove("commit") else {
        return Err(bad_frame("no `commit` link"));
    };
    let too_big = matches!(map.get("tooBig"), Some(Ipld::Bool(true)));
    let blocks = match map.remove("blocks") {
        Some(Ipld::Bytes(blocks)) => blocks,
        _ => return Err(bad_frame("no `blocks` bytes")),
    };
    let prev_data = match map.get("prevData") {
        Some(Ipld::Link(cid)) => Some(*cid),
        _ => None,
    };
    let Some(Ipld::List(raw_ops)) = map.get("ops") else {
        return Err(bad_frame("no `ops` list"));
    };
    if raw_ops.len() > OPS_MAX {
        return Err(RepoError::TooLarge {
            what: "commit's operation count",
            len: raw_ops.len() as u64,
            max: OPS_MAX as u64,
        });
    }
    let ops = raw_ops.iter().map(repo_op).collect::<Result<_, _>>()?;
    Ok(CommitFrame {
        seq,
        repo,
        commit,
        rev,
        time,
        too_big,
        blocks,
        ops,
        prev_data,
    })
}

fn repo_op(raw: &Ipld) -> Result<RepoOp, RepoError> {
    let action = match string_of(raw, "action")?.as_str() {
        "create" => Action::Create,
        "update" => Action::Update,
        "delete" => Action::Delete,
        other => {
            return Err(bad_frame(format!(
                "unknown action `{}`",
                crate::error::truncated(other)
            )));
        }
    };
    let cid = match raw.get("cid") {
        Ok(Some(Ipld::Link(cid))) => Some(*cid),
        _ => None,
    };
    if action != Action::Delete && cid.is_none() {
        return Err(bad_frame("a create or update without a `cid`"));
    }
    Ok(RepoOp {
        action,
        path: string_of(raw, "path")?,
        cid,
    })
}

impl CommitFrame {
    /// Checks the commit and writes its operations as Jetstream events, one string each,
    /// stamped `time_us`: the CAR slice's blocks must match their CIDs, its root and the
    /// commit block must be the frame's commit, for the frame's repository and revision,
    /// signed by `key`, and each created or updated record must be in the slice and convert.
    /// Any failure refuses the whole commit. Returns the events and the commit's MST root,
    /// which the next commit's `prev_data` names when the chain holds.
    pub fn events(&self, key: &PublicKey, time_us: u64) -> Result<(Vec<String>, Cid), RepoError> {
        let car = Car::parse(&self.blocks)?;
        if car.roots() != [self.commit] {
            return Err(bad_frame("the CAR slice's root is not the frame's commit"));
        }
        let commit = Commit::decode(self.commit, car.block(&self.commit)?)?;
        if commit.did != self.repo {
            return Err(RepoError::WrongDid {
                did: self.repo.clone(),
                commit_did: commit.did,
            });
        }
        if commit.rev != self.rev {
            return Err(bad_frame(format!(
                "commit rev `{}` is not the frame's `{}`",
                commit.rev, self.rev
            )));
        }
        commit.verify(key)?;
        let mut res = Vec::with_capacity(self.ops.len());
        let mut record_json = String::new();
        for op in &self.ops {
            let (collection, rkey) = op.path.split_once('/').ok_or_else(|| {
                bad_frame(format!(
                    "path `{}` is not collection/rkey",
                    crate::error::truncated(&op.path)
                ))
            })?;
            record_json.clear();
            let cid_text;
            let record = match op.cid.filter(|_| op.action != Action::Delete) {
                Some(cid) => {
                    repo::record_json(&car, &op.path, &cid, &mut record_json)?;
                    cid_text = cid.to_string();
                    Some((cid_text.as_str(), record_json.as_str()))
                }
                None => None,
            };
            let mut event = String::with_capacity(record_json.len() + 256);
            events::write_commit(
                &CommitOp {
                    did: &self.repo,
                    time_us,
                    rev: &self.rev,
                    action: op.action,
                    collection,
                    rkey,
                    record,
                },
                &mut event,
            );
            res.push(event);
        }
        Ok((res, commit.data))
    }
}
