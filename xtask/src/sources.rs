//! Rules checked line by line in the Rust sources: crate docs, no `#[should_panic]` or
//! `#[ignore]`, no storage-engine calls outside `starling-store`.

/// Names that mark a storage-engine call; they may appear only in `starling-store`.
const ENGINE_NAMES: &[&str] = &["fjall::", "redb::", "scylla::"];

/// Problems of the file `shown` (its path from the workspace root) with contents `text`.
pub fn check(shown: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let is_crate_root = shown.ends_with("src/lib.rs") || shown.ends_with("src/main.rs");
    if is_crate_root && !text.trim_start().starts_with("//!") {
        problems.push(format!("{shown}: crate root has no `//!` doc"));
    }
    let is_tidy = shown.starts_with("xtask");
    let in_store = shown.starts_with("crates/starling-store/");
    for (line_idx, line) in text.lines().enumerate() {
        let at = || format!("{shown}:{}", line_idx + 1);
        let code = line.split("//").next().unwrap_or_default();
        if !is_tidy && (code.contains("#[should_panic") || code.contains("#[ignore")) {
            problems.push(format!(
                "{}: no #[should_panic] or #[ignore]; assert the Err",
                at()
            ));
        }
        if !is_tidy && !in_store && ENGINE_NAMES.iter().any(|name| code.contains(name)) {
            problems.push(format!(
                "{}: storage engine call outside starling-store",
                at()
            ));
        }
    }
    problems
}
