//! AT Protocol syntax checks: DIDs, handles, NSIDs, record keys, AT-URIs, TIDs, CIDs, datetimes,
//! language tags and generic URIs.
//!
//! Each check follows the atproto specification and is tested against the interop vectors in
//! `../shared/data/atproto-syntax` (`tests/syntax_vectors.rs`). Checks never allocate: they walk
//! bytes and look each byte up in one 256-entry class table, because the decoder runs them on
//! every field of about a million events a second.
//!
//! Where the two vector sets disagree, one rule is chosen:
//! - TID: the atproto copy and the canonical set list different vectors (`a222222222222` in
//!   one, `2222222222222` in the other), but no vector is valid in one set and invalid in the
//!   other. The spec's regex, `[234567abcdefghij][234567abcdefghijklmnopqrstuvwxyz]{12}`,
//!   accepts or rejects every vector of both, so that is the rule.
//! - Datetime: the canonical set lists `0000-01-01T00:00:00.000Z` and `0001-01-01…` as valid;
//!   the atproto copy is silent on them, and the spec allows any four-digit year, so they are
//!   valid. `0000-01-01T00:00:00+01:00` is syntax-invalid in one set and parse-invalid in the
//!   other; [`parse_datetime_micros`] rejects it either way, because it normalizes to a time
//!   before year 0000.
//! - Language: the canonical set calls `JA` and `jaja` syntax-invalid, the atproto copy calls
//!   them well-formed but parse-invalid. [`is_valid_language`] follows the atproto copy and RFC
//!   5646's grammar (both are well-formed); [`is_valid_language_strict`] rejects them.

/// The longest DID, in bytes.
pub const DID_BYTES_MAX: usize = 2048;
/// The longest handle, in bytes (the DNS limit).
pub const HANDLE_BYTES_MAX: usize = 253;
/// The longest NSID, in bytes: a 253-byte domain authority, a period and a 63-byte name.
pub const NSID_BYTES_MAX: usize = 253 + 1 + 63;
/// The longest record key, in bytes.
pub const RECORD_KEY_BYTES_MAX: usize = 512;
/// The longest AT-URI, in bytes.
pub const AT_URI_BYTES_MAX: usize = 8 * 1024;
/// The longest generic URI, in bytes.
pub const URI_BYTES_MAX: usize = 8 * 1024;
/// The length of a TID, in base32 characters.
pub const TID_LEN: usize = 13;

/// The shortest and longest CID strings, in bytes.
const CID_BYTES_MIN: usize = 8;
const CID_BYTES_MAX: usize = 256;
/// The longest DNS label, also the longest NSID segment, in bytes.
const LABEL_BYTES_MAX: usize = 63;
/// The longest generic URI scheme: one letter and up to 80 more bytes.
const URI_SCHEME_BYTES_MAX: usize = 81;

// Byte classes, one bit each, so one table lookup answers "may this byte appear here?".
const ALPHA: u16 = 1 << 0;
const DIGIT: u16 = 1 << 1;
/// `[a-zA-Z0-9._:%-]`: a DID's method-specific identifier.
const DID_ID: u16 = 1 << 2;
/// `[a-zA-Z0-9_~.:-]`: a record key.
const RKEY: u16 = 1 << 3;
/// `[a-zA-Z0-9+=]`: a multibase CID string.
const CID: u16 = 1 << 4;
/// `[a-zA-Z0-9._~:@!$&')(*+,;=%[]/-]`: an AT-URI fragment (a JSON pointer).
const FRAGMENT: u16 = 1 << 5;
/// `[234567a-z]`: the base32-sortable alphabet of TIDs.
const TID_CHAR: u16 = 1 << 6;
/// `[234567a-j]`: the first TID character, whose top bit must be zero.
const TID_FIRST: u16 = 1 << 7;
/// `[0-9a-fA-F]`: a hex digit of a percent escape.
const HEX: u16 = 1 << 8;
/// `[a-z.-]`: a generic URI scheme after its first letter.
const SCHEME: u16 = 1 << 9;
/// The top five bits hold a TID character's base32-sortable value (`2`–`7` are 0–5, `a`–`z`
/// are 6–31), so decoding a TID needs no second lookup.
const TID_VALUE_SHIFT: u32 = 11;

const ALNUM: u16 = ALPHA | DIGIT;

static CLASSES: [u16; 256] = build_classes();

