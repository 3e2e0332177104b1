//! Small helpers shared by the benchmark binaries' argument handling and output files.

use std::path::{Path, PathBuf};

/// Parses a flag's numeric value; `_` separators are allowed (`10_000_000`).
pub fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .replace('_', "")
        .parse()
        .map_err(|_| format!("`{flag} {value}` is not a number in range"))
}

/// The temporary name an output file is written under before it is renamed into place.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks number parsing with separators and the error for a bad value, against literals.
    #[test]
    fn numbers_parse_with_separators() {
        assert_eq!(number::<u64>("--events", "10_000"), Ok(10_000));
        assert!(number::<u8>("--x", "300").is_err());
        assert_eq!(
            tmp_path(Path::new("/a/b.zst")),
            PathBuf::from("/a/b.zst.tmp")
        );
    }
}
