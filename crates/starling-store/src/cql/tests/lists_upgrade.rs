//! The upgrade of a keyspace at schema version 2: its list indexes built at open.

use super::super::schema::meta_row;
use super::*;
use crate::keys::tag;

/// Lists, list items (one deleted), a starter pack joined by two profiles, a like, a block, a
/// list block, a verification and a feed generator: a record of every list index.
fn list_events() -> Vec<String> {
    let (owner, a, b) = (did(1), did(2), did(3));
    let list = format!("at://{owner}/app.bsky.graph.list/3l3qo2vutsw2l");
    let pack = format!("at://{owner}/app.bsky.graph.starterpack/3l3qo2vutsw2p");
    let post = format!("at://{b}/app.bsky.feed.post/{POST_RKEY}");
    let joined =
        format!(r#""displayName":"j","joinedViaStarterPack":{{"uri":"{pack}","cid":"x"}}"#);
    let curate = r#""name":"l","purpose":"app.bsky.graph.defs#curatelist""#.to_owned();
    let generator = r#""did":"did:web:f.test","displayName":"f""#.to_owned();
    let verification = format!(r#""subject":"{a}","handle":"a.test","displayName":"A""#);
    let item = |member: &str| format!(r#""subject":"{member}","list":"{list}""#);
    // (author, collection, the record key's last two characters, the fields but `createdAt`)
    let records: Vec<(&str, &str, &str, String)> = vec![
        (&owner, "graph.list", "2l", curate),
        (
            &owner,
            "graph.starterpack",
            "2p",
            format!(r#""name":"p","list":"{list}""#),
        ),
        (&owner, "feed.generator", "2g", generator),
        (
            &owner,
            "graph.block",
            "2b",
            format!(r#""subject":"{}""#, did(4)),
        ),
        (&owner, "graph.verification", "2v", verification),
        (
            &a,
            "graph.listblock",
            "2k",
            format!(r#""subject":"{list}""#),
        ),
        (&owner, "graph.listitem", "0i", item(&a)),
        (&owner, "graph.listitem", "1i", item(&b)),
        (&owner, "graph.listitem", "2i", item(&owner)),
        (&a, "actor.profile", "", joined.clone()),
        (&b, "actor.profile", "", joined),
    ];
    let mut lines = vec![post_event(&b, 999, POST_RKEY)];
    for (n, (author, collection, key, fields)) in records.into_iter().enumerate() {
        let record = format!(r#"{{{fields},"createdAt":"2024-09-01T00:00:{n:02}.000Z"}}"#);
        let rkey = if key.is_empty() {
            "self".to_owned()
        } else {
            format!("3l3qo2vutsw{key}")
        };
        let (collection, time_us) = (format!("app.bsky.{collection}"), 1_000 + n as u64);
        lines.push(commit(
            author,
            time_us,
            REV1,
            "create",
            &collection,
            &rkey,
            &record,
        ));
    }
    lines.push(like_event(&a, 1_100, REV1, "create", &post));
    // The owner's own item is deleted: the list keeps two members.
    let item = "app.bsky.graph.listitem";
    lines.push(commit(
        &owner,
        1_101,
        REV2,
        "delete",
        item,
        "3l3qo2vutsw2i",
        "",
    ));
    lines
}

/// Every list page of the actors and records of [`list_events`], read two entries at a time,
/// and the starter pack's join count.
fn list_state(store: &CassandraStore) -> (Vec<Vec<crate::ListEntry>>, u64) {
    let whole = |list: &ListOf<'_>| {
        let (mut res, mut after) = (Vec::new(), None::<Vec<u8>>);
        loop {
            let page = store.list_page(list, after.as_deref(), 2).unwrap();
            res.extend(page.entries);
            match page.cursor {
                Some(cursor) => after = Some(cursor),
                None => return res,
            }
        }
    };
    let owner = did(1);
    let list = format!("at://{owner}/app.bsky.graph.list/3l3qo2vutsw2l");
    let pack = format!("at://{owner}/app.bsky.graph.starterpack/3l3qo2vutsw2p");
    let (list, pack) = (
        RecordUri::parse(&list).unwrap(),
        RecordUri::parse(&pack).unwrap(),
    );
    let mut pages = Vec::new();
    for n in 1..=3 {
        let did = did(n);
        for collection in crate::ACTOR_LISTED_COLLECTIONS {
            pages.push(whole(&ListOf::ActorRecords {
                did: &did,
                collection,
            }));
        }
        pages.push(whole(&ListOf::Verifications(store.actor_id(&did).unwrap())));
    }
    let owner = store.actor_id(&owner).unwrap();
    pages.push(whole(&ListOf::ListItems { list, owner }));
    pages.push(whole(&ListOf::Joins(pack)));
    (pages, store.starter_pack_joins(&pack).unwrap())
}

/// Sets `ks` back to schema version 2, as a Starling written before version 3 left it: the
/// version row rewritten (the table emptied and refilled, since the version's write timestamp
/// is the version), and when `strip`, the list entries and join counts removed.
fn back_to_version_2(options: &CassandraOptions, strip: bool) {
    let ks = &options.keyspace;
    let cql = RawCql::connect(options);
    set_schema_version(&cql, ks, 2);
    if !strip {
        return;
    }
    let list_tags = [
        tag::ACTOR_RECORDS,
        tag::LISTITEM_BY_TIME,
        tag::JOIN_BY_STARTERPACK,
        tag::VERIFICATION_BY_SUBJECT,
    ];
    let partitions: BTreeSet<(Vec<u8>, i64)> = cql
        .rows::<(Vec<u8>, i64)>(format!("SELECT p, b FROM {ks}.index_entries"))
        .into_iter()
        .collect();
    let mut n_stripped = 0;
    for (p, b) in partitions
        .into_iter()
        .filter(|(p, _)| list_tags.contains(&p[0]))
    {
        cql.run(format!(
            "DELETE FROM {ks}.index_entries WHERE p = 0x{} AND b = {b}",
            hex(&p)
        ));
        n_stripped += 1;
    }
    let is_join =
        |k: &[u8]| k[0] == tag::RECORD_COUNT && k.last() == Some(&crate::keys::count::JOINS);
    for (k,) in cql.rows::<(Vec<u8>,)>(format!("SELECT k FROM {ks}.counts")) {
        if is_join(&k) {
            cql.run(format!("DELETE FROM {ks}.counts WHERE k = 0x{}", hex(&k)));
            n_stripped += 1;
        }
    }
    assert!(
        n_stripped >= 10,
        "stripped {n_stripped} list partitions and counts"
    );
}

// Checks the upgrade from schema version 2. A keyspace written before the list indexes existed
// (simulated: its list entries and join counts removed, its version row set back to 2) gets
// them built at open, equal to what ingest wrote; one written after (the entries there) is
// built again without counting a join twice. Either way the version becomes the current one.
#[test]
fn a_version_2_keyspace_gets_its_list_indexes_built() {
    let Some(options) = test_keyspace("lists_upgrade") else {
        return;
    };
    let store = CassandraStore::open(&options).unwrap();
    apply(&store, &list_events()).unwrap();
    let want = list_state(&store);
    assert_eq!(want.1, 2, "two profiles joined through the pack");
    assert!(
        want.0.iter().filter(|page| !page.is_empty()).count() >= 8,
        "{want:?}"
    );
    drop(store);
    for strip in [true, false] {
        back_to_version_2(&options, strip);
        let store = CassandraStore::open(&options).unwrap();
        assert_eq!(list_state(&store), want, "strip {strip}");
        let version = store.block(meta_row(&store.session, &store.st, "schema", "version"));
        assert_eq!(
            version.unwrap(),
            Some(SCHEMA_VERSION.to_be_bytes().to_vec())
        );
        drop(store);
    }
    let store = CassandraStore::open(&options).unwrap();
    store.drop_keyspace(&options.keyspace).unwrap();
}
