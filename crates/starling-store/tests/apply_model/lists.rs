//! The time-ordered lists against the model: each actor's records of every listed collection,
//! each record's reposts and quotes, each list's items (its owner's), and each starter pack's
//! joins and their count, all recomputed from the model's live records.

use std::collections::BTreeSet;

use serde_json::Value;
use starling_core::syntax::RecordUri;
use starling_store::{ACTOR_LISTED_COLLECTIONS, ListOf, Store};

use super::{Model, whole_list};

/// (author, URI, record, sort_at) of every live record of `collection` in the model.
fn live<'m>(
    model: &'m Model,
    collection: &'m str,
) -> impl Iterator<Item = (String, String, Value, i64)> + 'm {
    model
        .records
        .iter()
        .filter(move |((_, c, _), slot)| c == collection && slot.json.is_some())
        .map(|((did, c, rkey), slot)| {
            let record: Value = serde_json::from_str(slot.json.as_ref().unwrap()).unwrap();
            (
                did.clone(),
                format!("at://{did}/{c}/{rkey}"),
                record,
                slot.sort_at,
            )
        })
}

/// Newest first, ties in any order: compares the sort_at sequences, then the sets.
fn same(mut have: Vec<(i64, String)>, mut want: Vec<(i64, String)>, what: &str) {
    want.sort_by_key(|x| std::cmp::Reverse(x.0));
    let times = |v: &[(i64, String)]| v.iter().map(|x| x.0).collect::<Vec<_>>();
    assert_eq!(times(&have), times(&want), "{what}: order");
    have.sort();
    want.sort();
    assert_eq!(have, want, "{what}");
}

/// The URI a post quotes, as a client writes it (`embed.record` or, with media,
/// `embed.record.record`).
fn quoted(record: &Value) -> Option<&str> {
    let embed = &record["embed"]["record"];
    embed["record"]["uri"].as_str().or(embed["uri"].as_str())
}

/// The record a record of `collection` points at, as its JSON names it: what an actor's record
/// entry keeps.
fn target(collection: &str, record: &Value) -> Option<String> {
    let uri = match collection {
        "app.bsky.feed.like" | "app.bsky.feed.repost" => &record["subject"]["uri"],
        "app.bsky.graph.listblock" => &record["subject"],
        "app.bsky.graph.starterpack" => &record["list"],
        _ => return None,
    };
    uri.as_str().map(str::to_owned)
}

/// Every entry of `list` with the target it keeps.
fn targets<S: Store>(store: &S, list: &ListOf<'_>) -> BTreeSet<(String, Option<String>)> {
    let mut res = BTreeSet::new();
    let mut after: Option<Vec<u8>> = None;
    let mut cursors = BTreeSet::new();
    loop {
        let page = store.list_page(list, after.as_deref(), 100).unwrap();
        res.extend(page.entries.into_iter().map(|e| (e.uri, e.target)));
        match page.cursor {
            // A cursor given twice would walk the same pages forever: fail instead.
            Some(cursor) => {
                assert!(cursors.insert(cursor.clone()), "{list:?}: a cursor repeats");
                after = Some(cursor);
            }
            None => return res,
        }
    }
}

