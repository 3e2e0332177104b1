//! The format marker of an embedded data directory: a one-line text file, `FORMAT`, beside the
//! engine's files, naming the layout they were written in (keyspaces, key and value
//! encodings). A build opens only the format it writes; anything else is refused with an error
//! naming both versions, before the engine touches a file.

use std::io::Write;
use std::path::Path;

use crate::StoreError;

/// The layout this build reads and writes. Bump it with any change of keys or values that an
/// older build would misread.
pub const STORE_FORMAT: u32 = 4;

/// The marker's file name in the data directory.
const FILE: &str = "FORMAT";
/// The marker's text before the number.
const PREFIX: &str = "starling store format ";
/// The engine's directory, whose presence says the data directory is not new.
pub(crate) const ENGINE_DIR: &str = "fjall";

/// Checks the data directory's format and returns it, writing the marker into a new directory.
/// A directory with engine files and no marker was written before markers existed, in format
/// 1's layout. An older format (1 to 3) is returned as it is: the caller upgrades the directory
/// and then marks it with [`mark`].
pub(crate) fn check(dir: &Path) -> Result<u32, StoreError> {
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if dir.join(ENGINE_DIR).exists() {
                return Ok(1);
            }
            write(dir)?;
            return Ok(STORE_FORMAT);
        }
        Err(err) => return Err(data_dir(dir, &format!("reading {FILE}: {err}"))),
    };
    let found = text
        .trim_end()
        .strip_prefix(PREFIX)
        .and_then(|number| number.parse::<u32>().ok())
        .ok_or_else(|| {
            data_dir(
                dir,
                &format!("{FILE} does not say `{PREFIX}N`: {:?}", cut(&text)),
            )
        })?;
    ensure(dir, found)
}

/// Marks the data directory as written in [`STORE_FORMAT`], once its upgrade is durable.
pub(crate) fn mark(dir: &Path) -> Result<(), StoreError> {
    write(dir)
}

// Format 2 added the `private` keyspace (the engine creates it empty at open), format 3 the
// time-ordered list indexes (built from the stored records at open) and format 4 the reason
// subject in notification keys (older keys stay readable, so nothing is rewritten): all
// upgrade in place, so 1 to 3 are accepted. An older build then refuses the upgraded
// directory instead of ignoring or misreading its new state.
fn ensure(dir: &Path, found: u32) -> Result<u32, StoreError> {
    if (1..=STORE_FORMAT).contains(&found) {
        Ok(found)
    } else {
        Err(StoreError::Format {
            path: dir.display().to_string(),
            found,
            expected: STORE_FORMAT,
        })
    }
}

/// Writes the marker durably: a temporary file, synced, renamed over the marker, and the
/// directory synced.
fn write(dir: &Path) -> Result<(), StoreError> {
    let tmp = dir.join(format!("{FILE}.tmp"));
    let res = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        writeln!(file, "{PREFIX}{STORE_FORMAT}")?;
        file.sync_all()?;
        std::fs::rename(&tmp, dir.join(FILE))?;
        std::fs::File::open(dir)?.sync_all()
    })();
    res.map_err(|err| data_dir(dir, &format!("writing {FILE}: {err}")))
}

fn data_dir(dir: &Path, reason: &str) -> StoreError {
    StoreError::DataDir {
        path: dir.display().to_string(),
        reason: reason.to_owned(),
    }
}

/// At most 64 characters of a marker that is not one, for the error.
fn cut(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_is_marked_and_then_accepted() {
        let tmp = tempfile::tempdir().unwrap();
        check(tmp.path()).unwrap();
        let text = std::fs::read_to_string(tmp.path().join(FILE)).unwrap();
        assert_eq!(text, format!("starling store format {STORE_FORMAT}\n"));
        check(tmp.path()).unwrap();
    }

    #[test]
    fn another_format_is_refused_naming_both_versions() {
        for found in [0, STORE_FORMAT + 1] {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::write(tmp.path().join(FILE), format!("{PREFIX}{found}\n")).unwrap();
            let err = check(tmp.path()).unwrap_err().to_string();
            assert!(
                err.contains(&format!("format {found}"))
                    && err.contains(&format!("format {STORE_FORMAT}")),
                "{err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }

    #[test]
    fn a_damaged_marker_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(FILE), "format one\n").unwrap();
        let err = check(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("FORMAT does not say"), "{err}");
    }

    #[test]
    fn engine_files_without_a_marker_are_format_one_until_marked() {
        // Formats 1 to 3 are returned for the caller to upgrade; the marker moves only when
        // the caller marks the directory.
        for (marker, found) in [
            (None, 1),
            (Some("starling store format 1\n"), 1),
            (Some("starling store format 2\n"), 2),
            (Some("starling store format 3\n"), 3),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::create_dir(tmp.path().join(ENGINE_DIR)).unwrap();
            if let Some(marker) = marker {
                std::fs::write(tmp.path().join(FILE), marker).unwrap();
            }
            assert_eq!(check(tmp.path()).unwrap(), found);
            assert_eq!(check(tmp.path()).unwrap(), found);
            mark(tmp.path()).unwrap();
            let text = std::fs::read_to_string(tmp.path().join(FILE)).unwrap();
            assert_eq!(text, format!("starling store format {STORE_FORMAT}\n"));
            assert_eq!(check(tmp.path()).unwrap(), STORE_FORMAT);
        }
    }
}
