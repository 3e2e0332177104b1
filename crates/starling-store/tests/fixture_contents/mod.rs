//! What the format fixtures hold: the sample network and the private state that
//! `examples/write-format-fixture.rs` writes, and that `tests/format_fixture.rs` applies to a
//! fresh store to compare.

use starling_core::sample::SampleParams;
use starling_store::PrivateOp;

/// The sample the fixture holds.
pub const PARAMS: SampleParams = SampleParams {
    n_actors: 12,
    seed: 1,
};

/// Private state the fixture holds from format 2 on; the test applies the same to compare.
pub fn private_ops() -> Vec<PrivateOp> {
    let alice = "did:plc:alice".to_owned();
    vec![
        PrivateOp::MuteActor {
            actor: alice.clone(),
            subject: "did:plc:bob".to_owned(),
            only_reposts: true,
            only_quoteposts: false,
        },
        PrivateOp::MuteThread {
            actor: alice.clone(),
            root: "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaaa2".to_owned(),
        },
        PrivateOp::NotificationSeen {
            actor: alice.clone(),
            seen_us: 1_700_000_000_000_000,
        },
        PrivateOp::PutBookmark {
            actor: alice.clone(),
            key: "3kaaaaaaaaaa2".to_owned(),
            subject_uri: "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaaa2".to_owned(),
            subject_cid: "bafyreib2rxk3rh6kzwq".to_owned(),
        },
        PrivateOp::PutDraft {
            actor: alice,
            key: "3kaaaaaaaaab2".to_owned(),
            json: r#"{"text":"later"}"#.to_owned(),
            update: false,
        },
    ]
}

/// The processing time the private operations are applied at.
pub const PRIVATE_NOW_US: i64 = 1_700_000_000_000_001;
