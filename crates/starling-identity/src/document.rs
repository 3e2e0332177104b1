//! DID documents: parsing the JSON a PLC directory or a did:web host serves, and packing it into
//! the fields of `GetIdentityByDidResponse`.
//!
//! The packing follows the reference dataplane (`@atproto/bsky`,
//! `src/data-plane/server/routes/identity.ts`, `getResultFromDoc`), because the AppView reads
//! `keys` with exactly those names, as the AppView reads them:
//!
//! - `keys`: `{"<fragment>": {"Type": type, "PublicKeyMultibase": key or ""}}` for each
//!   verification method whose `id` has a non-empty fragment (`did:plc:x#atproto` and `#atproto`
//!   both give `atproto`). A later method with the same fragment replaces the value and keeps
//!   the first one's position, as assigning to a JavaScript object does.
//! - `services`: `{"<fragment>": {"Type": type, "URL": endpoint}}`, the same way, for services
//!   whose `serviceEndpoint` is a string; map or list endpoints are left out.
//!
//! The document is validated as `@atproto/identity` validates it (`didDocument` in
//! `common-web/src/did-doc.ts`): `id` is a string, and if present `alsoKnownAs` is a list of
//! strings, each verification method has string `id`, `type` and `controller`, and each service
//! string `id` and `type` and a `serviceEndpoint`. A document failing that is an error there too.

use serde::{Deserialize, Serialize};
use starling_core::syntax;

use crate::IdentityError;

/// The parts of a DID document that identity resolution reads. Unknown fields are ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDocument {
    id: String,
    #[serde(default)]
    also_known_as: Vec<String>,
    #[serde(default)]
    verification_method: Vec<RawVerificationMethod>,
    #[serde(default)]
    service: Vec<RawService>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawVerificationMethod {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    /// Required by the schema, never read.
    #[serde(rename = "controller")]
    _controller: String,
    public_key_multibase: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawService {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    /// A string, a map or a list; only strings are packed.
    service_endpoint: serde_json::Value,
}

/// One entry of the packed `keys` JSON.
#[derive(Serialize)]
struct PackedKey<'a> {
    #[serde(rename = "Type")]
    kind: &'a str,
    #[serde(rename = "PublicKeyMultibase")]
    public_key_multibase: &'a str,
}

/// One entry of the packed `services` JSON.
#[derive(Serialize)]
struct PackedService<'a> {
    #[serde(rename = "Type")]
    kind: &'a str,
    #[serde(rename = "URL")]
    url: &'a str,
}

/// A DID document reduced to what `GetIdentityByDid` answers.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Packed {
    /// The declared handle, lowercased (see `declared_handle`).
    pub handle: Option<String>,
    /// UTF-8 JSON, see the module doc.
    pub keys_json: Vec<u8>,
    /// UTF-8 JSON, see the module doc.
    pub services_json: Vec<u8>,
}

