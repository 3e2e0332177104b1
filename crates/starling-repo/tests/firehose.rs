//! The real relay frames of `relay-corpus/frames.bin.zst` decode, every commit's signature
//! verifies against its DID document in `did_docs.json.zst`, and the Jetstream events written
//! from them equal the ones production Jetstream wrote for the same window
//! (`expected_v1.jsonl`), record for record. A commit whose signature has one flipped byte
//! (re-encoded with a correct CID, so only the signature is wrong) is refused as such.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::path::PathBuf;

use starling_repo::firehose::{CommitFrame, Frame};
use starling_repo::{Cid, Ipld, PublicKey};

fn data(name: &str) -> Option<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/jetstream")
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

fn frames(compressed: &[u8]) -> Vec<Vec<u8>> {
    let bytes = zstd::decode_all(compressed).unwrap();
    let mut res = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let (len, tail) = rest.split_at(4);
        let len = u32::from_le_bytes(len.try_into().unwrap()) as usize;
        let (frame, tail) = tail.split_at(len);
        res.push(frame.to_vec());
        rest = tail;
    }
    res
}

fn keys(compressed: &[u8]) -> HashMap<String, PublicKey> {
    let docs: serde_json::Value =
        serde_json::from_slice(&zstd::decode_all(compressed).unwrap()).unwrap();
    let mut res = HashMap::new();
    for (did, doc) in docs.as_object().unwrap() {
        let method = doc["verificationMethod"]
            .as_array()
            .unwrap()
            .iter()
            .find(|method| method["id"].as_str().unwrap().ends_with("#atproto"))
            .unwrap();
        let key = PublicKey::from_multikey(method["publicKeyMultibase"].as_str().unwrap()).unwrap();
        res.insert(did.clone(), key);
    }
    res
}

/// The commit fields of a Jetstream event that a relay frame determines.
fn commit_fields(
    event: &serde_json::Value,
) -> (
    String,
    String,
    String,
    String,
    String,
    serde_json::Value,
    serde_json::Value,
) {
    let commit = &event["commit"];
    let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
    (
        text(&event["did"]),
        text(&commit["rev"]),
        text(&commit["operation"]),
        text(&commit["collection"]),
        text(&commit["rkey"]),
        commit["cid"].clone(),
        commit["record"].clone(),
    )
}

#[test]
fn relay_frames_verify_and_equal_the_jetstream_events() {
    let (Some(frames_zst), Some(docs), Some(expected)) = (
        data("relay-corpus/frames.bin.zst"),
        data("did_docs.json.zst"),
        data("expected_v1.jsonl"),
    ) else {
        return;
    };
    let frames = frames(&frames_zst);
    assert_eq!(frames.len(), 150);
    let keys = keys(&docs);
    let mut got = Vec::new();
    let (mut n_identity, mut n_account) = (0, 0);
    for bytes in &frames {
        match Frame::decode(bytes).unwrap() {
            Frame::Commit(commit) => {
                let key = &keys[&commit.repo];
                for event in commit.events(key, 1).unwrap().0 {
                    got.push(commit_fields(&serde_json::from_str(&event).unwrap()));
                }
            }
            Frame::Identity { .. } => n_identity += 1,
            Frame::Account { .. } => n_account += 1,
            other => panic!("unexpected frame {other:?}"),
        }
    }
    assert_eq!((n_identity, n_account), (1, 1));
    let mut want: Vec<_> = String::from_utf8(expected)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["kind"] == "commit")
        .map(|event| commit_fields(&event))
        .collect();
    assert_eq!(want.len(), 150);
    got.sort_by(|a, b| (&a.0, &a.1, &a.4).cmp(&(&b.0, &b.1, &b.4)));
    want.sort_by(|a, b| (&a.0, &a.1, &a.4).cmp(&(&b.0, &b.1, &b.4)));
    assert_eq!(got, want);
}