/// Checks every time-ordered list the model's records make; returns how many entries they
/// hold, so that callers can see the input exercised them.
pub fn check_time_lists<S: Store>(store: &S, model: &Model) -> usize {
    let mut n_entries = 0;
    let mut check = |have: Vec<(i64, String)>, want: Vec<(i64, String)>, what: &str| {
        n_entries += want.len();
        same(have, want, what);
    };
    for did in &model.authors {
        for collection in ACTOR_LISTED_COLLECTIONS {
            let want = live(model, collection)
                .filter(|(author, ..)| author == did)
                .map(|(_, uri, _, t)| (t, uri))
                .collect();
            let list = ListOf::ActorRecords { did, collection };
            check(whole_list(store, &list), want, collection);
            let want: BTreeSet<(String, Option<String>)> = live(model, collection)
                .filter(|(author, ..)| author == did)
                .map(|(_, uri, record, _)| (uri, target(collection, &record)))
                .collect();
            assert_eq!(targets(store, &list), want, "{collection} targets");
        }
    }
    let subjects: BTreeSet<String> = model
        .records
        .keys()
        .map(|(did, c, rkey)| format!("at://{did}/{c}/{rkey}"))
        .collect();
    for subject in &subjects {
        let parsed = RecordUri::parse(subject).unwrap();
        let reposts = live(model, "app.bsky.feed.repost")
            .filter(|(_, _, record, _)| record["subject"]["uri"] == subject.as_str())
            .map(|(_, uri, _, t)| (t, uri))
            .collect();
        check(
            whole_list(store, &ListOf::Reposts(parsed)),
            reposts,
            "reposts",
        );
        let quotes = live(model, "app.bsky.feed.post")
            .filter(|(_, _, record, _)| quoted(record) == Some(subject.as_str()))
            .map(|(_, uri, _, t)| (t, uri))
            .collect();
        check(whole_list(store, &ListOf::Quotes(parsed)), quotes, "quotes");
    }
    let lists: BTreeSet<String> = live(model, "app.bsky.graph.listitem")
        .filter_map(|(_, _, record, _)| record["list"].as_str().map(str::to_owned))
        .collect();
    for list in &lists {
        let parsed = RecordUri::parse(list).unwrap();
        let Some(owner) = store.actor_id(parsed.did) else {
            continue;
        };
        let items = live(model, "app.bsky.graph.listitem")
            .filter(|(author, _, record, _)| {
                record["list"] == list.as_str() && list.starts_with(&format!("at://{author}/"))
            })
            .map(|(_, uri, _, t)| (t, uri))
            .collect();
        let list = ListOf::ListItems {
            list: parsed,
            owner,
        };
        check(whole_list(store, &list), items, "list items");
    }
    let packs: BTreeSet<String> = live(model, "app.bsky.actor.profile")
        .filter_map(|(_, _, record, _)| {
            record["joinedViaStarterPack"]["uri"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    for pack in &packs {
        let parsed = RecordUri::parse(pack).unwrap();
        let joins: Vec<(i64, String)> = live(model, "app.bsky.actor.profile")
            .filter(|(_, _, record, _)| record["joinedViaStarterPack"]["uri"] == pack.as_str())
            .map(|(_, uri, _, t)| (t, uri))
            .collect();
        assert_eq!(
            store.starter_pack_joins(&parsed).unwrap(),
            joins.len() as u64,
            "joins of {pack}"
        );
        check(whole_list(store, &ListOf::Joins(parsed)), joins, "joins");
    }
    n_entries
}

/// The record of a random commit of collection `index` 7..=10 (a profile joined through
/// `target_did`'s starter pack `rkey`, a feed generator, a starter pack of `did`'s list
/// `rkey`, a list): its collection and JSON.
pub fn record(index: usize, did: &str, target_did: &str, rkey: &str) -> (&'static str, String) {
    let created = "2024-09-01T00:00:00.000Z";
    match index {
        7 => (
            "app.bsky.actor.profile",
            format!(
                r#"{{"displayName":"d","joinedViaStarterPack":{{"uri":"at://{target_did}/app.bsky.graph.starterpack/{rkey}","cid":"bafyreiaaaaaaaa"}},"createdAt":"{created}"}}"#
            ),
        ),
        8 => (
            "app.bsky.feed.generator",
            format!(
                r#"{{"did":"did:web:feed.example.com","displayName":"g","createdAt":"{created}"}}"#
            ),
        ),
        9 => (
            "app.bsky.graph.starterpack",
            format!(
                r#"{{"name":"s","list":"at://{did}/app.bsky.graph.list/{rkey}","createdAt":"{created}"}}"#
            ),
        ),
        _ => (
            "app.bsky.graph.list",
            format!(
                r#"{{"name":"l","purpose":"app.bsky.graph.defs#curatelist","createdAt":"{created}"}}"#
            ),
        ),
    }
}