// The table is built during compilation, where an index out of bounds is a build error rather
// than a run-time panic; `get_mut` is not yet callable in a `const fn`.
#[allow(clippy::indexing_slicing)]
const fn build_classes() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut byte = 0usize;
    while byte < 256 {
        let b = byte as u8;
        let mut class = 0u16;
        let is_alpha = b.is_ascii_alphabetic();
        let is_digit = b.is_ascii_digit();
        let is_alnum = is_alpha || is_digit;
        if is_alpha {
            class |= ALPHA;
        }
        if is_digit {
            class |= DIGIT;
        }
        if is_alnum || matches!(b, b'.' | b'_' | b':' | b'%' | b'-') {
            class |= DID_ID;
        }
        if is_alnum || matches!(b, b'_' | b'~' | b'.' | b':' | b'-') {
            class |= RKEY;
        }
        if is_alnum || matches!(b, b'+' | b'=') {
            class |= CID;
        }
        if is_alnum
            || matches!(
                b,
                b'.' | b'_'
                    | b'~'
                    | b':'
                    | b'@'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b')'
                    | b'('
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
                    | b'['
                    | b']'
                    | b'/'
                    | b'-'
            )
        {
            class |= FRAGMENT;
        }
        if matches!(b, b'2'..=b'7') {
            class |= TID_CHAR | (((b - b'2') as u16) << TID_VALUE_SHIFT);
        }
        if b.is_ascii_lowercase() {
            class |= TID_CHAR | (((b - b'a' + 6) as u16) << TID_VALUE_SHIFT);
        }
        if matches!(b, b'2'..=b'7' | b'a'..=b'j') {
            class |= TID_FIRST;
        }
        if b.is_ascii_hexdigit() {
            class |= HEX;
        }
        if b.is_ascii_lowercase() || b == b'.' || b == b'-' {
            class |= SCHEME;
        }
        table[byte] = class;
        byte += 1;
    }
    table
}

/// The class bits of `byte`.
#[inline(always)]
fn class_of(byte: u8) -> u16 {
    // A `u8` always indexes a 256-entry table, so the fallback is never taken and the
    // optimizer drops the bounds check.
    CLASSES.get(usize::from(byte)).copied().unwrap_or(0)
}

/// Whether `byte` belongs to any of the classes in `mask`.
#[inline(always)]
fn is(byte: u8, mask: u16) -> bool {
    class_of(byte) & mask != 0
}

/// Whether every byte of `bytes` belongs to a class in `mask`.
#[inline(always)]
fn all(bytes: &[u8], mask: u16) -> bool {
    bytes.iter().all(|&byte| is(byte, mask))
}

/// Whether `s` is a syntactically valid DID (`did:<method>:<identifier>`).
///
/// The method is lowercase letters. The identifier is `[a-zA-Z0-9._:%-]`, non-empty, and does
/// not end in `:` or `%`. Percent escapes are not decoded or checked, as the spec says.
pub fn is_valid_did(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.len() > DID_BYTES_MAX {
        return false;
    }
    let Some(rest) = bytes.strip_prefix(b"did:") else {
        return false;
    };
    let method_len = rest
        .iter()
        .take_while(|byte| byte.is_ascii_lowercase())
        .count();
    if method_len == 0 {
        return false;
    }
    let Some((&b':', identifier)) = rest.get(method_len..).and_then(<[u8]>::split_first) else {
        return false;
    };
    match identifier.last() {
        None | Some(b':' | b'%') => false,
        Some(_) => all(identifier, DID_ID),
    }
}

/// Whether `label` is a DNS label: 1 to 63 letters, digits and hyphens, with no hyphen first or
/// last.
#[inline]
fn is_valid_label(label: &[u8]) -> bool {
    let (Some(&first), Some(&last)) = (label.first(), label.last()) else {
        return false;
    };
    label.len() <= LABEL_BYTES_MAX
        && first != b'-'
        && last != b'-'
        && label.iter().all(|&byte| byte == b'-' || is(byte, ALNUM))
}

/// Whether `s` is a syntactically valid handle.
///
/// A handle is a DNS name of at least two labels, at most 253 bytes, whose last label (the
/// top-level domain) starts with a letter. Disallowed TLDs such as `.local` are a policy
/// question for resolution, not syntax, so they pass.
pub fn is_valid_handle(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.len() > HANDLE_BYTES_MAX {
        return false;
    }
    let Some(tld_dot_idx) = bytes.iter().rposition(|&byte| byte == b'.') else {
        return false;
    };
    let (Some(domain), Some(tld)) = (bytes.get(..tld_dot_idx), bytes.get(tld_dot_idx + 1..)) else {
        return false;
    };
    let tld_starts_with_letter = tld.first().is_some_and(|&byte| is(byte, ALPHA));
    tld_starts_with_letter
        && is_valid_label(tld)
        && domain.split(|&byte| byte == b'.').all(is_valid_label)
}

