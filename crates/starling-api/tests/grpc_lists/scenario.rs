//! The scenarios of the list RPC tests, written as records, and the test's own readings of
//! them (newest first, the gate rules).

use serde_json::{Value, json};

pub const A: &str = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa";
pub const B: &str = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb";
pub const C: &str = "did:plc:cccccccccccccccccccccccc";
pub const D: &str = "did:plc:dddddddddddddddddddddddd";

/// The one trusted verifier the service is given.
pub const TRUSTED: &str = A;

const POST: &str = "app.bsky.feed.post";
const LIST: &str = "app.bsky.graph.list";
const ITEM: &str = "app.bsky.graph.listitem";

/// One record of a scenario.
pub struct Rec {
    pub did: &'static str,
    pub collection: &'static str,
    pub rkey: String,
    pub record: Value,
    /// `createdAt`, in µs (also `min(createdAt, indexedAt)`: every event comes later).
    pub at_us: i64,
}

impl Rec {
    pub fn uri(&self) -> String {
        format!("at://{}/{}/{}", self.did, self.collection, self.rkey)
    }
}

pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

fn iso(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        micros.rem_euclid(1_000_000)
    )
}

/// Writes a scenario's records a second apart, from an hour ago.
pub struct Builder {
    pub recs: Vec<Rec>,
    next_us: i64,
}

impl Builder {
    pub fn new() -> Builder {
        Builder {
            recs: Vec::new(),
            next_us: now_us() - 3_600_000_000,
        }
    }

    /// Adds a record created at `at_us` with record key `rkey` (else a TID); its URI.
    pub fn add_at(
        &mut self,
        did: &'static str,
        collection: &'static str,
        mut record: Value,
        at_us: i64,
        rkey: Option<&str>,
    ) -> String {
        record["createdAt"] = json!(iso(at_us));
        let rkey = rkey.map_or_else(
            || starling_core::sample::tid(at_us as u64, self.recs.len() as u16),
            str::to_owned,
        );
        self.recs.push(Rec {
            did,
            collection,
            rkey,
            record,
            at_us,
        });
        self.recs.last().unwrap().uri()
    }

    /// Adds a record a second after the previous one.
    pub fn add(&mut self, did: &'static str, collection: &'static str, record: Value) -> String {
        self.next_us += 1_000_000;
        self.add_at(did, collection, record, self.next_us, None)
    }

    /// Adds a record with the record key `rkey`, a second after the previous one.
    pub fn add_keyed(
        &mut self,
        did: &'static str,
        collection: &'static str,
        record: Value,
        rkey: &str,
    ) -> String {
        self.next_us += 1_000_000;
        self.add_at(did, collection, record, self.next_us, Some(rkey))
    }

    /// The record key of the newest record.
    pub fn last_rkey(&self) -> String {
        self.recs.last().unwrap().rkey.clone()
    }
}

fn strong(uri: &str) -> Value {
    json!({"uri": uri, "cid": "bafyreiaaaaaaaa"})
}

/// Lists, list items (one in B's list by someone else, which is not one of its items), a list
/// block, a starter pack, a feed generator and posts.
fn lists(b: &mut Builder) -> (String, Vec<String>) {
    let modlist = b.add(
        B,
        LIST,
        json!({"name": "m", "purpose": "app.bsky.graph.defs#modlist"}),
    );
    let curlist = b.add(
        B,
        LIST,
        json!({"name": "c", "purpose": "app.bsky.graph.defs#curatelist"}),
    );
    let item = |subject: &str, list: &str| json!({"subject": subject, "list": list});
    b.add(B, ITEM, item(C, &modlist));
    b.add(B, ITEM, item(C, &curlist));
    b.add(B, ITEM, item(D, &curlist));
    b.add(A, ITEM, item(A, &curlist));
    b.add(A, "app.bsky.graph.listblock", json!({"subject": modlist}));
    let pack = json!({"name": "sp", "list": curlist});
    let pack = b.add(B, "app.bsky.graph.starterpack", pack);
    let generator = json!({"did": "did:web:feed.example.com", "displayName": "g"});
    b.add(B, "app.bsky.feed.generator", generator);
    let posts = [C, D, C, D].map(|author| b.add(author, POST, json!({"text": "hi"})));
    (pack, posts.to_vec())
}

