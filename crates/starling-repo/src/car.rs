//! CAR v1 files (content-addressable archives): a DAG-CBOR header naming the root CIDs, then
//! sections of `varint length ‖ CID ‖ block bytes`.
//!
//! Parsed from one in-memory buffer, borrowing every block; each block's bytes are hashed and
//! compared with its CID here, so a decoded [`Car`] holds only blocks that are what they claim.

use std::collections::HashMap;

use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use sha2::{Digest, Sha256};

use crate::RepoError;

/// The multicodec of DAG-CBOR blocks.
pub const CODEC_DAG_CBOR: u64 = 0x71;
/// The multicodec of raw blocks (blobs).
pub const CODEC_RAW: u64 = 0x55;
/// The multihash code of sha2-256.
const HASH_SHA2_256: u64 = 0x12;

/// The most blocks one CAR file may hold. A repository of 1M records has about 1.4M blocks
/// (records plus MST nodes at fanout 4), so this admits the largest repositories seen while
/// bounding the index built over a hostile file.
pub const BLOCKS_MAX: usize = 8_000_000;
/// The largest block accepted: records are at most 1 MiB, MST nodes far less.
pub const BLOCK_BYTES_MAX: usize = 2 * 1024 * 1024;

/// A parsed CAR file: its roots and its blocks by CID, borrowed from the input.
#[derive(Debug)]
pub struct Car<'a> {
    roots: Vec<Cid>,
    blocks: HashMap<Cid, &'a [u8]>,
}

impl<'a> Car<'a> {
    /// Parses `bytes` as a CAR v1 file, checking every block's hash against its CID.
    pub fn parse(bytes: &'a [u8]) -> Result<Car<'a>, RepoError> {
        let mut reader = Reader { bytes, offset: 0 };
        let header = reader.section()?.ok_or_else(|| bad_car(0, "empty file"))?;
        let roots = header_roots(header)?;
        let mut blocks = HashMap::new();
        while let Some(section) = reader.section()? {
            let section_offset = reader.offset;
            let mut rest = section;
            let cid = Cid::read_bytes(&mut rest)
                .map_err(|err| bad_car(section_offset, format!("bad CID: {err}")))?;
            check_block(&cid, rest)?;
            if blocks.len() >= BLOCKS_MAX {
                return Err(RepoError::TooLarge {
                    what: "CAR file's block count",
                    len: u64::try_from(blocks.len()).unwrap_or(u64::MAX),
                    max: BLOCKS_MAX as u64,
                });
            }
            blocks.insert(cid, rest);
        }
        Ok(Car { roots, blocks })
    }

    /// The root CIDs the header names (a repository export has one: its commit).
    pub fn roots(&self) -> &[Cid] {
        &self.roots
    }

    /// The block with this CID, already checked against it.
    pub fn block(&self, cid: &Cid) -> Result<&'a [u8], RepoError> {
        self.blocks
            .get(cid)
            .copied()
            .ok_or_else(|| RepoError::MissingBlock {
                cid: cid.to_string(),
            })
    }