/// Whether `s` is a syntactically valid NSID (`<reversed domain>.<name>`).
///
/// At least three segments and at most 317 bytes. Domain segments are DNS labels, and the first
/// one starts with a letter. The name is a letter followed by letters and digits, at most 63.
pub fn is_valid_nsid(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.len() > NSID_BYTES_MAX {
        return false;
    }
    let Some(name_dot_idx) = bytes.iter().rposition(|&byte| byte == b'.') else {
        return false;
    };
    let (Some(authority), Some(name)) = (bytes.get(..name_dot_idx), bytes.get(name_dot_idx + 1..))
    else {
        return false;
    };
    let name_ok = name.len() <= LABEL_BYTES_MAX
        && name.first().is_some_and(|&byte| is(byte, ALPHA))
        && all(name, ALNUM);
    let authority_starts_with_letter = authority.first().is_some_and(|&byte| is(byte, ALPHA));
    // The authority needs two segments for the NSID to have three, so it must hold a period.
    let authority_has_two_segments = authority.contains(&b'.');
    name_ok
        && authority_starts_with_letter
        && authority_has_two_segments
        && authority.split(|&byte| byte == b'.').all(is_valid_label)
}

/// Whether `s` is a syntactically valid record key: 1 to 512 bytes of `[a-zA-Z0-9_~.:-]`, other
/// than `.` and `..`.
pub fn is_valid_record_key(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= RECORD_KEY_BYTES_MAX
        && bytes != b"."
        && bytes != b".."
        && all(bytes, RKEY)
}

/// Whether `s` is a syntactically valid at-identifier: a DID or a handle.
pub fn is_valid_at_identifier(s: &str) -> bool {
    if s.starts_with("did:") {
        is_valid_did(s)
    } else {
        is_valid_handle(s)
    }
}

/// Whether `s` is a syntactically valid CID string.
///
/// This is the loose check of the spec and the interop vectors: 8 to 256 bytes of
/// `[a-zA-Z0-9+=]`, and not CIDv0. The multibase, multihash and codec are not decoded.
pub fn is_valid_cid(s: &str) -> bool {
    let bytes = s.as_bytes();
    // Every CIDv0 is a bare base58btc sha2-256 multihash, which starts with `Qm`. The Go
    // reference checks only `Qmb`, but multibase reserves the prefix `Q` for CIDv0, so no CIDv1
    // string starts with it and the wider check rejects nothing valid.
    (CID_BYTES_MIN..=CID_BYTES_MAX).contains(&bytes.len())
        && !bytes.starts_with(b"Qm")
        && all(bytes, CID)
}

/// Whether `s` is a syntactically valid TID: 13 base32-sortable characters whose first
/// character keeps the 64-bit value's top bit zero.
pub fn is_valid_tid(s: &str) -> bool {
    parse_tid(s).is_some()
}

/// Decodes a TID (13 base32-sortable characters) into its 64-bit value, or `None` if invalid.
///
/// Decoded values sort like the strings, so a repository's revisions can be compared as
/// integers.
pub fn parse_tid(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    if bytes.len() != TID_LEN || !bytes.first().is_some_and(|&byte| is(byte, TID_FIRST)) {
        return None;
    }
    // The first digit is below 16, so 4 + 12 * 5 = 64 bits are used and no bit is shifted out.
    bytes.iter().try_fold(0u64, |value, &byte| {
        let class = class_of(byte);
        (class & TID_CHAR != 0).then(|| (value << 5) | u64::from(class >> TID_VALUE_SHIFT))
    })
}

/// Encodes a 64-bit value as a TID, the inverse of [`parse_tid`].
pub fn format_tid(value: u64) -> String {
    crate::feed::Tid(value).to_string()
}

/// Microseconds in one second.
const MICROS_PER_SECOND: i64 = 1_000_000;
/// Seconds in one day.
const SECONDS_PER_DAY: i64 = 86_400;
/// `0000-01-01T00:00:00Z` in microseconds since the epoch: no datetime may normalize to before
/// it, because it would print with a negative year.
const DATETIME_MICROS_MIN: i64 = days_from_civil(0, 1, 1) * SECONDS_PER_DAY * MICROS_PER_SECOND;
/// `10000-01-01T00:00:00Z` in microseconds since the epoch: every datetime normalizes to before
/// it, because it must print with a four-digit year.
const DATETIME_MICROS_END: i64 =
    days_from_civil(10_000, 1, 1) * SECONDS_PER_DAY * MICROS_PER_SECOND;

/// Days from 1970-01-01 to `year-month-day` in the proleptic Gregorian calendar.
///
/// This is Howard Hinnant's `days_from_civil`: shifting the year to start in March puts the
/// leap day last, so each 400-year era has a closed form.
const fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = if year >= 0 { year } else { year - 399 } / 400;
    let year_of_era = year - era * 400;
    let month_from_march = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The number of days in `month` of `year`.
const fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The number written by the `len` ASCII digits at `start`, or `None` if any byte is not one.
#[inline(always)]
fn decimal(bytes: &[u8], start: usize, len: usize) -> Option<i64> {
    let digits = bytes.get(start..start.checked_add(len)?)?;
    digits.iter().try_fold(0i64, |value, &byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + i64::from(byte - b'0'))
    })
}