/// The main scenario: [`lists`], then likes, reposts, quotes, a block, two joins through the
/// starter pack (D's a month ago), verifications of C by A (trusted) and D, a labeler, a chat
/// declaration and a status.
pub fn scenario() -> Vec<Rec> {
    let mut b = Builder::new();
    let (pack, posts) = lists(&mut b);
    let (c_post, d_post) = (&posts[0], &posts[3]);
    b.add(A, "app.bsky.feed.like", json!({"subject": strong(c_post)}));
    b.add(A, "app.bsky.feed.like", json!({"subject": strong(d_post)}));
    b.add(B, "app.bsky.feed.like", json!({"subject": strong(c_post)}));
    b.add(
        A,
        "app.bsky.feed.repost",
        json!({"subject": strong(c_post)}),
    );
    b.add(
        D,
        "app.bsky.feed.repost",
        json!({"subject": strong(c_post)}),
    );
    let quote =
        json!({"text": "q", "embed": {"$type": "app.bsky.embed.record", "record": strong(c_post)}});
    b.add(D, POST, quote.clone());
    b.add(A, POST, quote);
    b.add(A, "app.bsky.graph.block", json!({"subject": D}));
    let joined = json!({"displayName": "j", "joinedViaStarterPack": strong(&pack)});
    b.add_keyed(C, "app.bsky.actor.profile", joined.clone(), "self");
    let month_ago = now_us() - 30 * 86_400_000_000;
    b.add_at(D, "app.bsky.actor.profile", joined, month_ago, Some("self"));
    for verifier in [A, D] {
        let verification = json!({"subject": C, "handle": "c.test", "displayName": "See"});
        b.add(verifier, "app.bsky.graph.verification", verification);
    }
    let labeler = json!({"policies": {"labelValues": []}});
    b.add_keyed(B, "app.bsky.labeler.service", labeler, "self");
    let chat = json!({"allowIncoming": "following"});
    b.add_keyed(C, "chat.bsky.actor.declaration", chat, "self");
    let status = json!({"status": "app.bsky.actor.status#live", "durationMinutes": 30});
    b.add_keyed(D, "app.bsky.actor.status", status, "self");
    b.recs
}

/// Thread gates and post gates: B's root post allows replies from those B follows (C), A's
/// root allows mentioned accounts (C), and C's post disables embedding; everyone replies to
/// both roots, and A, C and D quote C's post.
pub fn gate_scenario() -> Vec<Rec> {
    let mut b = Builder::new();
    b.add(B, "app.bsky.graph.follow", json!({"subject": C}));
    b.add(D, "app.bsky.graph.follow", json!({"subject": B}));
    let rule = |kind: &str| json!({"$type": format!("app.bsky.feed.threadgate#{kind}")});
    let b_root = b.add(B, POST, json!({"text": "root"}));
    let gate = json!({"post": b_root, "allow": [rule("followingRule")]});
    b.add_keyed(B, "app.bsky.feed.threadgate", gate, &b.last_rkey());
    let mention = json!([{"index": {"byteStart": 0, "byteEnd": 1},
        "features": [{"$type": "app.bsky.richtext.facet#mention", "did": C}]}]);
    let a_root = b.add(A, POST, json!({"text": "r", "facets": mention}));
    let gate = json!({"post": a_root, "allow": [rule("mentionRule")]});
    b.add_keyed(A, "app.bsky.feed.threadgate", gate, &b.last_rkey());
    let c_post = b.add(C, POST, json!({"text": "c"}));
    let disable = json!([{"$type": "app.bsky.feed.postgate#disableRule"}]);
    let gate = json!({"post": c_post, "embeddingRules": disable});
    b.add_keyed(C, "app.bsky.feed.postgate", gate, &b.last_rkey());
    for root in [&b_root, &a_root] {
        for author in [A, B, C, D] {
            let reply = json!({"root": strong(root), "parent": strong(root)});
            b.add(author, POST, json!({"text": "re", "reply": reply}));
        }
    }
    for author in [A, C, D] {
        let embed = json!({"$type": "app.bsky.embed.record", "record": strong(&c_post)});
        b.add(author, POST, json!({"text": "q", "embed": embed}));
    }
    b.recs
}

