//! Following a sample of a network's actors (see the module doc of `content`).

use starling_core::jetstream::{Refs, nsid};

use super::Content;

/// FNV-1a: a hash that is the same in every run and build, so a seed draws the same sample.
fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Content {
    /// A model that tracks one actor in `every` (see the module doc); 1 tracks all, as
    /// [`Content::default`] does.
    pub fn tracking(every: u64) -> Content {
        Content {
            track_every: every,
            ..Content::default()
        }
    }

    /// Whether the model follows only a sample of the actors.
    pub fn is_sampled(&self) -> bool {
        self.track_every > 1
    }

    /// Whether the answers about `did` are complete in the model.
    pub(super) fn tracked(&self, did: &str) -> bool {
        !self.is_sampled() || stable_hash(did).is_multiple_of(self.track_every)
    }

    /// Records a follow imported without a record (`starling import-follows`).
    pub fn import_follow(&mut self, follower: &str, followed: &str) {
        if self.tracked(follower) || self.tracked(followed) {
            let pair = (follower.to_owned(), followed.to_owned());
            self.imported.insert(pair);
        }
    }

    /// Whether a created record is kept: under sampling, a like or follow only when it is by or
    /// names a tracked actor, a list item only when its list's owner is tracked.
    pub(super) fn keeps(&self, did: &str, collection: &str, refs: &Refs<'_>) -> bool {
        match (collection, refs) {
            (nsid::LIKE, Refs::Subject { subject, via }) => {
                self.tracked(did)
                    || self.tracked(subject.did)
                    || via.as_ref().is_some_and(|via| self.tracked(via.did))
            }
            (nsid::FOLLOW, Refs::Actor { subject }) => self.tracked(did) || self.tracked(subject),
            (nsid::LISTITEM, _) => self.tracked(did),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use starling_core::jetstream;
    use starling_core::sample::did;
    use starling_gen::{GenParams, write_to};

    use super::*;
    use crate::content::FeedDraw;
    use crate::content::counts::tests::lines;

    /// What `content` holds about `actor`, one line per fact, sorted: the likes, reposts and
    /// follows by and of it, its feed items and list items, and its notifications.
    fn facts_of(content: &Content, actor: &str) -> Vec<String> {
        let of = |uri: &str| {
            uri.strip_prefix("at://")
                .is_some_and(|rest| rest.starts_with(actor))
        };
        let mut facts = Vec::new();
        for (uri, (liker, row)) in &content.likes {
            if liker == actor || of(&row.subject) {
                facts.push(format!("like {uri} {liker} {}", row.subject));
            }
        }
        for (uri, (reposter, subject)) in &content.reposts {
            if reposter == actor || of(subject) {
                facts.push(format!("repost {uri} {reposter} {subject}"));
            }
        }
        for (follower, followed) in content.follow_pairs() {
            if follower == actor || followed == actor {
                facts.push(format!("follow {follower} {followed}"));
            }
        }
        for (uri, item) in &content.feed_items {
            if of(uri) {
                facts.push(format!("feed {uri} {}", item.row.sort_at_ms));
            }
        }
        for (uri, (list, row)) in &content.items {
            if of(list) {
                facts.push(format!("item {uri} {}", row.subject));
            }
        }
        for (uri, rows) in &content.notifications.by_record {
            for row in rows.iter().filter(|row| row.recipient == actor) {
                facts.push(format!(
                    "notification {uri} {} {:?}",
                    row.reason, row.reason_subject
                ));
            }
        }
        facts.sort_unstable();
        facts
    }

    /// The network `params` generates, applied to the whole model and to a sample tracking one
    /// actor in four.
    fn whole_and_sample(params: &GenParams) -> (Content, Content) {
        let mut file = Vec::new();
        write_to(params, &mut file, &mut |_| {}).unwrap();
        let (mut whole, mut sample) = (Content::default(), Content::tracking(4));
        for line in String::from_utf8(file).unwrap().lines() {
            let event = jetstream::decode_str(line).unwrap();
            whole.apply(&event);
            sample.apply(&event);
        }
        (whole, sample)
    }

    // Checks sampling against the whole model: a generated network (with follows imported
    // beside it) is applied to both, and every tracked actor has the same facts in each.
    #[test]
    fn a_sample_holds_what_the_whole_network_does_for_its_tracked_actors() {
        let (mut whole, mut sample) = whole_and_sample(&GenParams::new(300, 3_000, 1_500, 11));
        for idx in 0..200u32 {
            let (follower, followed) = (did(idx % 300), did((idx * 7 + 3) % 300));
            whole.import_follow(&follower, &followed);
            sample.import_follow(&follower, &followed);
        }
        let mut tracked: Vec<&String> = (whole.actors.iter())
            .filter(|actor| sample.tracked(actor))
            .collect();
        tracked.sort_unstable();
        assert!(
            tracked.len() > 30 && tracked.len() < 150,
            "{} of 300 tracked",
            tracked.len()
        );
        let mut n_facts = 0;
        for actor in tracked {
            let facts = facts_of(&whole, actor);
            assert_eq!(facts, facts_of(&sample, actor), "{actor}");
            n_facts += facts.len();
        }
        assert!(n_facts > 1_000, "only {n_facts} facts checked");
        // Timelines show any followed author's items: all are kept.
        assert_eq!(sample.feed_items.len(), whole.feed_items.len());
        // The sample holds less: the test would pass trivially if it held everything.
        assert!(sample.likes.len() < whole.likes.len() * 3 / 4);
    }

    // Checks GetFollowsFollowing drawn from a sample against a recount over the whole model:
    // the accounts the viewer follows that follow the target.
    #[test]
    fn follows_following_from_a_sample_matches_the_whole_network() {
        let (whole, sample) = whole_and_sample(&GenParams::new(300, 6_000, 300, 5));
        let dir = tempfile::tempdir().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let draw = FeedDraw {
            many_targets: Some(5),
            ..FeedDraw::new(200, 10, 20)
        };
        (sample.write_feed_sets(dir.path(), &mut rng, &draw)).unwrap();
        let pairs = whole.follow_pairs();
        let known_followers = |viewer: &str, target: &str| {
            let mut known: Vec<&str> = (pairs.iter())
                .filter(|&&(follower, account)| {
                    follower == viewer && pairs.contains(&(account, target))
                })
                .map(|&(_, account)| account)
                .collect();
            known.sort_unstable();
            serde_json::json!(known)
        };
        for (name, n_targets) in [("follows-following", 1), ("follows-following-5", 5)] {
            let mut n_known = 0;
            for line in lines(dir.path(), name) {
                let viewer = line["request"]["actorDid"].as_str().unwrap();
                let targets = line["request"]["targetDids"].as_array().unwrap();
                assert_eq!(targets.len(), n_targets, "{name}");
                let results = line["expect"]["results"].as_array().unwrap();
                assert_eq!(results.len(), n_targets, "{name}");
                for (target, result) in targets.iter().zip(results) {
                    let target = target.as_str().unwrap();
                    assert!(sample.tracked(viewer) && sample.tracked(target));
                    assert_eq!(result["targetDid"], target, "{name}");
                    let want = known_followers(viewer, target);
                    assert_eq!(result["dids"], want, "{name}: {viewer} {target}");
                    n_known += usize::from(want != serde_json::json!([]));
                }
            }
            assert!(n_known > 20 * n_targets, "{name}: only {n_known} known");
        }
    }

    // Checks a timeline class against a recount of each drawn reader's follows in the file.
    #[test]
    fn timeline_classes_hold_readers_following_about_that_many() {
        let (content, _) = whole_and_sample(&GenParams::new(300, 6_000, 3_000, 5));
        let dir = tempfile::tempdir().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let draw = FeedDraw {
            timeline_classes: vec![20],
            ..FeedDraw::new(100, 10, 20)
        };
        (content.write_feed_sets(dir.path(), &mut rng, &draw)).unwrap();
        let pairs = content.follow_pairs();
        let drawn = lines(dir.path(), "timeline-20");
        assert_eq!(drawn.len(), 100);
        for line in drawn {
            let reader = line["request"]["actorDid"].as_str().unwrap();
            let n_follows = pairs.iter().filter(|pair| pair.0 == reader).count();
            assert!(
                (18..=22).contains(&n_follows),
                "{reader} follows {n_follows}"
            );
            assert_eq!(
                line["expect"]["page"].as_array().unwrap().len(),
                10,
                "{reader}"
            );
        }
    }
}
