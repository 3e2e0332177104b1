//! Thread gates and post gates in `PostRecordMeta`, by the reference's rules
//! (`parseThreadGate`, `violatesThreadGate`, `parsePostgate`): whether a post has a thread
//! gate or a post gate, whether a reply breaks its thread root's gate, and whether a quote
//! embeds a post whose gate disables embedding.
//!
//! A gate is the record of the gated post's author with the post's record key in
//! `app.bsky.feed.threadgate` or `app.bsky.feed.postgate` whose `post` names the post (the
//! reference refuses any other). The flags are worked out when a post is read, from the
//! stored gates, follows (the graph) and list items: a gate written, changed or deleted
//! after the reply or quote counts at once. The reference works them out once, when it
//! indexes the reply or quote; the two differ only for a gate or a follow that changed since.
//! Hidden replies and detached quotes are in the gate records themselves, which the AppView
//! reads with GetThreadGateRecords and GetPostgateRecords.

use serde_json::Value;
use starling_core::jetstream::nsid;
use starling_core::syntax::RecordUri;
use starling_store::Store;
use tonic::Status;

use super::proto::PostRecordMeta;
use super::rpc::internal;
use crate::AppState;

/// The list rules of one thread gate checked, at most.
pub const GATE_LISTS_MAX: usize = 100;

/// The stored gate (`collection`) of the post `post`, parsed, if there is one.
fn gate<S: Store>(
    store: &S,
    collection: &str,
    post: &RecordUri<'_>,
) -> Result<Option<Value>, Status> {
    let Some(record) = store
        .record(post.did, collection, post.rkey)
        .map_err(internal)?
    else {
        return Ok(None);
    };
    let Ok(gate) = serde_json::from_str::<Value>(&record.json) else {
        return Ok(None);
    };
    let names_post = at(&gate, "post")
        .as_str()
        .and_then(RecordUri::parse)
        .is_some_and(|named| named == *post);
    Ok(names_post.then_some(gate))
}

/// Fills the gate flags of `meta` for the post `uri` whose record is `json`.
pub(crate) fn fill<S: Store>(
    state: &AppState<S>,
    uri: &RecordUri<'_>,
    json: &str,
    meta: &mut PostRecordMeta,
) -> Result<(), Status> {
    let store = &*state.store;
    meta.has_thread_gate = gate(store, nsid::THREADGATE, uri)?.is_some();
    meta.has_post_gate = gate(store, nsid::POSTGATE, uri)?.is_some();
    let Ok(post) = serde_json::from_str::<Value>(json) else {
        return Ok(());
    };
    if let Some(root) = at(at(at(&post, "reply"), "root"), "uri")
        .as_str()
        .and_then(RecordUri::parse)
    {
        meta.violates_thread_gate = violates_thread_gate(state, uri.did, &root)?;
    }
    let embed = at(at(&post, "embed"), "record");
    let quoted = at(at(embed, "record"), "uri")
        .as_str()
        .or(at(embed, "uri").as_str())
        .and_then(RecordUri::parse);
    if let Some(quoted) = quoted.filter(|quoted| quoted.collection == nsid::POST) {
        meta.violates_embedding_rules = violates_embedding_rules(store, uri.did, &quoted)?;
    }
    Ok(())
}

/// Whether `replier`'s reply in the thread of `root` breaks the root's thread gate.
pub(crate) fn violates_thread_gate<S: Store>(
    state: &AppState<S>,
    replier: &str,
    root: &RecordUri<'_>,
) -> Result<bool, Status> {
    let store = &*state.store;
    if replier == root.did {
        return Ok(false);
    }
    // A gate without `allow` allows everyone; an empty `allow` allows nobody.
    let Some(gate) = gate(store, nsid::THREADGATE, root)? else {
        return Ok(false);
    };
    let Some(rules) = at(&gate, "allow").as_array() else {
        return Ok(false);
    };
    let has_rule = |kind: &str| rules.iter().any(|rule| at(rule, "$type") == kind);
    if has_rule("app.bsky.feed.threadgate#mentionRule") {
        let root_post = store
            .record(root.did, root.collection, root.rkey)
            .map_err(internal)?;
        let mentioned = root_post
            .and_then(|post| serde_json::from_str::<Value>(&post.json).ok())
            .is_some_and(|post| mentions(&post, replier));
        if mentioned {
            return Ok(false);
        }
    }
    let (Some(replier_id), Some(owner_id)) = (store.actor_id(replier), store.actor_id(root.did))
    else {
        return Ok(true);
    };
    if has_rule("app.bsky.feed.threadgate#followingRule")
        && state.graph.does_follow(owner_id, replier_id)
    {
        return Ok(false);
    }
    if has_rule("app.bsky.feed.threadgate#followerRule")
        && state.graph.does_follow(replier_id, owner_id)
    {
        return Ok(false);
    }
    let lists = rules
        .iter()
        .filter(|rule| at(rule, "$type") == "app.bsky.feed.threadgate#listRule")
        .filter_map(|rule| at(rule, "list").as_str())
        .take(GATE_LISTS_MAX);
    for list in lists {
        let Some(list) = RecordUri::parse(list) else {
            continue;
        };
        if store
            .list_item_uri(&list, replier_id)
            .map_err(internal)?
            .is_some()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether a post's mention facets name `did`.
fn mentions(post: &Value, did: &str) -> bool {
    at(post, "facets").as_array().is_some_and(|facets| {
        facets.iter().any(|facet| {
            at(facet, "features").as_array().is_some_and(|features| {
                features.iter().any(|feature| {
                    at(feature, "$type") == "app.bsky.richtext.facet#mention"
                        && at(feature, "did") == did
                })
            })
        })
    })
}

/// Whether `author`'s post may not embed `quoted`: its post gate disables embedding (the
/// quoted post's author may always).
pub(crate) fn violates_embedding_rules<S: Store>(
    store: &S,
    author: &str,
    quoted: &RecordUri<'_>,
) -> Result<bool, Status> {
    if author == quoted.did {
        return Ok(false);
    }
    let Some(gate) = gate(store, nsid::POSTGATE, quoted)? else {
        return Ok(false);
    };
    Ok(at(&gate, "embeddingRules").as_array().is_some_and(|rules| {
        rules
            .iter()
            .any(|rule| at(rule, "$type") == "app.bsky.feed.postgate#disableRule")
    }))
}

/// A JSON object's field, or null.
fn at<'v>(value: &'v Value, name: &str) -> &'v Value {
    value.get(name).unwrap_or(&Value::Null)
}