/// Whether the byte at `idx` is `expected`.
#[inline(always)]
fn byte_is(bytes: &[u8], idx: usize, expected: u8) -> bool {
    bytes.get(idx) == Some(&expected)
}

/// Parses an atproto datetime into microseconds since the Unix epoch, or `None` if invalid.
///
/// The syntax is the intersection of RFC 3339 and ISO 8601 that atproto requires:
/// `YYYY-MM-DDTHH:MM:SS`, optional fractional seconds of any length (truncated to
/// microseconds), then `Z` or `+HH:MM`/`-HH:MM` (but not `-00:00`, which RFC 3339 reserves for
/// an unknown offset). The date must exist (no month 13, no 30 February), there are no leap
/// seconds (the reference implementations reject second 60), and the UTC time must lie in years
/// 0000 to 9999.
pub fn parse_datetime_micros(s: &str) -> Option<i64> {
    let bytes = s.as_bytes();
    let separators_ok = byte_is(bytes, 4, b'-')
        && byte_is(bytes, 7, b'-')
        && byte_is(bytes, 10, b'T')
        && byte_is(bytes, 13, b':')
        && byte_is(bytes, 16, b':');
    if !separators_ok {
        return None;
    }
    let year = decimal(bytes, 0, 4)?;
    let month = decimal(bytes, 5, 2)?;
    let day = decimal(bytes, 8, 2)?;
    let hour = decimal(bytes, 11, 2)?;
    let minute = decimal(bytes, 14, 2)?;
    let second = decimal(bytes, 17, 2)?;
    let (fraction_micros, offset_idx) = fraction(bytes, 19)?;
    let offset_seconds = utc_offset_seconds(bytes.get(offset_idx..)?)?;
    let fields_ok = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour <= 23
        && minute <= 59
        && second <= 59;
    if !fields_ok {
        return None;
    }
    let local_seconds =
        days_from_civil(year, month, day) * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second;
    let micros = (local_seconds - offset_seconds) * MICROS_PER_SECOND + fraction_micros;
    (DATETIME_MICROS_MIN..DATETIME_MICROS_END)
        .contains(&micros)
        .then_some(micros)
}

/// Whether `s` is a valid atproto datetime: its syntax is right and it names a real time
/// (see [`parse_datetime_micros`]).
pub fn is_valid_datetime(s: &str) -> bool {
    parse_datetime_micros(s).is_some()
}

/// The optional fractional seconds at `start`, truncated to microseconds, and the index just
/// after them; `None` if a `.` has no digit after it.
#[inline]
fn fraction(bytes: &[u8], start: usize) -> Option<(i64, usize)> {
    if !byte_is(bytes, start, b'.') {
        return Some((0, start));
    }
    let digits = bytes.get(start + 1..)?;
    let n_digits = digits
        .iter()
        .take_while(|byte| byte.is_ascii_digit())
        .count();
    if n_digits == 0 {
        return None;
    }
    // Digits past the sixth are below a microsecond and are dropped; missing ones are zeros.
    const SCALE_BY_N_KEPT: [i64; 7] = [1_000_000, 100_000, 10_000, 1_000, 100, 10, 1];
    let n_kept = n_digits.min(6);
    let kept = decimal(digits, 0, n_kept)?;
    let micros = kept * SCALE_BY_N_KEPT.get(n_kept)?;
    Some((micros, start + 1 + n_digits))
}

/// The UTC offset written by the whole of `zone` (`Z`, `+HH:MM` or `-HH:MM`), in seconds east
/// of UTC; `None` if `zone` is anything else, including `-00:00`.
#[inline]
fn utc_offset_seconds(zone: &[u8]) -> Option<i64> {
    let sign = match zone {
        b"Z" => return Some(0),
        b"-00:00" => return None,
        [b'+', _, _, b':', _, _] => 1,
        [b'-', _, _, b':', _, _] => -1,
        _ => return None,
    };
    let hours = decimal(zone, 1, 2)?;
    let minutes = decimal(zone, 4, 2)?;
    (hours <= 23 && minutes <= 59).then_some(sign * (hours * 3600 + minutes * 60))
}

/// The parts of an AT-URI that names one record: `at://<did>/<collection>/<rkey>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordUri<'a> {
    /// The repository DID.
    pub did: &'a str,
    /// The collection NSID.
    pub collection: &'a str,
    /// The record key.
    pub rkey: &'a str,
}

