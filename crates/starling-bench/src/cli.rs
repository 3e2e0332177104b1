//! Small helpers shared by the benchmark binaries' argument handling and output files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// Flags in the style the load tools have always taken: `-name value` or `-name=value`, with one
/// dash or two; the names in `switches` take no value (`-http1`). Returns each flag's value by
/// name (a switch's is `true`); a flag not in `known` or given twice is an error.
pub fn dash_flags(
    args: impl IntoIterator<Item = String>,
    known: &[&str],
    switches: &[&str],
) -> Result<HashMap<String, String>, String> {
    let mut flags = HashMap::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let bare = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'));
        let Some(bare) = bare.filter(|bare| !bare.is_empty()) else {
            return Err(format!("`{arg}` is not a flag"));
        };
        let (name, value) = match bare.split_once('=') {
            Some((name, value)) => (name, value.to_owned()),
            None if switches.contains(&bare) => (bare, "true".to_owned()),
            None => {
                let value = args
                    .next()
                    .ok_or_else(|| format!("`-{bare}` needs a value"))?;
                (bare, value)
            }
        };
        if !known.contains(&name) && !switches.contains(&name) {
            return Err(format!("unknown flag `-{name}`"));
        }
        if flags.insert(name.to_owned(), value).is_some() {
            return Err(format!("`-{name}` given twice"));
        }
    }
    Ok(flags)
}

/// Parses a duration as a number and a unit, repeated: `30s`, `500ms`, `1m30s`, `1.5s`.
pub fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    let bad = || format!("`{flag} {text}` is not a duration such as 30s, 500ms or 1m30s");
    let mut rest = text;
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += number.parse::<f64>().map_err(|_| bad())? * seconds;
        rest = tail;
    }
    if text.is_empty() {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(total))
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

    // Durations and dash flags parse as the load tools' callers write them, and mistakes name
    // the flag.
    #[test]
    fn dash_flags_and_durations_parse() {
        let args = ["-c", "16", "--duration=1m30s", "-http1", "-addr", "h:1"];
        let flags = dash_flags(
            args.map(String::from),
            &["c", "duration", "addr"],
            &["http1"],
        )
        .unwrap();
        assert_eq!(flags["c"], "16");
        assert_eq!(flags["http1"], "true");
        assert_eq!(flags["addr"], "h:1");
        assert_eq!(
            duration("-d", &flags["duration"]),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(duration("-d", "500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("-d", "1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["", "5", "5x", "s"] {
            assert!(duration("-d", bad).is_err(), "{bad}");
        }
        let parse = |args: &[&str]| dash_flags(args.iter().map(|a| a.to_string()), &["c"], &[]);
        assert!(parse(&["-c"]).is_err());
        assert!(parse(&["-x", "1"]).is_err());
        assert!(parse(&["-c", "1", "-c", "2"]).is_err());
        assert!(parse(&["c"]).is_err());
    }
}
