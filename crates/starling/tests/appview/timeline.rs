//! The stock AppView's `feed.getTimeline` on Starling: the model of a viewer's home timeline,
//! paged as the reference data plane pages it, and the check of every page against it.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{Coverage, Expect, TIMELINE, USERS, Xrpc, project_feed_item, util};

/// The page size getTimeline is read in: small enough that the cap on the viewer's own items
/// (see `util::reference_timeline_pages`) bites for some seeds.
const TIMELINE_LIMIT: usize = 30;

impl Expect<'_> {
    /// getTimeline: the viewer's and its follows' items, minus those whose author,
    /// reposter, reply parent or grandparent author is blocked with the viewer.
    fn timeline(&self) -> Vec<Value> {
        let w = self.world;
        let viewer = self.viewer.unwrap();
        let mut authors: BTreeSet<u32> = (0..USERS)
            .filter(|&u| w.follow(viewer, u).is_some())
            .collect();
        authors.insert(viewer);
        // The data plane pages the feed (capping the viewer's own items); the AppView then
        // drops what blocks hide.
        let feed = self.feed_of(&authors);
        let own: Vec<bool> = feed
            .iter()
            .map(|&(_, post, repost)| repost.map_or(w.author(post), |r| r.author) == viewer)
            .collect();
        util::reference_timeline_pages(&own, TIMELINE_LIMIT)
            .into_iter()
            .map(|i| feed[i])
            .filter(|&(_, post, repost)| {
                let parent = w.posts[post].parent;
                let grandparent = parent.and_then(|parent| w.posts[parent].parent);
                !self.viewer_blocked(w.author(post))
                    && !repost.is_some_and(|r| self.viewer_blocked(r.author))
                    && ![parent, grandparent]
                        .iter()
                        .any(|p| p.is_some_and(|p| self.viewer_blocked(w.author(p))))
            })
            .map(|(_, post, repost)| self.feed_item(post, repost))
            .collect()
    }
}

pub(super) fn check_timeline(x: &Xrpc, expect: &Expect, coverage: &mut Coverage) {
    let query = [("limit", TIMELINE_LIMIT.to_string())];
    let have = x.list(expect.viewer, TIMELINE, &query, "feed", project_feed_item);
    let want = json!(expect.timeline());
    coverage.saw(&want);
    coverage.add("timeline items", want.as_array().unwrap().len());
    x.check(&format!("{}: getTimeline", expect.who()), &have, &want);
}