/// Parses the document served for `did` and packs it. The document must be for `did`.
pub(crate) fn parse(did: &str, body: &[u8]) -> Result<Packed, IdentityError> {
    let document: RawDocument =
        serde_json::from_slice(body).map_err(|err| IdentityError::BadDocument {
            did: did.into(),
            message: err.to_string().into_boxed_str(),
        })?;
    if document.id != did {
        return Err(IdentityError::WrongId {
            did: did.into(),
            id: document.id.into_boxed_str(),
        });
    }
    let mut keys: Vec<(&str, PackedKey<'_>)> = Vec::new();
    for method in &document.verification_method {
        let Some(fragment) = fragment(&method.id) else {
            continue;
        };
        let key = PackedKey {
            kind: &method.kind,
            public_key_multibase: method.public_key_multibase.as_deref().unwrap_or_default(),
        };
        insert_or_replace(&mut keys, fragment, key);
    }
    let mut services: Vec<(&str, PackedService<'_>)> = Vec::new();
    for service in &document.service {
        let (Some(fragment), Some(url)) =
            (fragment(&service.id), service.service_endpoint.as_str())
        else {
            continue;
        };
        let packed = PackedService {
            kind: &service.kind,
            url,
        };
        insert_or_replace(&mut services, fragment, packed);
    }
    let res = Packed {
        handle: declared_handle(&document.also_known_as),
        keys_json: to_json_object(did, &keys)?,
        services_json: to_json_object(did, &services)?,
    };
    Ok(res)
}

/// The handle a document declares: the first `at://` alias that is a syntactically valid
/// handle, lowercased (handles are case-insensitive, and the AppView sends them lowercased to
/// `GetDidsByHandles`). The reference dataplane takes the first `at://` alias unchecked; the
/// atproto identity spec and indigo's `DeclaredHandle` skip invalid ones, as this does.
pub(crate) fn declared_handle(also_known_as: &[String]) -> Option<String> {
    also_known_as
        .iter()
        .filter_map(|alias| alias.strip_prefix("at://"))
        .find(|handle| syntax::is_valid_handle(handle))
        .map(str::to_ascii_lowercase)
}

/// The fragment of a verification method or service id: what JavaScript's
/// `id.split('#').at(1)` gives, or `None` when that is missing or empty.
fn fragment(id: &str) -> Option<&str> {
    id.split('#').nth(1).filter(|fragment| !fragment.is_empty())
}

/// Sets `key` to `value`, keeping the position of an existing `key`, like assigning to a
/// JavaScript object. Documents hold a handful of entries, so a linear search is the cheapest.
fn insert_or_replace<'a, V>(pairs: &mut Vec<(&'a str, V)>, key: &'a str, value: V) {
    match pairs.iter_mut().find(|(existing, _)| *existing == key) {
        Some(slot) => slot.1 = value,
        None => pairs.push((key, value)),
    }
}

