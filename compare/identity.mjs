// A local identity resolver for the reference indexer, fed from the file's identity events, so
// that loading never resolves anything over the network. It has the two methods IndexingService
// calls: `did.resolveAtprotoData` (indexHandle), `did.resolve` (deleteActor, to ask whether the
// account is still hosted) and `handle.resolve` (indexHandle's bidirectional handle check).
//
// What it answers:
// - a DID's handle is the one its latest identity event gave; a DID never seen in one has
//   `handle.invalid`, which resolves to no DID, so its actor row gets a null handle (as the
//   reference does for an unverifiable handle);
// - a handle resolves to the DID that claimed it last (a later claim by another DID takes it over);
// - DID documents have no PDS service, so an `account` event with status `deleted` removes the
//   actor, as the reference does once the PDS no longer hosts the repo.
export class LocalIdResolver {
  constructor() {
    /** DID -> handle as written in its latest identity event. */
    this.handles = new Map()
    /** Lowercased handle -> the DID that claimed it last. */
    this.owners = new Map()
    this.did = {
      resolveAtprotoData: async (did) => this.atprotoData(did),
      resolve: async (did) => this.document(did),
    }
    this.handle = {
      resolve: async (handle) => this.owners.get(handle.toLowerCase()),
    }
  }

  /** Records an identity event's handle (events without one leave the DID unchanged). */
  setHandle(did, handle) {
    if (typeof handle !== 'string' || !handle) return
    const previous = this.handles.get(did)
    if (previous && this.owners.get(previous.toLowerCase()) === did) this.owners.delete(previous.toLowerCase())
    this.handles.set(did, handle)
    if (handle !== 'handle.invalid') this.owners.set(handle.toLowerCase(), did)
  }

  /** The handle a DID document would claim (synchronous form, for the bulk simulator). */
  handleOf(did) {
    return this.handles.get(did) ?? 'handle.invalid'
  }

  /** The DID a handle resolves to (synchronous form, for the bulk simulator). */
  ownerOf(handle) {
    return this.owners.get(handle.toLowerCase())
  }

  atprotoData(did) {
    return { did, handle: this.handleOf(did), signingKey: 'did:key:zQ3shunknown', pds: undefined }
  }

  document(did) {
    return { id: did, alsoKnownAs: [`at://${this.handleOf(did)}`], verificationMethod: [], service: [] }
  }
}
