//! Length limits: no function over [`FN_LINES_MAX`] lines and no file over
//! [`FILE_LINES_MAX`] lines, except the items listed in `xtask/long-items.txt`, which may only
//! shrink.
//!
//! Functions are found by a small Rust lexer, not a parser: it skips comments, strings, raw
//! strings and character literals, so braces inside them do not count, and it follows `impl`,
//! `trait` and `mod` blocks to name each function by its path (`Store::batch`, `tests::check`).
//! A function's length runs from the line of its `fn` keyword to the line of its closing brace;
//! doc comments and attributes above it do not count.

use std::collections::BTreeMap;

/// The longest a function may be, in lines.
pub const FN_LINES_MAX: usize = 100;
/// The longest a file may be, in lines.
pub const FILE_LINES_MAX: usize = 1_000;
/// The item name of a whole file in the allow-list.
pub const FILE_ITEM: &str = "<file>";
/// Where the allow-list lives, from the workspace root.
pub const ALLOW_LIST: &str = "xtask/long-items.txt";

/// An item over its limit, or an allow-list entry for one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LongItem {
    /// The file, from the workspace root, with `/` separators.
    pub path: String,
    /// The function's path inside the file, or [`FILE_ITEM`].
    pub item: String,
    /// Its length in lines.
    pub n_lines: usize,
}

/// A function found in a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Its name, prefixed by the `impl`, `trait`, `mod` and `fn` blocks around it.
    pub name: String,
    /// The line of its `fn` keyword, from 1.
    pub line: usize,
    /// Lines from the `fn` keyword to the closing brace, both included.
    pub n_lines: usize,
}

/// The items of `files` (path, text) over their limits, in path and line order.
pub fn long_items(files: &[(String, String)]) -> Vec<LongItem> {
    let mut res = Vec::new();
    for (path, text) in files {
        let n_lines = text.lines().count();
        if n_lines > FILE_LINES_MAX {
            res.push(LongItem {
                path: path.clone(),
                item: FILE_ITEM.to_owned(),
                n_lines,
            });
        }
        for function in functions(text) {
            if function.n_lines > FN_LINES_MAX {
                res.push(LongItem {
                    path: path.clone(),
                    item: function.name,
                    n_lines: function.n_lines,
                });
            }
        }
    }
    res
}

/// The allow-list file for `items`: a header, then one `path item lines` line each.
pub fn render_allow_list(items: &[LongItem]) -> String {
    let mut res = format!(
        "# Items over tidy's length limits ({FN_LINES_MAX} lines a function, {FILE_LINES_MAX} a \
         file) that predate them.\n\
         # An entry may only shrink: tidy fails when an item grows past its listed length, and\n\
         # asks for the entry's removal once the item is within the limit. Regenerate with\n\
         # `cargo xtask tidy --print-long > {ALLOW_LIST}`, and keep the diff to removals and\n\
         # smaller numbers.\n\
         # path item lines\n"
    );
    for item in items {
        res.push_str(&format!("{} {} {}\n", item.path, item.item, item.n_lines));
    }
    res
}

/// Reads the allow-list: `path item lines` per line; `#` starts a comment line.
pub fn parse_allow_list(text: &str) -> Result<Vec<LongItem>, String> {
    let mut res = Vec::new();
    for (line_idx, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || format!("{ALLOW_LIST}:{}: expected `path item lines`", line_idx + 1);
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [path, item, n_lines] = fields.as_slice() else {
            return Err(bad());
        };
        res.push(LongItem {
            path: (*path).to_owned(),
            item: (*item).to_owned(),
            n_lines: n_lines.parse().map_err(|_| bad())?,
        });
    }
    Ok(res)
}

