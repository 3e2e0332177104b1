//! Documents: what of an actor or a record is searchable, taken from its JSON.

use serde_json::Value;

/// How many bytes of one text field are indexed; the rest is ignored (a post's text is at most
/// 3,000 bytes by its lexicon, a description 2,560).
pub const FIELD_BYTES_MAX: usize = 4_096;

/// An actor: handle, and display name and description from its profile record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActorDoc {
    /// The DID.
    pub did: String,
    /// The handle, lowercased, if known.
    pub handle: Option<String>,
    /// `displayName` of the profile.
    pub display_name: String,
    /// `description` of the profile.
    pub description: String,
}

impl ActorDoc {
    /// The document of `did` from its handle and its profile record's JSON, if any.
    pub fn new(did: &str, handle: Option<&str>, profile_json: Option<&str>) -> ActorDoc {
        let profile = profile_json.and_then(|json| serde_json::from_str::<Value>(json).ok());
        let field = |name: &str| {
            profile
                .as_ref()
                .and_then(|p| p.get(name))
                .and_then(Value::as_str)
                .map(bounded)
                .unwrap_or_default()
        };
        ActorDoc {
            did: did.to_owned(),
            handle: handle.map(str::to_lowercase),
            display_name: field("displayName"),
            description: field("description"),
        }
    }

    /// Whether there is anything to find it by.
    pub fn is_searchable(&self) -> bool {
        self.handle.is_some() || !self.display_name.is_empty() || !self.description.is_empty()
    }
}

/// A post: its text, author, languages and time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostDoc {
    /// `at://` URI.
    pub uri: String,
    /// The author's DID.
    pub author: String,
    /// `text`.
    pub text: String,
    /// `langs`, lowercased.
    pub langs: Vec<String>,
    /// `sort_at`: `min(createdAt, indexedAt)` in microseconds.
    pub sort_at_us: i64,
}

impl PostDoc {
    /// The document of a post from its record JSON.
    pub fn new(uri: &str, author: &str, json: &str, sort_at_us: i64) -> PostDoc {
        let record = serde_json::from_str::<Value>(json).unwrap_or(Value::Null);
        let langs = record
            .get("langs")
            .and_then(Value::as_array)
            .map(|langs| {
                langs
                    .iter()
                    .filter_map(Value::as_str)
                    .take(8)
                    .map(str::to_lowercase)
                    .collect()
            })
            .unwrap_or_default();
        PostDoc {
            uri: uri.to_owned(),
            author: author.to_owned(),
            text: record
                .get("text")
                .and_then(Value::as_str)
                .map(bounded)
                .unwrap_or_default(),
            langs,
            sort_at_us,
        }
    }
}

/// Which kind of named record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// `app.bsky.graph.starterpack`: `name` and `description`.
    StarterPack,
    /// `app.bsky.feed.generator`: `displayName` and `description`.
    FeedGenerator,
}

impl RecordKind {
    /// The value of the `kind` field.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RecordKind::StarterPack => "starterpack",
            RecordKind::FeedGenerator => "generator",
        }
    }

    fn name_field(self) -> &'static str {
        match self {
            RecordKind::StarterPack => "name",
            RecordKind::FeedGenerator => "displayName",
        }
    }
}

/// A starter pack or a feed generator: a name and a description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordDoc {
    /// Which kind.
    pub kind: RecordKind,
    /// `at://` URI.
    pub uri: String,
    /// `name` or `displayName`.
    pub name: String,
    /// `description`.
    pub description: String,
    /// `sort_at` in microseconds.
    pub sort_at_us: i64,
}

impl RecordDoc {
    /// The document of a record of `kind` from its JSON.
    pub fn new(kind: RecordKind, uri: &str, json: &str, sort_at_us: i64) -> RecordDoc {
        let record = serde_json::from_str::<Value>(json).unwrap_or(Value::Null);
        let field = |name: &str| {
            record
                .get(name)
                .and_then(Value::as_str)
                .map(bounded)
                .unwrap_or_default()
        };
        RecordDoc {
            kind,
            uri: uri.to_owned(),
            name: field(kind.name_field()),
            description: field("description"),
            sort_at_us,
        }
    }
}

/// `text` cut to [`FIELD_BYTES_MAX`] at a character boundary.
fn bounded(text: &str) -> String {
    let mut end = text.len().min(FIELD_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default().to_owned()
}