impl<'a> RecordUri<'a> {
    /// Parses an AT-URI naming one record by DID; `None` if it is not one (a handle authority, a
    /// missing record key, a query or fragment, or any invalid part).
    pub fn parse(uri: &'a str) -> Option<RecordUri<'a>> {
        let rest = uri.strip_prefix("at://")?;
        let (did, rest) = rest.split_once('/')?;
        let (collection, rkey) = rest.split_once('/')?;
        // A further `/`, a `?` or a `#` is not a record key byte, so the record key check also
        // rejects extra path segments, queries and fragments.
        let ok = is_valid_did(did) && is_valid_nsid(collection) && is_valid_record_key(rkey);
        ok.then_some(RecordUri {
            did,
            collection,
            rkey,
        })
    }

    /// The URI `at://<did>/<collection>/<rkey>`, in one allocation of its exact length: pages
    /// build one per entry, and `format!` grows its buffer two or three times for each.
    pub fn to_uri(&self) -> String {
        ["at://", self.did, "/", self.collection, "/", self.rkey].concat()
    }
}

/// Whether `s` is a syntactically valid AT-URI: `at://<did or handle>[/<nsid>[/<rkey>]]`,
/// optionally followed by a `#/…` JSON-pointer fragment.
///
/// Queries are rejected and trailing slashes too, as the reference implementation does in its
/// strict (default) mode. Percent escapes in the fragment must be two hex digits; what they
/// decode to is not checked.
pub fn is_valid_at_uri(s: &str) -> bool {
    if s.len() > AT_URI_BYTES_MAX {
        return false;
    }
    let Some(rest) = s.strip_prefix("at://") else {
        return false;
    };
    let (path, fragment) = match rest.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (rest, None),
    };
    if fragment.is_some_and(|fragment| !is_valid_fragment(fragment.as_bytes())) {
        return false;
    }
    let mut segments = path.split('/');
    let authority_ok = segments.next().is_some_and(is_valid_at_identifier);
    let collection_ok = segments.next().is_none_or(is_valid_nsid);
    let rkey_ok = segments.next().is_none_or(is_valid_record_key);
    // A fourth segment, even an empty one from a trailing slash, is not allowed.
    authority_ok && collection_ok && rkey_ok && segments.next().is_none()
}

/// Whether `fragment` (after the `#`) is a JSON pointer with only the bytes an AT-URI allows.
fn is_valid_fragment(fragment: &[u8]) -> bool {
    if !fragment.starts_with(b"/") || !all(fragment, FRAGMENT) {
        return false;
    }
    let mut byte_idx = 0;
    while let Some(&byte) = fragment.get(byte_idx) {
        if byte == b'%' {
            let escape_ok = fragment.get(byte_idx + 1).is_some_and(|&hex| is(hex, HEX))
                && fragment.get(byte_idx + 2).is_some_and(|&hex| is(hex, HEX));
            if !escape_ok {
                return false;
            }
            byte_idx += 3;
        } else {
            byte_idx += 1;
        }
    }
    true
}

/// Whether `s` is a syntactically valid generic URI, as the Lexicon `uri` format requires.
///
/// A scheme of a lowercase letter and up to 80 lowercase letters, periods and hyphens, a colon,
/// then at least one printable non-space ASCII byte; at most 8 KiB in all. This is the Go
/// reference's rule; the TypeScript one rejects schemes with hyphens such as `content-type:`,
/// which the vectors call valid.
pub fn is_valid_uri(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.len() > URI_BYTES_MAX || !bytes.first().is_some_and(u8::is_ascii_lowercase) {
        return false;
    }
    let Some(colon_idx) = bytes.iter().position(|&byte| byte == b':') else {
        return false;
    };
    let (Some(scheme), Some(rest)) = (bytes.get(1..colon_idx), bytes.get(colon_idx + 1..)) else {
        return false;
    };
    colon_idx <= URI_SCHEME_BYTES_MAX
        && all(scheme, SCHEME)
        && !rest.is_empty()
        && rest.iter().all(u8::is_ascii_graphic)
}

/// The "grandfathered" tags of RFC 5646, which are valid whole even where the grammar would
/// reject them.
const GRANDFATHERED_LANGUAGES: [&str; 26] = [
    "en-GB-oed",
    "i-ami",
    "i-bnn",
    "i-default",
    "i-enochian",
    "i-hak",
    "i-klingon",
    "i-lux",
    "i-mingo",
    "i-navajo",
    "i-pwn",
    "i-tao",
    "i-tay",
    "i-tsu",
    "sgn-BE-FR",
    "sgn-BE-NL",
    "sgn-CH-DE",
    "art-lojban",
    "cel-gaulish",
    "no-bok",
    "no-nyn",
    "zh-guoyu",
    "zh-hakka",
    "zh-min",
    "zh-min-nan",
    "zh-xiang",
];

/// Whether `s` is a well-formed BCP 47 language tag (RFC 5646 §2.1), as atproto's `language`
/// format requires.
///
/// Only the grammar is checked, case-insensitively; see [`is_valid_language_strict`] for the
/// extra rules of strict parsing.
pub fn is_valid_language(s: &str) -> bool {
    check_language(s, false)
}

/// Whether `s` is a well-formed language tag that also passes strict parsing: a lowercase 2- or
/// 3-letter primary language, and no variant or extension singleton repeated (RFC 5646 §4.1,
/// compared case-insensitively).
pub fn is_valid_language_strict(s: &str) -> bool {
    check_language(s, true)
}

