//! A real repository export (`relay-corpus/repo.car`) decodes to exactly the records and the
//! commit that indigo's `goat repo ls` / `goat repo inspect` listed for it, and every damaged
//! copy of it (each truncation, each flipped byte) is a typed error, never a panic and never a
//! partial repository.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::PathBuf;

use starling_repo::{RepoError, Repository};

fn corpus(name: &str) -> Option<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/jetstream/relay-corpus")
        .join(name);
    match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(err) => {
            assert!(
                std::env::var("CI").is_err(),
                "test data {} is missing under CI: {err}",
                path.display()
            );
            eprintln!("skipping: test data {} is missing ({err})", path.display());
            None
        }
    }
}

/// Parses and converts every record: the whole repository or the first error.
fn decode_fully(bytes: &[u8]) -> Result<Vec<(String, String, String)>, RepoError> {
    let repo = Repository::parse(bytes)?;
    let mut res = Vec::new();
    for leaf in repo.leaves() {
        let mut json = String::new();
        repo.record_json(leaf, &mut json)?;
        res.push((leaf.key.clone(), leaf.cid.to_string(), json));
    }
    Ok(res)
}

#[test]
fn repo_car_decodes_to_the_listed_records_and_commit() {
    // Compares with the TSV and the inspect output written by another implementation.
    let (Some(car), Some(tsv), Some(inspect)) = (
        corpus("repo.car"),
        corpus("car_expected_records.tsv"),
        corpus("car_expected_commit.txt"),
    ) else {
        return;
    };
    let expected: Vec<(String, String)> = String::from_utf8(tsv)
        .unwrap()
        .lines()
        .map(|line| {
            let (key, cid) = line.split_once('\t').unwrap();
            (key.to_owned(), cid.to_owned())
        })
        .collect();
    assert_eq!(expected.len(), 23);
    let records = decode_fully(&car).unwrap();
    let got: Vec<(String, String)> = records
        .iter()
        .map(|(key, cid, _)| (key.clone(), cid.clone()))
        .collect();
    assert_eq!(got, expected);
    for (key, _, json) in &records {
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        let collection = key.split_once('/').unwrap().0;
        assert_eq!(value["$type"], collection, "{key}: {json}");
    }
    let repo = Repository::parse(&car).unwrap();
    let inspect = String::from_utf8(inspect).unwrap();
    let field = |name: &str| {
        inspect
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(repo.commit().did, field("DID:"));
    assert_eq!(repo.commit().data.to_string(), field("Data CID:"));
    assert_eq!(repo.commit().rev, field("Revision:"));
    assert_eq!(field("Prev CID:"), "<nil>");
    assert_eq!(repo.commit().prev, None);
    assert_eq!(repo.commit().version, 3);
}

#[test]
fn every_truncation_of_repo_car_is_an_error() {
    // A CAR cut anywhere lacks blocks the commit or the MST needs, or ends inside a section.
    let Some(car) = corpus("repo.car") else {
        return;
    };
    let mut reasons = std::collections::BTreeMap::new();
    for len in 0..car.len() {
        let err = decode_fully(&car[..len]).unwrap_err();
        *reasons.entry(err.reason()).or_insert(0u32) += 1;
    }
    assert!(reasons.contains_key("bad_car"), "{reasons:?}");
    assert!(reasons.contains_key("missing_block"), "{reasons:?}");
}

#[test]
fn every_flipped_byte_of_repo_car_is_an_error() {
    // One flipped bit anywhere changes a length, a CID or a block: the hash check, the
    // framing or the lookups must notice; nothing panics and nothing decodes.
    let Some(car) = corpus("repo.car") else {
        return;
    };
    let mut reasons = std::collections::BTreeMap::new();
    for idx in 0..car.len() {
        // Every bit position, over the file's bytes in turn.
        let bit = 1u8 << (idx % 8);
        let mut damaged = car.clone();
        damaged[idx] ^= bit;
        match decode_fully(&damaged) {
            Err(err) => *reasons.entry(err.reason()).or_insert(0u32) += 1,
            Ok(records) => panic!(
                "byte {idx} ^ {bit:#x} still decodes ({} records)",
                records.len()
            ),
        }
    }
    assert!(reasons.contains_key("hash_mismatch"), "{reasons:?}");
}

#[test]
fn a_key_that_did_not_sign_is_refused() {
    // Any key but the signer's fails; the signer's key is not in the corpus for this DID.
    let Some(car) = corpus("repo.car") else {
        return;
    };
    let repo = Repository::parse(&car).unwrap();
    let other = starling_repo::PublicKey::from_multikey(
        "zQ3shrc8v5X6ZiANcZxA6JerfT2T4SskeCGxpmtDfMuHF9KRj",
    )
    .unwrap();
    let err = repo.verify(&repo.commit().did.clone(), &other).unwrap_err();
    assert_eq!(err.reason(), "bad_signature");
    let err = repo.verify("did:plc:someoneelse", &other).unwrap_err();
    assert_eq!(err.reason(), "bad_block");
}