pub fn event(rec: &Rec, time_us: i64) -> String {
    json!({
        "did": rec.did,
        "time_us": time_us,
        "kind": "commit",
        "commit": {
            "rev": starling_core::sample::tid(time_us as u64, 0),
            "operation": "create",
            "collection": rec.collection,
            "rkey": rec.rkey,
            "record": rec.record,
            "cid": "bafyreiaaaaaaaa",
        }
    })
    .to_string()
}

/// The URIs of the records `keep` selects, newest first.
pub fn newest_first(recs: &[Rec], keep: impl Fn(&Rec) -> bool) -> Vec<String> {
    let mut kept: Vec<&Rec> = recs.iter().filter(|r| keep(r)).collect();
    kept.sort_by_key(|r| std::cmp::Reverse(r.at_us));
    kept.into_iter().map(Rec::uri).collect()
}

/// Reads a whole list one entry a page: `page(cursor)` answers (uris, next cursor).
pub async fn one_at_a_time<F, Fut>(mut page: F) -> Vec<String>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = (Vec<String>, String)>,
{
    let mut res = Vec::new();
    let mut cursor = String::new();
    for _ in 0..100 {
        let (uris, next) = page(cursor).await;
        assert!(uris.len() <= 1);
        res.extend(uris);
        if next.is_empty() {
            return res;
        }
        cursor = next;
    }
    panic!("a list of the scenario never ended")
}

pub fn quotes(rec: &Rec, subject: &str) -> bool {
    rec.record["embed"]["record"]["uri"] == subject
}

/// The test's own reading of the gate rules over `recs`: (has thread gate, has post gate,
/// violates thread gate, violates embedding rules) of a post.
pub fn gate_flags(recs: &[Rec], post: &Rec) -> (bool, bool, bool, bool) {
    let gate_of = |collection: &str, uri: &str| {
        recs.iter()
            .find(|r| r.collection == collection && r.record["post"] == uri)
            .map(|r| &r.record)
    };
    let follows = |a: &str, b: &str| {
        recs.iter().any(|r| {
            r.did == a && r.collection == "app.bsky.graph.follow" && r.record["subject"] == b
        })
    };
    let uri = post.uri();
    let violates_thread = post.record["reply"]["root"]["uri"]
        .as_str()
        .is_some_and(|root| {
            let owner = &root["at://".len()..root.find("/app.bsky").unwrap()];
            let Some(gate) = gate_of("app.bsky.feed.threadgate", root) else {
                return false;
            };
            let kinds: Vec<&str> = gate["allow"]
                .as_array()
                .unwrap()
                .iter()
                .map(|rule| rule["$type"].as_str().unwrap())
                .collect();
            let root_rec = recs.iter().find(|r| r.uri() == root).unwrap();
            let mentioned = root_rec.record["facets"].to_string().contains(post.did);
            let allowed = post.did == owner
                || (kinds.contains(&"app.bsky.feed.threadgate#followingRule")
                    && follows(owner, post.did))
                || (kinds.contains(&"app.bsky.feed.threadgate#followerRule")
                    && follows(post.did, owner))
                || (kinds.contains(&"app.bsky.feed.threadgate#mentionRule") && mentioned);
            !allowed
        });
    let violates_embed = post.record["embed"]["record"]["uri"]
        .as_str()
        .is_some_and(|quoted| {
            !quoted.starts_with(&format!("at://{}/", post.did))
                && gate_of("app.bsky.feed.postgate", quoted).is_some()
        });
    (
        gate_of("app.bsky.feed.threadgate", &uri).is_some(),
        gate_of("app.bsky.feed.postgate", &uri).is_some(),
        violates_thread,
        violates_embed,
    )
}