/// The subtags of a language tag with the byte index where each starts.
struct Subtags<'a> {
    bytes: &'a [u8],
    next_idx: usize,
}

impl<'a> Iterator for Subtags<'a> {
    type Item = (usize, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let start_idx = self.next_idx;
        let rest = self.bytes.get(start_idx..)?;
        let len = rest
            .iter()
            .position(|&byte| byte == b'-')
            .unwrap_or(rest.len());
        self.next_idx = start_idx + len + 1;
        Some((start_idx, rest.get(..len)?))
    }
}

fn is_alpha_run(subtag: &[u8], lens: std::ops::RangeInclusive<usize>) -> bool {
    lens.contains(&subtag.len()) && all(subtag, ALPHA)
}

fn is_alnum_run(subtag: &[u8], lens: std::ops::RangeInclusive<usize>) -> bool {
    lens.contains(&subtag.len()) && all(subtag, ALNUM)
}

fn is_region(subtag: &[u8]) -> bool {
    is_alpha_run(subtag, 2..=2) || (subtag.len() == 3 && all(subtag, DIGIT))
}

fn is_variant(subtag: &[u8]) -> bool {
    is_alnum_run(subtag, 5..=8)
        || (subtag.len() == 4
            && subtag.first().is_some_and(u8::is_ascii_digit)
            && all(subtag, ALNUM))
}

fn is_private_use_marker(subtag: &[u8]) -> bool {
    subtag.eq_ignore_ascii_case(b"x")
}

/// The bit of an extension singleton (any letter or digit but `x`) in a 36-bit set.
fn singleton_bit(subtag: &[u8]) -> Option<u64> {
    match subtag {
        [byte] if byte.is_ascii_digit() => Some(1 << (byte - b'0')),
        [byte] if byte.is_ascii_alphabetic() && !byte.eq_ignore_ascii_case(&b'x') => {
            Some(1 << (10 + (byte.to_ascii_lowercase() - b'a')))
        }
        _ => None,
    }
}

/// Whether the rest of a tag after `x` is a private-use sequence: one or more subtags of 1 to 8
/// letters and digits.
fn is_private_use_rest(subtags: Subtags<'_>) -> bool {
    let mut n_subtags = 0usize;
    for (_, subtag) in subtags {
        if !is_alnum_run(subtag, 1..=8) {
            return false;
        }
        n_subtags += 1;
    }
    n_subtags > 0
}

/// Walks the RFC 5646 grammar subtag by subtag. Each subtag kind is told apart by its length and
/// character class alone, so one greedy pass accepts exactly what the grammar accepts.
fn check_language(s: &str, strict: bool) -> bool {
    if GRANDFATHERED_LANGUAGES
        .iter()
        .any(|tag| tag.eq_ignore_ascii_case(s))
    {
        return true;
    }
    let bytes = s.as_bytes();
    let mut subtags = Subtags { bytes, next_idx: 0 };
    let Some((_, language)) = subtags.next() else {
        return false;
    };
    if is_private_use_marker(language) {
        return is_private_use_rest(subtags);
    }
    let language_ok = if strict {
        (2..=3).contains(&language.len()) && language.iter().all(u8::is_ascii_lowercase)
    } else {
        is_alpha_run(language, 2..=8)
    };
    if !language_ok {
        return false;
    }
    let mut next = subtags.next();
    if language.len() <= 3 {
        for _ in 0..3 {
            match next {
                Some((_, extlang)) if is_alpha_run(extlang, 3..=3) => next = subtags.next(),
                _ => break,
            }
        }
    }
    if next.is_some_and(|(_, script)| is_alpha_run(script, 4..=4)) {
        next = subtags.next();
    }
    if next.is_some_and(|(_, region)| is_region(region)) {
        next = subtags.next();
    }
    let variants_start_idx = next.map_or(bytes.len(), |(start_idx, _)| start_idx);
    while let Some((variant_idx, variant)) = next
        && is_variant(variant)
    {
        if strict && repeats_earlier_variant(bytes, variants_start_idx, variant_idx, variant) {
            return false;
        }
        next = subtags.next();
    }
    let mut seen_singletons = 0u64;
    while let Some(bit) = next.and_then(|(_, singleton)| singleton_bit(singleton)) {
        if strict && seen_singletons & bit != 0 {
            return false;
        }
        seen_singletons |= bit;
        next = subtags.next();
        if !next.is_some_and(|(_, subtag)| is_alnum_run(subtag, 2..=8)) {
            return false;
        }
        while next.is_some_and(|(_, subtag)| is_alnum_run(subtag, 2..=8)) {
            next = subtags.next();
        }
    }
    match next {
        None => true,
        Some((_, marker)) if is_private_use_marker(marker) => is_private_use_rest(subtags),
        Some(_) => false,
    }
}