/// Serializes ordered pairs as one JSON object, in their order.
fn to_json_object<V: Serialize>(did: &str, pairs: &[(&str, V)]) -> Result<Vec<u8>, IdentityError> {
    struct Object<'p, 'a, V>(&'p [(&'a str, V)]);
    impl<V: Serialize> Serialize for Object<'_, '_, V> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_map(self.0.iter().map(|(key, value)| (key, value)))
        }
    }
    // String keys and string fields cannot fail to serialize; the error is kept for form.
    serde_json::to_vec(&Object(pairs)).map_err(|err| IdentityError::BadDocument {
        did: did.into(),
        message: err.to_string().into_boxed_str(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DID: &str = "did:plc:2a7ygipkrbh544aqhcav53oy";

    fn check(document: serde_json::Value, handle: Option<&str>, keys: &str, services: &str) {
        let body = serde_json::to_vec(&document).unwrap();
        let packed = parse(DID, &body).unwrap();
        assert_eq!(packed.handle.as_deref(), handle);
        assert_eq!(std::str::from_utf8(&packed.keys_json).unwrap(), keys);
        assert_eq!(
            std::str::from_utf8(&packed.services_json).unwrap(),
            services
        );
    }

    // A real plc.directory document (from `did_docs.json.zst`) packs byte for byte into the
    // JSON that `JSON.stringify` gives in the reference dataplane.
    #[test]
    fn real_document_packs_like_the_reference() {
        check(
            serde_json::json!({
                "@context": ["https://www.w3.org/ns/did/v1"],
                "id": DID,
                "alsoKnownAs": ["at://t045t.zmb.cm"],
                "verificationMethod": [{
                    "id": format!("{DID}#atproto"),
                    "type": "Multikey",
                    "controller": DID,
                    "publicKeyMultibase": "zQ3shrc8v5X6ZiANcZxA6JerfT2T4SskeCGxpmtDfMuHF9KRj",
                }],
                "service": [{
                    "id": "#atproto_pds",
                    "type": "AtprotoPersonalDataServer",
                    "serviceEndpoint": "https://elfcup.us-east.host.bsky.network",
                }],
            }),
            Some("t045t.zmb.cm"),
            r#"{"atproto":{"Type":"Multikey","PublicKeyMultibase":"zQ3shrc8v5X6ZiANcZxA6JerfT2T4SskeCGxpmtDfMuHF9KRj"}}"#,
            r#"{"atproto_pds":{"Type":"AtprotoPersonalDataServer","URL":"https://elfcup.us-east.host.bsky.network"}}"#,
        );
    }

    // The edge cases of `getResultFromDoc`: ids without a fragment are skipped, a repeated
    // fragment keeps its first position and takes the last value, a missing key is "", and
    // services with a map endpoint are skipped. An empty document packs to `{}` twice.
    #[test]
    fn packing_follows_javascript_object_semantics() {
        check(
            serde_json::json!({
                "id": DID,
                "alsoKnownAs": ["https://example.com", "at://not a handle", "at://Alice.Example.COM", "at://bob.example.com"],
                "verificationMethod": [
                    {"id": "#atproto", "type": "Multikey", "controller": DID, "publicKeyMultibase": "zOld"},
                    {"id": DID, "type": "Multikey", "controller": DID, "publicKeyMultibase": "zNoFragment"},
                    {"id": "#atproto_label", "type": "EcdsaSecp256k1VerificationKey2019", "controller": DID},
                    {"id": format!("{DID}#atproto"), "type": "Multikey", "controller": DID, "publicKeyMultibase": "zNew"},
                    {"id": "a#b#c", "type": "Multikey", "controller": DID, "publicKeyMultibase": "zB"},
                    {"id": "#", "type": "Multikey", "controller": DID, "publicKeyMultibase": "zEmpty"},
                ],
                "service": [
                    {"id": "#map", "type": "X", "serviceEndpoint": {"a": "https://a.example"}},
                    {"id": "#list", "type": "X", "serviceEndpoint": ["https://a.example"]},
                    {"id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": "https://pds.example"},
                ],
            }),
            Some("alice.example.com"),
            r#"{"atproto":{"Type":"Multikey","PublicKeyMultibase":"zNew"},"atproto_label":{"Type":"EcdsaSecp256k1VerificationKey2019","PublicKeyMultibase":""},"b":{"Type":"Multikey","PublicKeyMultibase":"zB"}}"#,
            r#"{"atproto_pds":{"Type":"AtprotoPersonalDataServer","URL":"https://pds.example"}}"#,
        );
        check(serde_json::json!({"id": DID}), None, "{}", "{}");
    }

    // Documents that `@atproto/identity` rejects are errors here too, and every error names the
    // DID asked for.
    #[test]
    fn malformed_documents_are_errors_naming_the_did() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "malformed"),
            (b"{not json", "malformed"),
            (b"[]", "malformed"),
            (b"null", "malformed"),
            (br#"{"alsoKnownAs": []}"#, "missing field `id`"),
            (br#"{"id": 7}"#, "malformed"),
            (
                br#"{"id": "did:plc:2a7ygipkrbh544aqhcav53oy", "alsoKnownAs": "at://a.example.com"}"#,
                "malformed",
            ),
            (
                br##"{"id": "did:plc:2a7ygipkrbh544aqhcav53oy", "verificationMethod": [{"id": "#atproto", "controller": "x"}]}"##,
                "missing field `type`",
            ),
            (
                br##"{"id": "did:plc:2a7ygipkrbh544aqhcav53oy", "verificationMethod": [{"id": "#atproto", "type": "Multikey"}]}"##,
                "missing field `controller`",
            ),
            (
                br##"{"id": "did:plc:2a7ygipkrbh544aqhcav53oy", "service": [{"id": "#atproto_pds", "type": "X"}]}"##,
                "missing field `serviceEndpoint`",
            ),
            (
                br#"{"id": "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"}"#,
                "has `id` `did:plc:aaaaaaaaaaaaaaaaaaaaaaaa`",
            ),
        ];
        for (body, expected) in cases {
            let err = parse(DID, body).unwrap_err();
            let message = err.to_string();
            assert!(message.contains(DID), "{message}");
            assert!(message.contains(expected), "{message}");
        }
    }
}