    /// Every block by CID, in no particular order.
    pub fn blocks(&self) -> impl Iterator<Item = (&Cid, &'a [u8])> + '_ {
        self.blocks.iter().map(|(cid, bytes)| (cid, *bytes))
    }

    /// The number of blocks.
    pub fn n_blocks(&self) -> usize {
        self.blocks.len()
    }
}

/// Checks that `data` is a block of a supported kind whose sha2-256 digest is `cid`'s.
pub fn check_block(cid: &Cid, data: &[u8]) -> Result<(), RepoError> {
    let bad = |detail| RepoError::BadCid {
        cid: cid.to_string(),
        detail,
    };
    if cid.version() != ipld_core::cid::Version::V1 {
        return Err(bad("not CIDv1"));
    }
    if cid.codec() != CODEC_DAG_CBOR && cid.codec() != CODEC_RAW {
        return Err(bad("codec is neither dag-cbor nor raw"));
    }
    if cid.hash().code() != HASH_SHA2_256 || cid.hash().size() != 32 {
        return Err(bad("hash is not sha2-256"));
    }
    if data.len() > BLOCK_BYTES_MAX {
        return Err(RepoError::TooLarge {
            what: "block",
            len: data.len() as u64,
            max: BLOCK_BYTES_MAX as u64,
        });
    }
    if Sha256::digest(data).as_slice() != cid.hash().digest() {
        return Err(RepoError::HashMismatch {
            cid: cid.to_string(),
        });
    }
    Ok(())
}

/// The CIDv1 (dag-cbor, sha2-256) of a DAG-CBOR block.
pub fn cid_of_cbor(data: &[u8]) -> Cid {
    let digest = Sha256::digest(data);
    // A 32-byte digest always fits the 64-byte multihash.
    let hash = ipld_core::cid::multihash::Multihash::<64>::wrap(HASH_SHA2_256, digest.as_slice())
        .unwrap_or_default();
    Cid::new_v1(CODEC_DAG_CBOR, hash)
}

fn header_roots(header: &[u8]) -> Result<Vec<Cid>, RepoError> {
    let ipld: Ipld = serde_ipld_dagcbor::from_slice(header)
        .map_err(|err| bad_car(0, format!("header is not DAG-CBOR: {err}")))?;
    match ipld.get("version") {
        Ok(Some(Ipld::Integer(1))) => {}
        _ => return Err(bad_car(0, "header version is not 1")),
    }
    let Ok(Some(Ipld::List(roots))) = ipld.get("roots") else {
        return Err(bad_car(0, "header has no roots list"));
    };
    roots
        .iter()
        .map(|root| match root {
            Ipld::Link(cid) => Ok(*cid),
            _ => Err(bad_car(0, "a header root is not a CID")),
        })
        .collect()
}

fn bad_car(offset: u64, detail: impl Into<String>) -> RepoError {
    RepoError::BadCar {
        offset,
        detail: detail.into(),
    }
}

/// Reads `varint length ‖ bytes` sections.
struct Reader<'a> {
    bytes: &'a [u8],
    offset: u64,
}

impl<'a> Reader<'a> {
    /// The next section, `None` at the end of the input.
    fn section(&mut self) -> Result<Option<&'a [u8]>, RepoError> {
        if self.bytes.is_empty() {
            return Ok(None);
        }
        let (len, n_len_bytes) =
            varint(self.bytes).ok_or_else(|| bad_car(self.offset, "bad section length"))?;
        let rest = self.bytes.get(n_len_bytes..).unwrap_or_default();
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len == 0 {
            return Err(bad_car(self.offset, "empty section"));
        }
        let (section, rest) = rest.split_at_checked(len).ok_or_else(|| {
            bad_car(
                self.offset,
                format!("section of {len} bytes runs past the end"),
            )
        })?;
        self.offset += (n_len_bytes + len) as u64;
        self.bytes = rest;
        Ok(Some(section))
    }
}

/// An unsigned LEB128 varint of at most 9 bytes (63 bits) and how many bytes it took.
pub(crate) fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (idx, &byte) in bytes.iter().enumerate().take(9) {
        value |= u64::from(byte & 0x7f) << (7 * idx);
        if byte & 0x80 == 0 {
            return Some((value, idx + 1));
        }
    }
    None
}

/// Writes a CAR v1 file of `roots` and `blocks` (each block's CID and bytes, not checked).
pub fn write(roots: &[Cid], blocks: &[(Cid, &[u8])]) -> Vec<u8> {
    let header = Ipld::Map(
        [
            (
                "roots".to_owned(),
                Ipld::List(roots.iter().map(|root| Ipld::Link(*root)).collect()),
            ),
            ("version".to_owned(), Ipld::Integer(1)),
        ]
        .into_iter()
        .collect(),
    );
    // Encoding a map of a list of links and an integer cannot fail.
    let header = serde_ipld_dagcbor::to_vec(&header).unwrap_or_default();
    let mut res = Vec::new();
    push_varint(&mut res, header.len() as u64);
    res.extend_from_slice(&header);
    for (cid, data) in blocks {
        let cid_bytes = cid.to_bytes();
        push_varint(&mut res, (cid_bytes.len() + data.len()) as u64);
        res.extend_from_slice(&cid_bytes);
        res.extend_from_slice(data);
    }
    res
}

fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Decodes one DAG-CBOR value (for tools and tests that rewrite blocks).
pub fn decode(bytes: &[u8]) -> Result<Ipld, RepoError> {
    serde_ipld_dagcbor::from_slice(bytes).map_err(|err| RepoError::BadBlock {
        cid: cid_of_cbor(bytes).to_string(),
        what: "DAG-CBOR value",
        detail: err.to_string(),
    })
}

/// Encodes one value as DAG-CBOR, map keys in canonical order (for tools and tests that write
/// blocks). A value built from `Ipld` always encodes.
pub fn encode(value: &Ipld) -> Vec<u8> {
    serde_ipld_dagcbor::to_vec(value).unwrap_or_default()
}