/// `frame` with one byte of its commit's signature flipped, re-encoded with the commit's new
/// CID in the CAR slice and the frame, so that only the signature is wrong.
pub fn flip_signature_byte(frame: &[u8], byte_idx: usize) -> Vec<u8> {
    let (header, mut body) = starling_repo::firehose::split(frame).unwrap();
    assert_eq!(header.kind.as_deref(), Some("#commit"));
    let Ipld::Map(map) = &mut body else { panic!() };
    let Some(Ipld::Bytes(car_bytes)) = map.get("blocks") else {
        panic!()
    };
    let Some(Ipld::Link(commit_cid)) = map.get("commit") else {
        panic!()
    };
    let car = starling_repo::car::Car::parse(car_bytes).unwrap();
    let mut commit: Ipld = serde_ipld_dagcbor_free_decode(car.block(commit_cid).unwrap());
    let Ipld::Map(commit_map) = &mut commit else {
        panic!()
    };
    let Some(Ipld::Bytes(sig)) = commit_map.get_mut("sig") else {
        panic!()
    };
    sig[byte_idx] ^= 0x01;
    let commit_bytes = starling_repo::car::encode(&commit);
    let new_cid = starling_repo::car::cid_of_cbor(&commit_bytes);
    let mut blocks: Vec<(Cid, Vec<u8>)> = vec![(new_cid, commit_bytes)];
    for (cid, bytes) in car.blocks() {
        if cid != commit_cid {
            blocks.push((*cid, bytes.to_vec()));
        }
    }
    let blocks: Vec<(Cid, &[u8])> = blocks
        .iter()
        .map(|(cid, bytes)| (*cid, &bytes[..]))
        .collect();
    let new_car = starling_repo::car::write(&[new_cid], &blocks);
    map.insert("blocks".to_owned(), Ipld::Bytes(new_car));
    map.insert("commit".to_owned(), Ipld::Link(new_cid));
    let header = Ipld::Map(
        [
            ("op".to_owned(), Ipld::Integer(1)),
            ("t".to_owned(), Ipld::String("#commit".to_owned())),
        ]
        .into_iter()
        .collect(),
    );
    let mut res = starling_repo::car::encode(&header);
    res.extend(starling_repo::car::encode(&body));
    res
}

fn serde_ipld_dagcbor_free_decode(bytes: &[u8]) -> Ipld {
    starling_repo::car::decode(bytes).unwrap()
}

#[test]
fn a_flipped_signature_byte_is_refused_as_a_bad_signature() {
    let (Some(frames_zst), Some(docs)) = (
        data("relay-corpus/frames.bin.zst"),
        data("did_docs.json.zst"),
    ) else {
        return;
    };
    let keys = keys(&docs);
    let frame = frames(&frames_zst)
        .into_iter()
        .find(|bytes| matches!(Frame::decode(bytes), Ok(Frame::Commit(_))))
        .unwrap();
    let commit_of = |bytes: &[u8]| -> Box<CommitFrame> {
        match Frame::decode(bytes).unwrap() {
            Frame::Commit(commit) => commit,
            _ => panic!(),
        }
    };
    let original = commit_of(&frame);
    // The re-encoding itself is faithful: flipping the same byte twice verifies again.
    let twice = flip_signature_byte(&flip_signature_byte(&frame, 10), 10);
    assert!(commit_of(&twice).events(&keys[&original.repo], 1).is_ok());
    for byte_idx in [0, 31, 32, 63] {
        let damaged = commit_of(&flip_signature_byte(&frame, byte_idx));
        let err = damaged.events(&keys[&damaged.repo], 1).unwrap_err();
        assert_eq!(err.reason(), "bad_signature", "byte {byte_idx}: {err}");
    }
}

#[test]
fn damaged_frames_are_errors_or_equal_events_never_panics() {
    // Each truncation of a commit frame is an error; each flipped byte is an error, or decodes
    // to events that differ only where nothing is signed (the relay's own fields).
    let (Some(frames_zst), Some(docs)) = (
        data("relay-corpus/frames.bin.zst"),
        data("did_docs.json.zst"),
    ) else {
        return;
    };
    let keys = keys(&docs);
    let decode = |bytes: &[u8]| -> Result<Vec<String>, starling_repo::RepoError> {
        match Frame::decode(bytes)? {
            Frame::Commit(commit) => match keys.get(&commit.repo) {
                Some(key) => commit.events(key, 1).map(|(lines, _)| lines),
                None => Ok(Vec::new()),
            },
            _ => Ok(Vec::new()),
        }
    };
    let frame = frames(&frames_zst)
        .into_iter()
        .find(|bytes| matches!(Frame::decode(bytes), Ok(Frame::Commit(_))))
        .unwrap();
    let original = decode(&frame).unwrap();
    assert!(!original.is_empty());
    for len in 0..frame.len() {
        assert!(
            decode(&frame[..len]).is_err(),
            "prefix of {len} bytes decodes"
        );
    }
    let mut n_errors = 0;
    for idx in 0..frame.len() {
        let mut damaged = frame.clone();
        damaged[idx] ^= 0x04;
        if decode(&damaged).is_err() {
            n_errors += 1;
        }
    }
    assert!(
        n_errors > frame.len() / 2,
        "{n_errors} of {} flips refused",
        frame.len()
    );
}
