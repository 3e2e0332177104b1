//! The real Jetstream events that generated streams are made from.
//!
//! They are the 162 events of `expected_v1.jsonl` and `golden_v1.jsonl` in
//! `../shared/data/jetstream/`, each parsed once into a [`Template`] whose identifiers the
//! generator replaces.

use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The files of real events, under `<shared data>/jetstream/`.
pub const TEMPLATE_FILES: [&str; 2] = ["expected_v1.jsonl", "golden_v1.jsonl"];

/// Why the templates could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The shared data directory is not where it should be.
    #[error(
        "shared data directory `{}` not found (it should sit beside the repository as `../shared/data`; pass --templates DIR to name it)",
        path.display()
    )]
    NoData {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A template file could not be read.
    #[error("reading `{}`: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: io::Error,
    },
    /// A line of a template file is not a Jetstream event the generator understands.
    #[error("`{}` line {line}: {detail}", path.display())]
    BadTemplate {
        /// The file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        detail: String,
    },
}

/// The shared data directory, `<workspace>/../shared/data`.
pub fn shared_data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
}

/// The raw lines of the template files in `data_dir` (the shared data directory), in file order.
pub fn template_lines(data_dir: &Path) -> Result<Vec<String>, TemplateError> {
    Ok(read_lines(data_dir)?
        .into_iter()
        .map(|line| line.text)
        .collect())
}

/// Loads and parses every template in `data_dir` (the shared data directory).
pub fn load_templates(data_dir: &Path) -> Result<Vec<Template>, TemplateError> {
    read_lines(data_dir)?
        .into_iter()
        .map(|line| {
            Template::parse(&line.text).map_err(|detail| TemplateError::BadTemplate {
                path: line.path,
                line: line.number,
                detail,
            })
        })
        .collect()
}

struct Line {
    path: PathBuf,
    number: usize,
    text: String,
}

fn read_lines(data_dir: &Path) -> Result<Vec<Line>, TemplateError> {
    if !data_dir.is_dir() {
        return Err(TemplateError::NoData {
            path: data_dir.to_path_buf(),
        });
    }
    let mut lines = Vec::new();
    for name in TEMPLATE_FILES {
        let path = data_dir.join("jetstream").join(name);
        let text = std::fs::read_to_string(&path).map_err(|source| TemplateError::Io {
            path: path.clone(),
            source,
        })?;
        for (idx, text) in text.lines().enumerate() {
            if !text.trim().is_empty() {
                lines.push(Line {
                    path: path.clone(),
                    number: idx + 1,
                    text: text.to_owned(),
                });
            }
        }
    }
    Ok(lines)
}

/// One real event, split into the parts the generator keeps and the parts it replaces.
#[derive(Clone, Debug)]
pub struct Template {
    /// What the event is, for the mix: `create app.bsky.feed.like`, `identity`, ...
    pub label: String,
    /// The repo or account DID of the real event.
    pub did: String,
    /// The kind-specific part.
    pub body: TemplateBody,
}

/// The kind-specific part of a [`Template`].
#[derive(Clone, Debug)]
pub enum TemplateBody {
    /// A record operation.
    Commit {
        /// `create`, `update` or `delete`.
        operation: String,
        /// The collection NSID.
        collection: String,
        /// The real record key.
        rkey: String,
        /// The record, for creates and updates.
        record: Option<Value>,
    },
    /// An `identity` event: the `identity` object.
    Identity(Value),
    /// An `account` event: the `account` object.
    Account(Value),
}

impl Template {
    /// Parses one Jetstream event line.
    pub fn parse(line: &str) -> Result<Template, String> {
        let mut event: Value =
            serde_json::from_str(line).map_err(|err| format!("not JSON: {err}"))?;
        let did = str_field(&event, "did")?.to_owned();
        let kind = str_field(&event, "kind")?.to_owned();
        let mut take = |field: &str| {
            event
                .get_mut(field)
                .map(Value::take)
                .filter(Value::is_object)
                .ok_or_else(|| format!("a `{kind}` event without a `{field}` object"))
        };
        let (label, body) = match kind.as_str() {
            "commit" => {
                let commit = take("commit")?;
                let operation = str_field(&commit, "operation")?.to_owned();
                let collection = str_field(&commit, "collection")?.to_owned();
                let rkey = str_field(&commit, "rkey")?.to_owned();
                let record = commit.get("record").cloned();
                if (operation == "delete") != record.is_none() {
                    return Err(format!("a `{operation}` commit with a record: {record:?}"));
                }
                let label = format!("{operation} {collection}");
                let body = TemplateBody::Commit {
                    operation,
                    collection,
                    rkey,
                    record,
                };
                (label, body)
            }
            "identity" => (
                "identity".to_owned(),
                TemplateBody::Identity(take("identity")?),
            ),
            "account" => (
                "account".to_owned(),
                TemplateBody::Account(take("account")?),
            ),
            other => return Err(format!("unknown kind `{other}`")),
        };
        Ok(Template { label, did, body })
    }
}

fn str_field<'v>(value: &'v Value, field: &str) -> Result<&'v str, String> {
    value
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no string field `{field}`"))
}