/// Whether `variant` equals, ignoring case, one of the variants between `start_idx` and
/// `variant_idx`. Tags have few variants, so rescanning beats keeping a set.
fn repeats_earlier_variant(
    bytes: &[u8],
    start_idx: usize,
    variant_idx: usize,
    variant: &[u8],
) -> bool {
    let Some(earlier) = variant_idx
        .checked_sub(1)
        .and_then(|end_idx| bytes.get(start_idx..end_idx))
    else {
        return false;
    };
    !earlier.is_empty()
        && earlier
            .split(|&byte| byte == b'-')
            .any(|other| other.eq_ignore_ascii_case(variant))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the TID decoder against values computed by hand: `2` is digit 0 and `z` is 31, so
    // all-`2` is zero and the largest valid TID has 4 + 60 one bits.
    #[test]
    fn tid_values() {
        assert_eq!(parse_tid("2222222222222"), Some(0));
        assert_eq!(parse_tid("2222222222223"), Some(1));
        assert_eq!(parse_tid("222222222222z"), Some(31));
        assert_eq!(parse_tid("2222222222232"), Some(32));
        assert_eq!(parse_tid("jzzzzzzzzzzzz"), Some(u64::MAX));
        assert_eq!(
            parse_tid("7zzzzzzzzzzzz"),
            Some((5 << 60) | ((1 << 60) - 1))
        );
        // The first digit must stay below 16, or bit 64 would be needed.
        assert_eq!(parse_tid("kzzzzzzzzzzzz"), None);
        assert_eq!(parse_tid("3JZFCIJPJ2Z2A"), None);
        assert_eq!(parse_tid("3jzfcijpj2z2"), None);
    }

    proptest::proptest! {
        // Checks that formatting a value and parsing it back gives the value, for any value.
        #[test]
        fn tid_format_round_trips(value in proptest::prelude::any::<u64>()) {
            proptest::prop_assert_eq!(parse_tid(&format_tid(value)), Some(value));
        }
    }

    // Checks that decoded TIDs order like their strings, which is what revision comparison
    // relies on, by sorting a few hand-picked TIDs both ways.
    #[test]
    fn tid_order_matches_string_order() {
        let mut tids = [
            "3jzfcijpj2z2a",
            "2222222222222",
            "7777777777777",
            "a222222222222",
            "3zzzzzzzzzzzz",
        ];
        tids.sort_unstable();
        let values: Vec<u64> = tids.iter().map(|tid| parse_tid(tid).unwrap()).collect();
        assert!(
            values.windows(2).all(|pair| pair[0] < pair[1]),
            "{tids:?} -> {values:?}"
        );
    }

    // Checks datetimes against epoch offsets worked out by hand, including fractions of every
    // length (truncated, never rounded) and times before 1970.
    #[test]
    fn datetime_values() {
        assert_eq!(parse_datetime_micros("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_datetime_micros("1970-01-01T00:00:01.5Z"),
            Some(1_500_000)
        );
        assert_eq!(
            parse_datetime_micros("1970-01-01T00:00:00.123456Z"),
            Some(123_456)
        );
        assert_eq!(
            parse_datetime_micros("1970-01-01T00:00:00.1234569999Z"),
            Some(123_456)
        );
        assert_eq!(
            parse_datetime_micros("1970-01-01T00:00:00.000001Z"),
            Some(1)
        );
        assert_eq!(
            parse_datetime_micros("1969-12-31T23:59:59.5Z"),
            Some(-500_000)
        );
        assert_eq!(
            parse_datetime_micros("1970-01-02T00:00:00Z"),
            Some(86_400_000_000)
        );
        // 2000 is a leap year: 30 years of 365 days plus 7 leap days, then 31 + 28 days.
        assert_eq!(
            parse_datetime_micros("2000-02-29T00:00:00Z"),
            Some((30 * 365 + 7 + 59) * 86_400 * 1_000_000)
        );
        assert_eq!(
            parse_datetime_micros("1985-04-12T23:20:50.123Z"),
            Some(482_196_050_123_000)
        );
    }

    // Checks that offsets are applied (local time minus offset is UTC) by comparing each
    // zoned time with the same instant written in UTC.
    #[test]
    fn datetime_offsets() {
        let utc = parse_datetime_micros("1985-04-13T06:20:50.123Z");
        assert!(utc.is_some());
        assert_eq!(parse_datetime_micros("1985-04-12T23:20:50.123-07:00"), utc);
        assert_eq!(parse_datetime_micros("1985-04-13T08:05:50.123+01:45"), utc);
        assert_eq!(parse_datetime_micros("1985-04-13T06:20:50.123+00:00"), utc);
        assert_eq!(parse_datetime_micros("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_datetime_micros("1985-04-13T06:20:50.123-00:00"), None);
        assert_eq!(parse_datetime_micros("1985-04-13T06:20:50.123+24:00"), None);
    }

    // Checks the edges of the calendar and of the allowed range: day counts per month, leap
    // years, and instants that normalize to before year 0000 or after year 9999.
    #[test]
    fn datetime_edges() {
        assert!(is_valid_datetime("2024-02-29T00:00:00Z"));
        assert!(!is_valid_datetime("2023-02-29T00:00:00Z"));
        assert!(!is_valid_datetime("1900-02-29T00:00:00Z"));
        assert!(!is_valid_datetime("2024-04-31T00:00:00Z"));
        assert!(!is_valid_datetime("2024-01-01T00:00:60Z"));
        assert!(!is_valid_datetime("2024-01-01T24:00:00Z"));
        assert!(is_valid_datetime("0000-01-01T00:00:00Z"));
        assert!(!is_valid_datetime("0000-01-01T00:00:00+00:01"));
        assert!(is_valid_datetime("9999-12-31T23:59:59.999999Z"));
        assert!(!is_valid_datetime("9999-12-31T23:59:59-00:01"));
        assert!(!is_valid_datetime("2024-01-01T00:00:00.Z"));
        assert!(!is_valid_datetime("2024-01-01T00:00:00Z "));
        assert!(!is_valid_datetime("2024-01-01T00:00:00"));
        assert!(!is_valid_datetime("yesterday"));
        assert!(!is_valid_datetime(""));
    }

    // Checks that a record URI splits into borrowed parts and that each way of not naming a
    // record by DID is refused.
    #[test]
    fn record_uri() {
        let uri = "at://did:plc:abc/app.bsky.feed.post/3jzfcijpj2z2a";
        assert_eq!(
            RecordUri::parse(uri),
            Some(RecordUri {
                did: "did:plc:abc",
                collection: "app.bsky.feed.post",
                rkey: "3jzfcijpj2z2a"
            })
        );
        for bad in [
            "at://alice.bsky.social/app.bsky.feed.post/3jzfcijpj2z2a",
            "at://did:plc:abc/app.bsky.feed.post",
            "at://did:plc:abc/app.bsky.feed.post/",
            "at://did:plc:abc/app.bsky.feed.post/a/b",
            "at://did:plc:abc/app.bsky.feed.post/a?x=1",
            "at://did:plc:abc/app.bsky.feed.post/a#/x",
            "at://did:plc:abc/post/a",
            "https://x",
            "at://did:plc:abc/app.bsky.feed.post/..",
        ] {
            assert_eq!(RecordUri::parse(bad), None, "{bad}");
        }
        // Built back, a parsed URI is the text it was parsed from, with no spare capacity.
        for good in [uri, "at://did:web:example.com/app.bsky.graph.follow/self"] {
            let built = RecordUri::parse(good).map(|parsed| parsed.to_uri());
            assert_eq!(built.as_deref(), Some(good));
            assert_eq!(built.map(|b| b.capacity()), Some(good.len()));
        }
    }

    // Checks the class table against the spelled-out character sets, byte by byte, so a typo in
    // `build_classes` cannot hide behind the vectors' limited alphabet.
    #[test]
    fn class_table_matches_sets() {
        let sets: [(u16, &[u8]); 4] = [
            (DID_ID, b"._:%-"),
            (RKEY, b"_~.:-"),
            (CID, b"+="),
            (FRAGMENT, b"._~:@!$&')(*+,;=%[]/-"),
        ];
        for (mask, extra) in sets {
            for byte in 0..=255u8 {
                let expected = byte.is_ascii_alphanumeric() || extra.contains(&byte);
                assert_eq!(is(byte, mask), expected, "byte {byte:#04x} mask {mask:#x}");
            }
        }
        let tid_alphabet = b"234567abcdefghijklmnopqrstuvwxyz";
        for byte in 0..=255u8 {
            assert_eq!(is(byte, TID_CHAR), tid_alphabet.contains(&byte));
            assert_eq!(is(byte, TID_FIRST), tid_alphabet[..16].contains(&byte));
        }
        for (digit_value, &byte) in tid_alphabet.iter().enumerate() {
            assert_eq!(usize::from(class_of(byte) >> TID_VALUE_SHIFT), digit_value);
        }
    }

    // Checks strict language parsing on repeats that differ only in case, which the grammar
    // alone accepts.
    #[test]
    fn language_strict_repeats() {
        assert!(is_valid_language("de-DE-1901-1901"));
        assert!(!is_valid_language_strict("de-DE-1901-1901"));
        assert!(!is_valid_language_strict("en-rozaj-ROZAJ"));
        assert!(!is_valid_language_strict("en-a-foo-A-bar"));
        assert!(is_valid_language_strict("sl-rozaj-biske"));
        assert!(is_valid_language_strict("en-a-foo-b-bar"));
        assert!(is_valid_language_strict("de-CH-1901"));
    }
}
