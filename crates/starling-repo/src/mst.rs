//! The Merkle Search Tree of a repository: walking it in key order and checking its shape.
//!
//! A node is `{l: link | null, e: [{p, k, v, t: link | null}]}`: `l` the subtree left of every
//! entry, each entry a key (the first `p` bytes of the previous key in the node followed by
//! `k`), its record CID `v`, and `t` the subtree right of it. A key's layer is the number of
//! leading zero bits of its SHA-256, halved (fanout 4). Checked here: every entry of a node has
//! the node's layer, every subtree a lower one and at least one entry, keys strictly increase
//! over the whole walk, and every key is `collection/rkey` with a valid NSID and record key.
//! A DAG that reuses a subtree repeats keys and so fails the order check at once.

use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use sha2::{Digest, Sha256};

use crate::RepoError;
use crate::car::Car;

/// The longest MST key accepted: an NSID (at most 317 bytes), a slash and a record key (at
/// most 512 bytes).
pub const KEY_BYTES_MAX: usize = 1024;

/// The deepest path from the root accepted: layers go down one a level from at most 128 (a
/// 256-bit digest in pairs of bits), so a valid tree is at most 129 nodes deep.
pub const DEPTH_MAX: usize = 130;

/// The layer of `key`: leading zero bits of its SHA-256, in pairs.
pub fn key_layer(key: &[u8]) -> u32 {
    let digest = Sha256::digest(key);
    let mut zeros = 0;
    for byte in digest {
        zeros += byte.leading_zeros();
        if byte != 0 {
            break;
        }
    }
    zeros / 2
}

/// One leaf of the tree: `collection/rkey` and the record's CID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// `collection/rkey`.
    pub key: String,
    /// The record's CID.
    pub cid: Cid,
}

impl Leaf {
    /// The collection and the record key.
    pub fn split(&self) -> (&str, &str) {
        self.key.split_once('/').unwrap_or((&self.key, ""))
    }
}

/// Walks the tree rooted at `root` in key order, checking it; every node must be in `car`.
pub fn walk(car: &Car<'_>, root: &Cid) -> Result<Vec<Leaf>, RepoError> {
    let mut res = Vec::new();
    let node = Node::load(car, root)?;
    if node.entries.is_empty() && node.left.is_none() {
        return Ok(res);
    }
    walk_node(car, root, node, None, 0, &mut res)?;
    Ok(res)
}

/// A decoded MST node.
struct Node {
    left: Option<Cid>,
    entries: Vec<Entry>,
}

struct Entry {
    key: Vec<u8>,
    value: Cid,
    right: Option<Cid>,
}

fn bad_mst(cid: &Cid, detail: impl Into<String>) -> RepoError {
    RepoError::BadMst {
        cid: cid.to_string(),
        detail: detail.into(),
    }
}

impl Node {
    fn load(car: &Car<'_>, cid: &Cid) -> Result<Node, RepoError> {
        let bytes = car.block(cid)?;
        let ipld: Ipld =
            serde_ipld_dagcbor::from_slice(bytes).map_err(|err| RepoError::BadBlock {
                cid: cid.to_string(),
                what: "MST node",
                detail: err.to_string(),
            })?;
        let left = optional_link(cid, ipld.get("l").ok().flatten())?;
        let Ok(Some(Ipld::List(raw_entries))) = ipld.get("e") else {
            return Err(bad_mst(cid, "no entry list `e`"));
        };
        let mut entries: Vec<Entry> = Vec::with_capacity(raw_entries.len());
        for raw in raw_entries {
            let field = |name: &str| raw.get(name).ok().flatten();
            let (
                Some(Ipld::Integer(prefix_len)),
                Some(Ipld::Bytes(suffix)),
                Some(Ipld::Link(value)),
            ) = (field("p"), field("k"), field("v"))
            else {
                return Err(bad_mst(cid, "an entry lacks `p`, `k` or `v`"));
            };
            let previous: &[u8] = entries.last().map_or(&[], |entry| &entry.key);
            let prefix = usize::try_from(*prefix_len)
                .ok()
                .and_then(|len| previous.get(..len))
                .ok_or_else(|| {
                    bad_mst(
                        cid,
                        format!("prefix length {prefix_len} is longer than the previous key"),
                    )
                })?;
            let mut key = Vec::with_capacity(prefix.len() + suffix.len());
            key.extend_from_slice(prefix);
            key.extend_from_slice(suffix);
            if key.len() > KEY_BYTES_MAX {
                return Err(bad_mst(cid, format!("a key of {} bytes", key.len())));
            }
            entries.push(Entry {
                key,
                value: *value,
                right: optional_link(cid, field("t"))?,
            });
        }
        Ok(Node { left, entries })
    }

