//! List cursors as the AppView carries them: the store's position bytes, in hex.

use tonic::Status;

use crate::Shown;

/// Encodes a store list cursor for the AppView: hex, so never `::` and never `did:`.
pub(super) fn list_cursor(cursor: Option<Vec<u8>>) -> String {
    let bytes = cursor.unwrap_or_default();
    // Nibble by nibble into one buffer: every list page ends with a cursor, and a `format!`
    // per byte was a few percent of such a page's time.
    let mut hex = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        for nibble in [byte >> 4, byte & 0xf] {
            hex.extend(char::from_digit(u32::from(nibble), 16));
        }
    }
    hex
}

pub(super) fn check_list_cursor(cursor: &str) -> Result<Option<Vec<u8>>, Status> {
    if cursor.is_empty() {
        return Ok(None);
    }
    let bad = || {
        Status::invalid_argument(format!(
            "`cursor`: `{}` is not a cursor Starling gave",
            Shown(cursor)
        ))
    };
    if !cursor.len().is_multiple_of(2) || cursor.len() > 1024 {
        return Err(bad());
    }
    (0..cursor.len())
        .step_by(2)
        .map(|at| {
            cursor
                .get(at..at + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(bad)
        })
        .collect::<Result<Vec<u8>, Status>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the cursor's hex against `format!`'s for every byte value, and that the parser
    // reads it back to the same bytes.
    #[test]
    fn list_cursors_are_lowercase_hex_and_read_back() {
        let bytes: Vec<u8> = (0..=255).collect();
        let naive: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let cursor = list_cursor(Some(bytes.clone()));
        assert_eq!(cursor, naive);
        assert_eq!(check_list_cursor(&cursor).ok(), Some(Some(bytes)));
        assert_eq!(list_cursor(None), "");
    }
}
