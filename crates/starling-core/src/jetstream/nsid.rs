//! Collection NSIDs that Starling indexes.

/// `app.bsky.feed.post`
pub const POST: &str = "app.bsky.feed.post";
/// `app.bsky.feed.repost`
pub const REPOST: &str = "app.bsky.feed.repost";
/// `app.bsky.feed.like`
pub const LIKE: &str = "app.bsky.feed.like";
/// `app.bsky.feed.threadgate`
pub const THREADGATE: &str = "app.bsky.feed.threadgate";
/// `app.bsky.feed.postgate`
pub const POSTGATE: &str = "app.bsky.feed.postgate";
/// `app.bsky.feed.generator`
pub const GENERATOR: &str = "app.bsky.feed.generator";
/// `app.bsky.graph.follow`
pub const FOLLOW: &str = "app.bsky.graph.follow";
/// `app.bsky.graph.block`
pub const BLOCK: &str = "app.bsky.graph.block";
/// `app.bsky.graph.list`
pub const LIST: &str = "app.bsky.graph.list";
/// `app.bsky.graph.listitem`
pub const LISTITEM: &str = "app.bsky.graph.listitem";
/// `app.bsky.graph.listblock`
pub const LISTBLOCK: &str = "app.bsky.graph.listblock";
/// `app.bsky.graph.starterpack`
pub const STARTERPACK: &str = "app.bsky.graph.starterpack";
/// `app.bsky.actor.profile`
pub const PROFILE: &str = "app.bsky.actor.profile";
/// `app.bsky.graph.verification`
pub const VERIFICATION: &str = "app.bsky.graph.verification";