    /// The node's layer, from its first key (every key must share it); `None` for a node
    /// with no entries, which only points down (its layer is one below its parent's).
    fn layer(&self, cid: &Cid) -> Result<Option<u32>, RepoError> {
        let Some(first) = self.entries.first() else {
            if self.left.is_none() {
                return Err(bad_mst(cid, "an empty node below the root"));
            }
            return Ok(None);
        };
        let layer = key_layer(&first.key);
        if self
            .entries
            .iter()
            .any(|entry| key_layer(&entry.key) != layer)
        {
            return Err(bad_mst(cid, "keys of different layers in one node"));
        }
        Ok(Some(layer))
    }
}

fn optional_link(cid: &Cid, value: Option<&Ipld>) -> Result<Option<Cid>, RepoError> {
    match value {
        None | Some(Ipld::Null) => Ok(None),
        Some(Ipld::Link(link)) => Ok(Some(*link)),
        Some(_) => Err(bad_mst(cid, "a subtree is neither null nor a link")),
    }
}

/// Walks `node` (the block `cid`), which must be on `expected_layer` when one is known.
fn walk_node(
    car: &Car<'_>,
    cid: &Cid,
    node: Node,
    expected_layer: Option<u32>,
    depth: usize,
    out: &mut Vec<Leaf>,
) -> Result<(), RepoError> {
    if depth > DEPTH_MAX {
        return Err(bad_mst(
            cid,
            format!("the tree is deeper than {DEPTH_MAX} nodes"),
        ));
    }
    let layer = match (node.layer(cid)?, expected_layer) {
        (Some(layer), Some(expected)) if layer != expected => {
            return Err(bad_mst(
                cid,
                format!("keys of layer {layer} where layer {expected} belongs"),
            ));
        }
        (Some(layer), _) | (None, Some(layer)) => Some(layer),
        (None, None) => None,
    };
    let child_layer = match layer {
        Some(0) => {
            if node.left.is_some() || node.entries.iter().any(|entry| entry.right.is_some()) {
                return Err(bad_mst(cid, "a subtree below layer 0"));
            }
            None
        }
        Some(layer) => Some(layer - 1),
        None => None,
    };
    if let Some(left) = &node.left {
        walk_node(
            car,
            left,
            Node::load(car, left)?,
            child_layer,
            depth + 1,
            out,
        )?;
    }
    for entry in node.entries {
        let key = String::from_utf8(entry.key).map_err(|_| bad_mst(cid, "a key is not UTF-8"))?;
        let valid = key.split_once('/').is_some_and(|(collection, rkey)| {
            starling_core::syntax::is_valid_nsid(collection)
                && starling_core::syntax::is_valid_record_key(rkey)
        });
        if !valid {
            return Err(bad_mst(
                cid,
                format!(
                    "key `{}` is not collection/rkey",
                    crate::error::truncated(&key)
                ),
            ));
        }
        if out.last().is_some_and(|last| last.key >= key) {
            return Err(bad_mst(cid, format!("key `{key}` is out of order")));
        }
        out.push(Leaf {
            key,
            cid: entry.value,
        });
        if let Some(right) = &entry.right {
            walk_node(
                car,
                right,
                Node::load(car, right)?,
                child_layer,
                depth + 1,
                out,
            )?;
        }
    }
    Ok(())
}