/// Problems of `found` against `allowed`: a long item with no entry, an item longer than its
/// entry, and an entry no item needs any more. Items of the same path and name pair with
/// entries in order.
pub fn check(found: &[LongItem], allowed: &[LongItem]) -> Vec<String> {
    let mut entries: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for entry in allowed {
        let key = (entry.path.as_str(), entry.item.as_str());
        entries.entry(key).or_default().push(entry.n_lines);
    }
    let mut problems = Vec::new();
    for item in found {
        let limit = if item.item == FILE_ITEM {
            FILE_LINES_MAX
        } else {
            FN_LINES_MAX
        };
        let key = (item.path.as_str(), item.item.as_str());
        let entry = entries
            .get_mut(&key)
            .and_then(|lengths| (!lengths.is_empty()).then(|| lengths.remove(0)));
        match entry {
            None => problems.push(format!(
                "{}: `{}` is {} lines, over the {limit}-line limit; split it",
                item.path, item.item, item.n_lines
            )),
            Some(n_allowed) if item.n_lines > n_allowed => problems.push(format!(
                "{}: `{}` grew to {} lines, past the {n_allowed} {ALLOW_LIST} allows; shorten it",
                item.path, item.item, item.n_lines
            )),
            Some(_) => {}
        }
    }
    for ((path, item), lengths) in entries {
        for _ in lengths {
            problems.push(format!(
                "{ALLOW_LIST}: `{path} {item}` is within the limit now (or gone); remove its entry"
            ));
        }
    }
    problems
}

/// A token of Rust source, as far as finding functions needs.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// An identifier or keyword (raw identifiers without `r#`), or a number.
    Word(String),
    /// `->`, which must not close an angle bracket.
    Arrow,
    /// Any other character outside comments and literals.
    Punct(char),
}

/// The tokens of `text` with their lines (from 1), without comments and literals.
fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut res = Vec::new();
    let mut line = 1;
    let mut idx = 0;
    while let Some(&c) = chars.get(idx) {
        let next = chars.get(idx + 1).copied();
        let start_line = line;
        if c == '\n' {
            line += 1;
            idx += 1;
        } else if c.is_whitespace() {
            idx += 1;
        } else if c == '/' && next == Some('/') {
            while chars.get(idx).is_some_and(|&c| c != '\n') {
                idx += 1;
            }
        } else if c == '/' && next == Some('*') {
            idx = skip_block_comment(&chars, idx, &mut line);
        } else if c == '"' {
            idx = skip_string(&chars, idx + 1, false, 0, &mut line);
        } else if c == '\'' {
            idx = skip_quote(&chars, idx);
        } else if c == '-' && next == Some('>') {
            res.push((Token::Arrow, line));
            idx += 2;
        } else if c.is_alphanumeric() || c == '_' {
            let start = idx;
            while chars
                .get(idx)
                .is_some_and(|&c| c.is_alphanumeric() || c == '_')
            {
                idx += 1;
            }
            let word: String = chars.get(start..idx).unwrap_or_default().iter().collect();
            idx = word_end(&chars, idx, &word, &mut res, &mut line, start_line);
        } else {
            res.push((Token::Punct(c), line));
            idx += 1;
        }
    }
    res
}

/// After the word `word` ending at `idx`: a raw string (`r"…"`, `br#"…"#`) is skipped, a raw
/// identifier (`r#gen`) becomes its name, anything else is the word. Returns where to go on.
fn word_end(
    chars: &[char],
    idx: usize,
    word: &str,
    out: &mut Vec<(Token, usize)>,
    line: &mut usize,
    start_line: usize,
) -> usize {
    let is_raw_prefix = matches!(word, "r" | "br" | "cr");
    let mut hashes = 0;
    while is_raw_prefix && chars.get(idx + hashes) == Some(&'#') {
        hashes += 1;
    }
    match chars.get(idx + hashes) {
        Some('"') if is_raw_prefix => skip_string(chars, idx + hashes + 1, true, hashes, line),
        Some(&c) if word == "r" && hashes == 1 && (c.is_alphabetic() || c == '_') => {
            let start = idx + 1;
            let mut end = start;
            while chars
                .get(end)
                .is_some_and(|&c| c.is_alphanumeric() || c == '_')
            {
                end += 1;
            }
            let name: String = chars.get(start..end).unwrap_or_default().iter().collect();
            out.push((Token::Word(name), start_line));
            end
        }
        _ => {
            out.push((Token::Word(word.to_owned()), start_line));
            idx
        }
    }
}

