//! The test's model of the sample stream: its live records, read by the test's own rules.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use starling_core::syntax::parse_datetime_micros;

/// Live records of the sample stream: (did, collection, rkey) -> (JSON, sort_at).
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) records: BTreeMap<(String, String, String), (Value, i64)>,
    /// Live reposts out of the feeds: their post was deleted or replaced after them.
    unfed: BTreeSet<(String, String, String)>,
}

impl Model {
    pub(crate) fn of(lines: &[String]) -> Model {
        let mut model = Model::default();
        for line in lines {
            let event: Value = serde_json::from_str(line).unwrap();
            if event["kind"] != "commit" {
                continue;
            }
            let commit = &event["commit"];
            let key = (
                event["did"].as_str().unwrap().to_owned(),
                commit["collection"].as_str().unwrap().to_owned(),
                commit["rkey"].as_str().unwrap().to_owned(),
            );
            if key.1 == "app.bsky.feed.post" && model.records.contains_key(&key) {
                model.unfeed_reposts_of(&format!("at://{}/{}/{}", key.0, key.1, key.2));
            }
            model.unfed.remove(&key);
            if commit["operation"] == "delete" {
                model.records.remove(&key);
            } else {
                let time_us = event["time_us"].as_i64().unwrap();
                let sort_at = commit["record"]["createdAt"]
                    .as_str()
                    .and_then(parse_datetime_micros)
                    .map_or(time_us, |created| created.min(time_us));
                model
                    .records
                    .insert(key, (commit["record"].clone(), sort_at));
            }
        }
        model
    }

    /// A post leaving the index takes its live reposts out of the feeds.
    pub(crate) fn unfeed_reposts_of(&mut self, uri: &str) {
        let reposts: Vec<_> = self
            .live("app.bsky.feed.repost")
            .filter(|(_, _, record, _)| record["subject"]["uri"] == uri)
            .map(|(did, rkey, _, _)| {
                (
                    did.to_owned(),
                    "app.bsky.feed.repost".to_owned(),
                    rkey.to_owned(),
                )
            })
            .collect();
        self.unfed.extend(reposts);
    }

    pub(crate) fn live(&self, collection: &str) -> impl Iterator<Item = (&str, &str, &Value, i64)> {
        self.records
            .iter()
            .filter(move |((_, c, _), _)| c == collection)
            .map(|((did, _, rkey), (record, sort_at))| {
                (did.as_str(), rkey.as_str(), record, *sort_at)
            })
    }

    pub(crate) fn following(&self, did: &str) -> BTreeSet<String> {
        self.live("app.bsky.graph.follow")
            .filter(|(author, _, _, _)| *author == did)
            .map(|(_, _, record, _)| record["subject"].as_str().unwrap().to_owned())
            .filter(|subject| subject != did)
            .collect()
    }

    pub(crate) fn followers(&self, did: &str) -> BTreeSet<String> {
        self.live("app.bsky.graph.follow")
            .filter(|(author, _, record, _)| record["subject"] == did && *author != did)
            .map(|(author, _, _, _)| author.to_owned())
            .collect()
    }

    /// Likes, reposts, replies and quotes of `uri`.
    pub(crate) fn counts(&self, uri: &str) -> [i32; 4] {
        let count = |collection: &str, target: &dyn Fn(&Value) -> &Value| {
            self.live(collection)
                .filter(|(_, _, record, _)| target(record) == uri)
                .count() as i32
        };
        let quoted = |record: &Value| -> String {
            let embed = &record["embed"];
            match embed["$type"].as_str() {
                Some("app.bsky.embed.record") => embed["record"]["uri"].as_str(),
                Some("app.bsky.embed.recordWithMedia") => embed["record"]["record"]["uri"].as_str(),
                _ => None,
            }
            .unwrap_or_default()
            .to_owned()
        };
        [
            count("app.bsky.feed.like", &|r| &r["subject"]["uri"]),
            count("app.bsky.feed.repost", &|r| &r["subject"]["uri"]),
            count("app.bsky.feed.post", &|r| &r["reply"]["parent"]["uri"]),
            self.live("app.bsky.feed.post")
                .filter(|(_, _, record, _)| quoted(record) == uri)
                .count() as i32,
        ]
    }

    /// Posts and reposts (of posts) of `authors`, newest first: (sort_at, rkey, post, repost).
    pub(crate) fn feed(&self, authors: &BTreeSet<String>) -> Vec<(String, String)> {
        let mut items = Vec::new();
        for (did, rkey, _, sort_at) in self.live("app.bsky.feed.post") {
            if authors.contains(did) {
                let uri = format!("at://{did}/app.bsky.feed.post/{rkey}");
                items.push((sort_at, rkey.to_owned(), uri, String::new()));
            }
        }
        for (did, rkey, record, sort_at) in self.live("app.bsky.feed.repost") {
            let subject = record["subject"]["uri"].as_str().unwrap();
            let key = (
                did.to_owned(),
                "app.bsky.feed.repost".to_owned(),
                rkey.to_owned(),
            );
            if authors.contains(did)
                && subject.contains("/app.bsky.feed.post/")
                && !self.unfed.contains(&key)
            {
                let repost = format!("at://{did}/app.bsky.feed.repost/{rkey}");
                items.push((sort_at, rkey.to_owned(), subject.to_owned(), repost));
            }
        }
        items.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
        items
            .into_iter()
            .map(|(_, _, uri, repost)| (uri, repost))
            .collect()
    }
}