/// Skips a (nested) block comment starting at `idx`; returns the index after it.
fn skip_block_comment(chars: &[char], mut idx: usize, line: &mut usize) -> usize {
    let mut depth = 0usize;
    while let Some(&c) = chars.get(idx) {
        let next = chars.get(idx + 1).copied();
        if c == '/' && next == Some('*') {
            depth += 1;
            idx += 2;
        } else if c == '*' && next == Some('/') {
            depth -= 1;
            idx += 2;
            if depth == 0 {
                return idx;
            }
        } else {
            if c == '\n' {
                *line += 1;
            }
            idx += 1;
        }
    }
    idx
}

/// Skips a string whose body starts at `idx`: a plain one (escapes, ends at `"`) or a raw one
/// (no escapes, ends at `"` and `hashes` `#`s). Returns the index after it.
fn skip_string(
    chars: &[char],
    mut idx: usize,
    raw: bool,
    hashes: usize,
    line: &mut usize,
) -> usize {
    while let Some(&c) = chars.get(idx) {
        idx += 1;
        match c {
            '\n' => *line += 1,
            '\\' if !raw => {
                if chars.get(idx) == Some(&'\n') {
                    *line += 1;
                }
                idx += 1;
            }
            '"' if (0..hashes).all(|hash_idx| chars.get(idx + hash_idx) == Some(&'#')) => {
                return idx + hashes;
            }
            _ => {}
        }
    }
    idx
}

/// Skips a character literal (`'x'`, `'\n'`, `'\u{1F600}'`) or a lifetime's quote at `idx`;
/// returns the index after it.
fn skip_quote(chars: &[char], idx: usize) -> usize {
    match (chars.get(idx + 1), chars.get(idx + 2)) {
        (Some('\\'), _) => {
            let mut end = idx + 3;
            while chars.get(end).is_some_and(|&c| c != '\'') {
                end += 1;
            }
            end + 1
        }
        (Some(_), Some('\'')) => idx + 3,
        // A lifetime or label: its name follows as a word.
        _ => idx + 1,
    }
}

/// What an opening brace belongs to.
struct Scope {
    /// The name it adds to the functions inside it (`None` for blocks, closures, literals).
    name: Option<String>,
    /// The function it is the body of: its line.
    fn_line: Option<usize>,
    /// The brace depth inside it.
    depth: usize,
}

/// An item keyword seen, waiting for its `{` (or a `;`: no body).
struct Pending {
    keyword: &'static str,
    name: String,
    line: usize,
    /// Bracket depth (`(` and `[`) at the keyword: its `{` or `;` comes at the same depth.
    bracket_depth: usize,
    /// Tokens after the keyword, for naming an `impl` by its type.
    words: Vec<Token>,
}

/// The functions with a body in `text`, in the order their bodies end.
pub fn functions(text: &str) -> Vec<Function> {
    let tokens = tokens(text);
    let mut res = Vec::new();
    let mut scopes: Vec<Scope> = Vec::new();
    let mut pending: Option<Pending> = None;
    let mut depth = 0usize;
    let mut bracket_depth = 0usize;
    for (token_idx, (token, line)) in tokens.iter().enumerate() {
        let prev = token_idx
            .checked_sub(1)
            .and_then(|prev_idx| tokens.get(prev_idx));
        let next = tokens.get(token_idx + 1);
        match token {
            Token::Punct('(' | '[') => bracket_depth += 1,
            Token::Punct(')' | ']') => bracket_depth = bracket_depth.saturating_sub(1),
            Token::Punct(';')
                if pending
                    .as_ref()
                    .is_some_and(|p| p.bracket_depth == bracket_depth) =>
            {
                pending = None;
            }
            Token::Punct('{') => {
                depth += 1;
                let scope = match pending.take() {
                    Some(p) if p.bracket_depth == bracket_depth => scope_of(p, depth),
                    other => {
                        pending = other;
                        Scope {
                            name: None,
                            fn_line: None,
                            depth,
                        }
                    }
                };
                scopes.push(scope);
            }
            Token::Punct('}') => {
                if let Some(scope) = scopes.pop_if(|scope| scope.depth == depth)
                    && let Some(fn_line) = scope.fn_line
                {
                    res.push(Function {
                        name: qualified(&scopes, scope.name.as_deref().unwrap_or_default()),
                        line: fn_line,
                        n_lines: line - fn_line + 1,
                    });
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        if let Some(p) = &mut pending {
            p.words.push(token.clone());
            continue;
        }
        if let Token::Word(word) = token {
            pending = item_start(word, prev.map(|(t, _)| t), next.map(|(t, _)| t)).map(
                |(keyword, name)| Pending {
                    keyword,
                    name,
                    line: *line,
                    bracket_depth,
                    words: Vec::new(),
                },
            );
        }
    }
    res
}

/// Whether the word `word` starts an item with a body that names functions: `fn NAME`,
/// `mod NAME`, `trait NAME`, or an `impl` block (not `impl Trait` in a type). Returns the
/// keyword and the name (empty for `impl`, named when its `{` comes).
fn item_start(
    word: &str,
    prev: Option<&Token>,
    next: Option<&Token>,
) -> Option<(&'static str, String)> {
    let next_word = match next {
        Some(Token::Word(next)) => Some(next.clone()),
        _ => None,
    };
    match word {
        // `fn(u32) -> u32` is a type, not an item.
        "fn" => next_word.map(|name| ("fn", name)),
        "mod" => next_word.map(|name| ("mod", name)),
        "trait" => next_word.map(|name| ("trait", name)),
        "impl" => {
            let at_item = match prev {
                None => true,
                Some(Token::Punct(c)) => matches!(c, '{' | '}' | ';' | ']'),
                Some(Token::Word(w)) => w == "unsafe",
                Some(Token::Arrow) => false,
            };
            at_item.then(|| ("impl", String::new()))
        }
        _ => None,
    }
}

/// The scope an item's `{` opens.
fn scope_of(pending: Pending, depth: usize) -> Scope {
    let name = match pending.keyword {
        "impl" => impl_type(&pending.words),
        _ => pending.name,
    };
    Scope {
        name: Some(name),
        fn_line: (pending.keyword == "fn").then_some(pending.line),
        depth,
    }
}

/// The type an `impl` block is for: the first word after `for`, or after the block's own
/// generics; `impl<S: Store> Sink for Feeder<S>` is `Feeder`.
fn impl_type(words: &[Token]) -> String {
    let after_for = words
        .iter()
        .position(|token| *token == Token::Word("for".to_owned()))
        .map_or(words, |for_idx| {
            words.get(for_idx + 1..).unwrap_or_default()
        });
    let mut angle_depth = 0usize;
    for token in after_for {
        match token {
            Token::Punct('<') => angle_depth += 1,
            Token::Punct('>') => angle_depth = angle_depth.saturating_sub(1),
            Token::Word(word) if angle_depth == 0 && !matches!(word.as_str(), "dyn" | "mut") => {
                return word.clone();
            }
            _ => {}
        }
    }
    "impl".to_owned()
}

/// `name` prefixed by the names of the scopes around it.
fn qualified(scopes: &[Scope], name: &str) -> String {
    let mut res = String::new();
    for scope_name in scopes.iter().filter_map(|scope| scope.name.as_deref()) {
        res.push_str(scope_name);
        res.push_str("::");
    }
    res.push_str(name);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The functions of `text` as `name@line+lines`, in the order their bodies end.
    fn check_functions(text: &str, expected: &[&str]) {
        let found: Vec<String> = functions(text)
            .iter()
            .map(|f| format!("{}@{}+{}", f.name, f.line, f.n_lines))
            .collect();
        assert_eq!(found, expected, "in:\n{text}");
    }

    // Checks the line count of plain functions: from the `fn` line to the closing brace, with
    // doc comments and attributes above left out, and one-line functions counted as one.
    #[test]
    fn a_function_runs_from_its_fn_line_to_its_closing_brace() {
        check_functions(
            "/// Doc.\n#[inline]\npub fn one() {}\n\nasync fn three(\n    x: u32,\n) -> u32 {\n    x\n}\n",
            &["one@3+1", "three@5+5"],
        );
    }

    // Checks that braces inside comments, strings, raw strings and character literals do not
    // count, and that lifetimes are not taken for character literals.
    #[test]
    fn braces_in_comments_and_literals_do_not_count() {
        let text = r####"fn f<'a>(s: &'a str) -> char {
    // } a comment
    /* { nested /* } */ } */
    let _ = "}\"{";
    let _ = r#"}"#;
    let _ = b'{';
    let _ = '\u{7d}';
    '}'
}
fn g() {}
"####;
        check_functions(text, &["f@1+9", "g@10+1"]);
    }

    // Checks naming: functions in `impl` (by the type, also with `for` and generics), `trait`
    // and `mod` blocks are prefixed by it; nested functions by the outer function; trait
    // method declarations, `fn` pointer types and `impl Trait` arguments are not functions or
    // blocks.
    #[test]
    fn functions_are_named_by_the_blocks_around_them() {
        let text = "impl<S: Store> Sink for Feeder<S> {
    fn apply(&mut self, f: fn(u32) -> u32, g: impl Fn() -> u8) {
        fn inner() {}
    }
}
trait Backend {
    fn finish(&self);
    fn shared() -> bool { false }
}
#[cfg(test)]
mod tests {
    impl Fixture { fn new() -> Fixture { Fixture } }
}
fn r#gen() {}
";
        check_functions(
            text,
            &[
                "Feeder::apply::inner@3+1",
                "Feeder::apply@2+3",
                "Backend::shared@8+1",
                "tests::Fixture::new@12+1",
                "gen@14+1",
            ],
        );
    }

    fn item(path: &str, item: &str, n_lines: usize) -> LongItem {
        LongItem {
            path: path.to_owned(),
            item: item.to_owned(),
            n_lines,
        }
    }

    // Checks the limits: a 101-line function and a 1,001-line file are long, a 100-line
    // function is not.
    #[test]
    fn items_just_over_the_limits_are_long() {
        let body = |n_lines: usize| "    x;\n".repeat(n_lines - 2);
        let text = format!(
            "fn short() {{\n{}}}\nfn long() {{\n{}}}\n",
            body(100),
            body(101)
        );
        let padded = format!(
            "{text}{}",
            "\n".repeat(FILE_LINES_MAX + 1 - text.lines().count())
        );
        let found = long_items(&[("a.rs".to_owned(), text), ("b.rs".to_owned(), padded)]);
        assert_eq!(
            found,
            [
                item("a.rs", "long", 101),
                item("b.rs", FILE_ITEM, 1_001),
                item("b.rs", "long", 101),
            ]
        );
    }

    // Checks the allow-list rules: an entry lets its item stay as long as listed, not longer;
    // a long item without an entry fails; an entry whose item is short or gone asks to be
    // removed; the rendered list parses back to the same entries.
    #[test]
    fn the_allow_list_only_shrinks() {
        let found = [
            item("a.rs", "f", 120),
            item("a.rs", "g", 130),
            item("b.rs", "h", 101),
        ];
        let allowed = [
            item("a.rs", "f", 120),
            item("a.rs", "g", 125),
            item("c.rs", "k", 150),
        ];
        let problems = check(&found, &allowed);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("`g` grew to 130 lines, past the 125"));
        assert!(problems[1].contains("b.rs: `h` is 101 lines, over the 100-line limit"));
        assert!(problems[2].contains("`c.rs k` is within the limit now (or gone); remove"));
        assert!(check(&found, &found).is_empty());
        let shrunk = [item("a.rs", "f", 110)];
        assert!(check(&shrunk, &[item("a.rs", "f", 120)]).is_empty());

        let rendered = render_allow_list(&found);
        assert_eq!(parse_allow_list(&rendered).unwrap(), found);
        assert!(parse_allow_list("a.rs f\n").is_err());
    }
}
