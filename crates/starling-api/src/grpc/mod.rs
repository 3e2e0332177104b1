//! The `bsky.Service` gRPC server: the dataplane interface the Bluesky AppView calls.
//!
//! `proto` is the code generated from `proto/bsky.proto` at build time (messages, server and
//! client). `DataplaneService` implements the service; every RPC answers `UNIMPLEMENTED` until
//! Starling serves it, and the AppView turns that into HTTP 500 for the request that needed it.
//! `grpc_router` and `serve_grpc` serve it over HTTP/2 without TLS (h2c with prior knowledge),
//! which is what the AppView speaks to an `http://` dataplane URL; `grpc_tls_router` serves it
//! over TLS (HTTP/2 negotiated by ALPN) for an `https://` one. Responses are never compressed:
//! the AppView's client accepts no compression.

use std::future::Future;
use std::io;

use starling_core::jetstream;
use starling_identity::Resolver;
use starling_store::{InteractionKind, Store};
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::{Request, Response, Status};
use tracing::debug_span;

use crate::AppState;
use crate::listen::{ListenerLimits, capped_incoming};

mod actors;
mod cursors;
mod gates;
mod lists;
mod moderation;
mod notifications;
mod observe;
mod private;
mod rpc;
mod search;
mod suggestions;
mod tls;

pub use observe::GrpcHealth;
pub use tls::GrpcTls;
use tls::tls_error;

use proto::service_server::{Service, ServiceServer};
use proto::*;

/// Code generated from `proto/bsky.proto`: the `bsky` messages and enums, the server
/// (`service_server`) and the client (`service_client`).
// Generated code has no docs of ours, and a newer clippy must not fail the build on it.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("bsky");
}

/// The largest request message accepted, in bytes (tonic's default, stated here). The AppView
/// sends lists of URIs and DIDs; a larger request is refused with `OUT_OF_RANGE`.
pub const GRPC_REQUEST_BYTES_MAX: usize = 4 * 1024 * 1024;

/// The largest response message sent, in bytes (tonic's default is unbounded). A response over
/// it fails with `OUT_OF_RANGE` instead of being sent.
pub const GRPC_RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Concurrent RPCs (HTTP/2 streams) on one connection. The AppView keeps one HTTP/2 session per
/// dataplane host and multiplexes every RPC on it, so this bounds how many RPCs one AppView has
/// in flight here at once.
pub const GRPC_STREAMS_PER_CONNECTION_MAX: u32 = 1024;

/// gRPC calls in flight at once over all connections, by default; beyond it a call is answered
/// `RESOURCE_EXHAUSTED` at once instead of growing memory (a large GetFollowsFollowing holds
/// ~7 MB while it runs). The AppView retries such a call on another replica.
pub const GRPC_IN_FLIGHT_MAX: usize = 256;

/// Load shedding over a global concurrency limit: a call finding every slot taken is refused.
type InFlightLayers = tower::layer::util::Stack<
    tower::limit::GlobalConcurrencyLimitLayer,
    tower::layer::util::Stack<tower::load_shed::LoadShedLayer, tower::layer::util::Identity>,
>;
/// The longest an RPC may run, in seconds, whatever deadline its client sent (a shorter
/// `grpc-timeout` wins). A call past it is cancelled and answered `CANCELLED`, so a slow
/// query cannot hold a stream and its blocking thread without end.
pub const GRPC_DEADLINE_SECS: u64 = 10;

/// The tonic server with `bsky.Service` added, ready for `serve_grpc`.
pub type GrpcRouter = tonic::transport::server::Router<InFlightLayers>;

/// Starling's implementation of `bsky.Service`, over the same state as the HTTP API.
pub struct DataplaneService<S> {
    state: AppState<S>,
    /// Resolves DID documents for GetIdentityByDid; without it that RPC says `NOT_FOUND`.
    identity: Option<Resolver>,
    /// Calls in flight at once, at most (see [`GRPC_IN_FLIGHT_MAX`]).
    in_flight_max: usize,
    /// What `grpc.health.v1.Health` answers, served beside `bsky.Service`.
    health: GrpcHealth,
    /// The search index; without it the search RPCs say `UNAVAILABLE`.
    search: Option<std::sync::Arc<starling_search::SearchIndex>>,
    /// The DIDs whose verifications count (`ActorInfo.verified_by`).
    trusted_verifiers: actors::TrustedVerifiers,
}

impl<S: Store + 'static> DataplaneService<S> {
    /// A service answering from `state`.
    pub fn new(state: AppState<S>) -> DataplaneService<S> {
        DataplaneService {
            state,
            identity: None,
            in_flight_max: GRPC_IN_FLIGHT_MAX,
            health: GrpcHealth::new(),
            search: None,
            trusted_verifiers: actors::TrustedVerifiers::default(),
        }
    }

    /// Answers the search RPCs from `index`.
    pub fn with_search(
        mut self,
        index: std::sync::Arc<starling_search::SearchIndex>,
    ) -> DataplaneService<S> {
        self.search = Some(index);
        self
    }

    /// Counts the verifications of these DIDs (trusted verifiers) in `ActorInfo`.
    pub fn with_trusted_verifiers(
        mut self,
        dids: impl IntoIterator<Item = String>,
    ) -> DataplaneService<S> {
        self.trusted_verifiers = std::sync::Arc::new(dids.into_iter().collect());
        self
    }

    /// Answers at most `in_flight_max` calls at once (at least one), over all connections.
    pub fn with_in_flight_max(mut self, in_flight_max: usize) -> DataplaneService<S> {
        self.in_flight_max = in_flight_max.max(1);
        self
    }

    /// The health status served beside this service (`NOT_SERVING` until set).
    pub fn health(&self) -> GrpcHealth {
        self.health.clone()
    }

    /// Answers GetIdentityByDid from the DID documents `resolver` fetches.
    pub fn with_identity(mut self, resolver: Resolver) -> DataplaneService<S> {
        self.identity = Some(resolver);
        self
    }
}

/// The routes of `bsky.Service`, served by `service` over h2c, with Starling's limits applied.
pub fn grpc_router<S: Store + 'static>(service: DataplaneService<S>) -> GrpcRouter {
    add_service(Server::builder(), service)
}

/// The routes of `bsky.Service` served over TLS with `tls`'s certificate.
pub fn grpc_tls_router<S: Store + 'static>(
    service: DataplaneService<S>,
    tls: &GrpcTls,
) -> Result<GrpcRouter, String> {
    let builder = Server::builder()
        .tls_config(tls.config.clone())
        .map_err(tls_error)?;
    Ok(add_service(builder, service))
}

fn add_service<S: Store + 'static>(builder: Server, service: DataplaneService<S>) -> GrpcRouter {
    let in_flight = tower::limit::GlobalConcurrencyLimitLayer::new(service.in_flight_max);
    let health = service.health.server();
    let server = ServiceServer::new(service)
        .max_decoding_message_size(GRPC_REQUEST_BYTES_MAX)
        .max_encoding_message_size(GRPC_RESPONSE_BYTES_MAX);
    builder
        .max_concurrent_streams(GRPC_STREAMS_PER_CONNECTION_MAX)
        .timeout(std::time::Duration::from_secs(GRPC_DEADLINE_SECS))
        // A live client answers these pings, so it never looks silent to the idle timeout
        // (`ListenerLimits::idle_timeout`, at least three of these intervals); a dead one
        // does not, and is closed.
        .http2_keepalive_interval(Some(GRPC_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(GRPC_KEEPALIVE_INTERVAL))
        .layer(tower::load_shed::LoadShedLayer::new())
        .layer(in_flight)
        .trace_fn(|request| debug_span!("rpc", path = request.uri().path()))
        .add_service(observe::RpcMetrics::new(server))
        .add_service(health)
}

/// How often gRPC connections are pinged (HTTP/2 PING).
pub const GRPC_KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(20);

/// Serves `router` on `listener` (h2c, or TLS if the router was built with it) with the
/// default [`ListenerLimits`] until `shutdown` resolves, then drains open RPCs.
pub async fn serve_grpc(
    listener: TcpListener,
    router: GrpcRouter,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    serve_grpc_limited(listener, router, ListenerLimits::default(), shutdown).await
}

/// [`serve_grpc`] under `limits`. The idle timeout is raised to three keepalive intervals if
/// it is shorter, so that a live client is never closed.
pub async fn serve_grpc_limited(
    listener: TcpListener,
    router: GrpcRouter,
    mut limits: ListenerLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    limits.idle_timeout = limits.idle_timeout.max(3 * GRPC_KEEPALIVE_INTERVAL);
    router
        .serve_with_incoming_shutdown(capped_incoming(listener, limits), shutdown)
        .await
        .map_err(io::Error::other)
}

/// The status of an RPC Starling does not answer yet; it names the method, so the AppView's
/// error log says which one.
fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!("{method} is not implemented by starling"))
}

/// Implements `Service` for `DataplaneService`: the given methods as written, and every listed
/// one as `UNIMPLEMENTED`. The whole `impl` comes out of the macro because `#[async_trait]`
/// must see the expanded methods. Each line is
/// `ProtoName: rust_name(Request) -> Response;`. Implementing an RPC moves its method from the
/// `unimplemented` list to the `implemented` block.
macro_rules! service_impl {
    (
        implemented { $($implemented:item)* }
        records {
            $($records_method:ident($records_request:ty) -> $records_response:ident = $nsid:expr;)*
        }
        unimplemented {
            $($proto_name:ident: $method:ident($request:ty) -> $response:ty;)*
        }
    ) => {
        #[tonic::async_trait]
        impl<S: Store + 'static> Service for DataplaneService<S> {
            $($implemented)*
            $(
                async fn $records_method(
                    &self,
                    request: Request<$records_request>,
                ) -> Result<Response<$records_response>, Status> {
                    let uris = request.into_inner().uris;
                    let records = rpc::records(&self.state, uris, $nsid).await?;
                    Ok(Response::new($records_response { records }))
                }
            )*
            $(
                async fn $method(
                    &self,
                    _request: Request<$request>,
                ) -> Result<Response<$response>, Status> {
                    Err(unimplemented(stringify!($proto_name)))
                }
            )*
        }
    };
}

service_impl! {
    implemented {
        async fn get_timeline(
            &self,
            request: Request<GetTimelineRequest>,
        ) -> Result<Response<GetTimelineResponse>, Status> {
            rpc::get_timeline(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_author_feed(
            &self,
            request: Request<GetAuthorFeedRequest>,
        ) -> Result<Response<GetAuthorFeedResponse>, Status> {
            rpc::get_author_feed(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_post_records(
            &self,
            request: Request<GetPostRecordsRequest>,
        ) -> Result<Response<GetPostRecordsResponse>, Status> {
            rpc::get_post_records(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_interaction_counts(
            &self,
            request: Request<GetInteractionCountsRequest>,
        ) -> Result<Response<GetInteractionCountsResponse>, Status> {
            rpc::get_interaction_counts(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_counts_for_users(
            &self,
            request: Request<GetCountsForUsersRequest>,
        ) -> Result<Response<GetCountsForUsersResponse>, Status> {
            rpc::get_counts_for_users(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_follows_following(
            &self,
            request: Request<GetFollowsFollowingRequest>,
        ) -> Result<Response<GetFollowsFollowingResponse>, Status> {
            rpc::get_follows_following(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_latest_rev(
            &self,
            request: Request<GetLatestRevRequest>,
        ) -> Result<Response<GetLatestRevResponse>, Status> {
            rpc::get_latest_rev(&self.state, request.into_inner()).map(Response::new)
        }

        // Each user's private state, from bsync (`private.rs`).
        async fn get_actor_mutes_actor(
            &self,
            request: Request<GetActorMutesActorRequest>,
        ) -> Result<Response<GetActorMutesActorResponse>, Status> {
            private::get_actor_mutes_actor(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_mutes(
            &self,
            request: Request<GetMutesRequest>,
        ) -> Result<Response<GetMutesResponse>, Status> {
            private::get_mutes(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_actor_mutes_actor_via_list(
            &self,
            request: Request<GetActorMutesActorViaListRequest>,
        ) -> Result<Response<GetActorMutesActorViaListResponse>, Status> {
            private::get_actor_mutes_actor_via_list(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_mutelist_subscription(
            &self,
            request: Request<GetMutelistSubscriptionRequest>,
        ) -> Result<Response<GetMutelistSubscriptionResponse>, Status> {
            private::get_mutelist_subscription(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_mutelist_subscriptions(
            &self,
            request: Request<GetMutelistSubscriptionsRequest>,
        ) -> Result<Response<GetMutelistSubscriptionsResponse>, Status> {
            private::get_mutelist_subscriptions(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_thread_mutes_on_subjects(
            &self,
            request: Request<GetThreadMutesOnSubjectsRequest>,
        ) -> Result<Response<GetThreadMutesOnSubjectsResponse>, Status> {
            private::get_thread_mutes_on_subjects(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_actor_bookmarks(
            &self,
            request: Request<GetActorBookmarksRequest>,
        ) -> Result<Response<GetActorBookmarksResponse>, Status> {
            private::get_actor_bookmarks(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_bookmarks_by_actor_and_subjects(
            &self,
            request: Request<GetBookmarksByActorAndSubjectsRequest>,
        ) -> Result<Response<GetBookmarksByActorAndSubjectsResponse>, Status> {
            private::get_bookmarks_by_actor_and_subjects(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_activity_subscription_dids(
            &self,
            request: Request<GetActivitySubscriptionDidsRequest>,
        ) -> Result<Response<GetActivitySubscriptionDidsResponse>, Status> {
            private::get_activity_subscription_dids(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_activity_subscriptions_by_actor_and_subjects(
            &self,
            request: Request<GetActivitySubscriptionsByActorAndSubjectsRequest>,
        ) -> Result<Response<GetActivitySubscriptionsByActorAndSubjectsResponse>, Status> {
            private::get_activity_subscriptions_by_actor_and_subjects(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_actor_drafts(
            &self,
            request: Request<GetActorDraftsRequest>,
        ) -> Result<Response<GetActorDraftsResponse>, Status> {
            private::get_actor_drafts(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_notification_seen(
            &self,
            request: Request<GetNotificationSeenRequest>,
        ) -> Result<Response<GetNotificationSeenResponse>, Status> {
            private::get_notification_seen(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn update_notification_seen(
            &self,
            request: Request<UpdateNotificationSeenRequest>,
        ) -> Result<Response<UpdateNotificationSeenResponse>, Status> {
            private::update_notification_seen(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_notification_preferences(
            &self,
            request: Request<GetNotificationPreferencesRequest>,
        ) -> Result<Response<GetNotificationPreferencesResponse>, Status> {
            private::get_notification_preferences(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn ping(&self, _request: Request<PingRequest>) -> Result<Response<PingResponse>, Status> {
            if self.state.ready.load(std::sync::atomic::Ordering::Relaxed) {
                Ok(Response::new(PingResponse {}))
            } else {
                Err(Status::unavailable("starling is starting or shutting down"))
            }
        }

        async fn get_identity_by_did(
            &self,
            request: Request<GetIdentityByDidRequest>,
        ) -> Result<Response<GetIdentityByDidResponse>, Status> {
            rpc::get_identity_by_did(self.identity.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn get_dids_by_handles(
            &self,
            request: Request<GetDidsByHandlesRequest>,
        ) -> Result<Response<GetDidsByHandlesResponse>, Status> {
            rpc::get_dids_by_handles(&self.state, request.into_inner()).map(Response::new)
        }

        async fn get_actors(
            &self,
            request: Request<GetActorsRequest>,
        ) -> Result<Response<GetActorsResponse>, Status> {
            rpc::get_actors(&self.state, self.trusted_verifiers.clone(), request.into_inner()).await.map(Response::new)
        }

        async fn get_relationships(
            &self,
            request: Request<GetRelationshipsRequest>,
        ) -> Result<Response<GetRelationshipsResponse>, Status> {
            rpc::get_relationships(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_block_existence(
            &self,
            request: Request<GetBlockExistenceRequest>,
        ) -> Result<Response<GetBlockExistenceResponse>, Status> {
            rpc::get_block_existence(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_followers(
            &self,
            request: Request<GetFollowersRequest>,
        ) -> Result<Response<GetFollowersResponse>, Status> {
            let req = request.into_inner();
            let (followers, cursor) =
                rpc::follow_page(&self.state, req.actor_did, req.limit, req.cursor, true).await?;
            Ok(Response::new(GetFollowersResponse { followers, cursor }))
        }

        async fn get_notifications(
            &self,
            request: Request<GetNotificationsRequest>,
        ) -> Result<Response<GetNotificationsResponse>, Status> {
            notifications::get_notifications(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_unread_notification_count(
            &self,
            request: Request<GetUnreadNotificationCountRequest>,
        ) -> Result<Response<GetUnreadNotificationCountResponse>, Status> {
            notifications::get_unread_notification_count(&self.state, request.into_inner())
                .await
                .map(Response::new)
        }

        async fn get_follows(
            &self,
            request: Request<GetFollowsRequest>,
        ) -> Result<Response<GetFollowsResponse>, Status> {
            let req = request.into_inner();
            let (follows, cursor) =
                rpc::follow_page(&self.state, req.actor_did, req.limit, req.cursor, false).await?;
            Ok(Response::new(GetFollowsResponse { follows, cursor }))
        }

        async fn get_likes_by_subject_sorted(
            &self,
            request: Request<GetLikesBySubjectSortedRequest>,
        ) -> Result<Response<GetLikesBySubjectSortedResponse>, Status> {
            rpc::get_likes_by_subject_sorted(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_likes_by_actor_and_subjects(
            &self,
            request: Request<GetLikesByActorAndSubjectsRequest>,
        ) -> Result<Response<GetLikesByActorAndSubjectsResponse>, Status> {
            let req = request.into_inner();
            let uris = rpc::interactions(&self.state, req.actor_did, req.refs, InteractionKind::Like).await?;
            Ok(Response::new(GetLikesByActorAndSubjectsResponse { uris }))
        }

        async fn get_reposts_by_actor_and_subjects(
            &self,
            request: Request<GetRepostsByActorAndSubjectsRequest>,
        ) -> Result<Response<GetRepostsByActorAndSubjectsResponse>, Status> {
            let req = request.into_inner();
            let uris = rpc::interactions(&self.state, req.actor_did, req.refs, InteractionKind::Repost).await?;
            Ok(Response::new(GetRepostsByActorAndSubjectsResponse { uris }))
        }

        async fn get_thread(
            &self,
            request: Request<GetThreadRequest>,
        ) -> Result<Response<GetThreadResponse>, Status> {
            rpc::get_thread(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_list_counts(
            &self,
            request: Request<GetListCountsRequest>,
        ) -> Result<Response<GetListCountsResponse>, Status> {
            let refs = request.into_inner().refs;
            let list_items = rpc::list_counts(&self.state, refs).await?;
            Ok(Response::new(GetListCountsResponse { list_items }))
        }

        async fn get_list_membership(
            &self,
            request: Request<GetListMembershipRequest>,
        ) -> Result<Response<GetListMembershipResponse>, Status> {
            let req = request.into_inner();
            let listitem_uris = rpc::list_membership(&self.state, req.actor_did, req.list_uris).await?;
            Ok(Response::new(GetListMembershipResponse { listitem_uris }))
        }

        async fn get_blocklist_subscription(
            &self,
            request: Request<GetBlocklistSubscriptionRequest>,
        ) -> Result<Response<GetBlocklistSubscriptionResponse>, Status> {
            let req = request.into_inner();
            let refs = vec![RecordRef { uri: req.list_uri, cid: String::new() }];
            let uris = rpc::interactions(&self.state, req.actor_did, refs, InteractionKind::ListBlock).await?;
            Ok(Response::new(GetBlocklistSubscriptionResponse {
                listblock_uri: uris.into_iter().next().unwrap_or_default(),
            }))
        }

        // Reference-list opt-outs, site.standard records and known likers are not indexed
        // yet: every answer is "none", aligned with the request.
        async fn get_referencelistoptouts_by_actor_and_subjects(
            &self,
            request: Request<GetReferencelistoptoutsByActorAndSubjectsRequest>,
        ) -> Result<Response<GetReferencelistoptoutsByActorAndSubjectsResponse>, Status> {
            let n = request.get_ref().subject_uris.len();
            Ok(Response::new(GetReferencelistoptoutsByActorAndSubjectsResponse {
                uris: vec![String::new(); n],
            }))
        }

        async fn get_site_standard_records_by_ref(
            &self,
            _request: Request<GetSiteStandardRecordsByRefRequest>,
        ) -> Result<Response<GetSiteStandardRecordsByRefResponse>, Status> {
            Ok(Response::new(GetSiteStandardRecordsByRefResponse::default()))
        }

        async fn get_known_likers(
            &self,
            _request: Request<GetKnownLikersRequest>,
        ) -> Result<Response<GetKnownLikersResponse>, Status> {
            Ok(Response::new(GetKnownLikersResponse::default()))
        }

        // Takedowns, upstream statuses and labels (`moderation.rs`).
        async fn get_labels(
            &self,
            request: Request<GetLabelsRequest>,
        ) -> Result<Response<GetLabelsResponse>, Status> {
            moderation::get_labels(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn takedown_actor(
            &self,
            request: Request<TakedownActorRequest>,
        ) -> Result<Response<TakedownActorResponse>, Status> {
            let req = request.into_inner();
            let subject = moderation::actor(&req.did)?;
            moderation::write(&self.state, subject, Some(req.r#ref)).await?;
            Ok(Response::new(TakedownActorResponse {}))
        }

        async fn untakedown_actor(
            &self,
            request: Request<UntakedownActorRequest>,
        ) -> Result<Response<UntakedownActorResponse>, Status> {
            let subject = moderation::actor(&request.into_inner().did)?;
            moderation::write(&self.state, subject, None).await?;
            Ok(Response::new(UntakedownActorResponse {}))
        }

        async fn get_actor_takedown(
            &self,
            request: Request<GetActorTakedownRequest>,
        ) -> Result<Response<GetActorTakedownResponse>, Status> {
            let subject = moderation::actor(&request.into_inner().did)?;
            let (taken_down, takedown_ref) = moderation::read(&self.state, subject).await?;
            Ok(Response::new(GetActorTakedownResponse { taken_down, takedown_ref }))
        }

        async fn takedown_record(
            &self,
            request: Request<TakedownRecordRequest>,
        ) -> Result<Response<TakedownRecordResponse>, Status> {
            let req = request.into_inner();
            let subject = moderation::record(&req.record_uri)?;
            moderation::write(&self.state, subject, Some(req.r#ref)).await?;
            Ok(Response::new(TakedownRecordResponse {}))
        }

        async fn untakedown_record(
            &self,
            request: Request<UntakedownRecordRequest>,
        ) -> Result<Response<UntakedownRecordResponse>, Status> {
            let subject = moderation::record(&request.into_inner().record_uri)?;
            moderation::write(&self.state, subject, None).await?;
            Ok(Response::new(UntakedownRecordResponse {}))
        }

        async fn get_record_takedown(
            &self,
            request: Request<GetRecordTakedownRequest>,
        ) -> Result<Response<GetRecordTakedownResponse>, Status> {
            let subject = moderation::record(&request.into_inner().record_uri)?;
            let (taken_down, takedown_ref) = moderation::read(&self.state, subject).await?;
            Ok(Response::new(GetRecordTakedownResponse { taken_down, takedown_ref }))
        }

        async fn takedown_blob(
            &self,
            request: Request<TakedownBlobRequest>,
        ) -> Result<Response<TakedownBlobResponse>, Status> {
            let req = request.into_inner();
            let subject = moderation::blob(&req.did, &req.cid)?;
            moderation::write(&self.state, subject, Some(req.r#ref)).await?;
            Ok(Response::new(TakedownBlobResponse {}))
        }

        async fn untakedown_blob(
            &self,
            request: Request<UntakedownBlobRequest>,
        ) -> Result<Response<UntakedownBlobResponse>, Status> {
            let req = request.into_inner();
            let subject = moderation::blob(&req.did, &req.cid)?;
            moderation::write(&self.state, subject, None).await?;
            Ok(Response::new(UntakedownBlobResponse {}))
        }

        async fn get_blob_takedown(
            &self,
            request: Request<GetBlobTakedownRequest>,
        ) -> Result<Response<GetBlobTakedownResponse>, Status> {
            let req = request.into_inner();
            let subject = moderation::blob(&req.did, &req.cid)?;
            let (taken_down, takedown_ref) = moderation::read(&self.state, subject).await?;
            Ok(Response::new(GetBlobTakedownResponse { taken_down, takedown_ref }))
        }

        async fn update_actor_upstream_status(
            &self,
            request: Request<UpdateActorUpstreamStatusRequest>,
        ) -> Result<Response<UpdateActorUpstreamStatusResponse>, Status> {
            moderation::update_actor_upstream_status(&self.state, request.into_inner())
                .await
                .map(Response::new)
        }

        async fn search_actors(
            &self,
            request: Request<SearchActorsRequest>,
        ) -> Result<Response<SearchActorsResponse>, Status> {
            search::search_actors(self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn search_actors_v2(
            &self,
            request: Request<SearchActorsV2Request>,
        ) -> Result<Response<SearchActorsV2Response>, Status> {
            search::search_actors_v2(self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn search_actors_typeahead(
            &self,
            request: Request<SearchActorsTypeaheadRequest>,
        ) -> Result<Response<SearchActorsTypeaheadResponse>, Status> {
            search::search_actors_typeahead(self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn search_posts(
            &self,
            request: Request<SearchPostsRequest>,
        ) -> Result<Response<SearchPostsResponse>, Status> {
            search::search_posts(&self.state, self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn search_posts_v2(
            &self,
            request: Request<SearchPostsV2Request>,
        ) -> Result<Response<SearchPostsV2Response>, Status> {
            search::search_posts_v2(&self.state, self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn search_starter_packs(
            &self,
            request: Request<SearchStarterPacksRequest>,
        ) -> Result<Response<SearchStarterPacksResponse>, Status> {
            search::search_starter_packs(self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn search_starter_packs_v2(
            &self,
            request: Request<SearchStarterPacksV2Request>,
        ) -> Result<Response<SearchStarterPacksV2Response>, Status> {
            search::search_starter_packs_v2(self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn search_feed_generators(
            &self,
            request: Request<SearchFeedGeneratorsRequest>,
        ) -> Result<Response<SearchFeedGeneratorsResponse>, Status> {
            search::search_feed_generators(self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn search_feed_generators_v2(
            &self,
            request: Request<SearchFeedGeneratorsV2Request>,
        ) -> Result<Response<SearchFeedGeneratorsV2Response>, Status> {
            search::search_feed_generators_v2(self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn get_follow_suggestions(
            &self,
            request: Request<GetFollowSuggestionsRequest>,
        ) -> Result<Response<GetFollowSuggestionsResponse>, Status> {
            suggestions::get_follow_suggestions(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_actor_follows_actors(
            &self,
            request: Request<GetActorFollowsActorsRequest>,
        ) -> Result<Response<GetActorFollowsActorsResponse>, Status> {
            suggestions::get_actor_follows_actors(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_suggested_feeds(
            &self,
            request: Request<GetSuggestedFeedsRequest>,
        ) -> Result<Response<GetSuggestedFeedsResponse>, Status> {
            suggestions::get_suggested_feeds(&self.state, self.search.as_ref(), request.into_inner()).await.map(Response::new)
        }

        async fn get_suggested_entities(
            &self,
            request: Request<GetSuggestedEntitiesRequest>,
        ) -> Result<Response<GetSuggestedEntitiesResponse>, Status> {
            suggestions::get_suggested_entities(request.into_inner()).map(Response::new)
        }
        // Lists around an actor, a record or a list, and blocks through lists (`lists.rs`).
        async fn get_actor_likes(
            &self,
            request: Request<GetActorLikesRequest>,
        ) -> Result<Response<GetActorLikesResponse>, Status> {
            lists::get_actor_likes(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_likes_by_subject(
            &self,
            request: Request<GetLikesBySubjectRequest>,
        ) -> Result<Response<GetLikesBySubjectResponse>, Status> {
            let req = request.into_inner();
            let (uris, cursor) =
                lists::subject_page(&self.state, req.subject, lists::SubjectList::Likes, req.limit, req.cursor).await?;
            Ok(Response::new(GetLikesBySubjectResponse { uris, cursor }))
        }

        async fn get_reposts_by_subject(
            &self,
            request: Request<GetRepostsBySubjectRequest>,
        ) -> Result<Response<GetRepostsBySubjectResponse>, Status> {
            let req = request.into_inner();
            let (uris, cursor) =
                lists::subject_page(&self.state, req.subject, lists::SubjectList::Reposts, req.limit, req.cursor).await?;
            Ok(Response::new(GetRepostsBySubjectResponse { uris, cursor }))
        }

        async fn get_quotes_by_subject_sorted(
            &self,
            request: Request<GetQuotesBySubjectSortedRequest>,
        ) -> Result<Response<GetQuotesBySubjectSortedResponse>, Status> {
            let req = request.into_inner();
            let (uris, cursor) =
                lists::subject_page(&self.state, req.subject, lists::SubjectList::Quotes, req.limit, req.cursor).await?;
            Ok(Response::new(GetQuotesBySubjectSortedResponse { uris, cursor }))
        }

        async fn get_actor_reposts(
            &self,
            request: Request<GetActorRepostsRequest>,
        ) -> Result<Response<GetActorRepostsResponse>, Status> {
            let req = request.into_inner();
            let page = lists::actor_records(&self.state, req.actor_did, jetstream::nsid::REPOST, req.limit, req.cursor).await?;
            let (uris, cursor) = lists::uris(page);
            Ok(Response::new(GetActorRepostsResponse { uris, cursor }))
        }

        async fn get_actor_feeds(
            &self,
            request: Request<GetActorFeedsRequest>,
        ) -> Result<Response<GetActorFeedsResponse>, Status> {
            let req = request.into_inner();
            let page = lists::actor_records(&self.state, req.actor_did, jetstream::nsid::GENERATOR, req.limit, req.cursor).await?;
            let (uris, cursor) = lists::uris(page);
            Ok(Response::new(GetActorFeedsResponse { uris, cursor }))
        }

        async fn get_actor_lists(
            &self,
            request: Request<GetActorListsRequest>,
        ) -> Result<Response<GetActorListsResponse>, Status> {
            let req = request.into_inner();
            let page = lists::actor_records(&self.state, req.actor_did, jetstream::nsid::LIST, req.limit, req.cursor).await?;
            let (list_uris, cursor) = lists::uris(page);
            Ok(Response::new(GetActorListsResponse { list_uris, cursor }))
        }

        async fn get_actor_starter_packs(
            &self,
            request: Request<GetActorStarterPacksRequest>,
        ) -> Result<Response<GetActorStarterPacksResponse>, Status> {
            let req = request.into_inner();
            let page = lists::actor_records(&self.state, req.actor_did, jetstream::nsid::STARTERPACK, req.limit, req.cursor).await?;
            let (uris, cursor) = lists::uris(page);
            Ok(Response::new(GetActorStarterPacksResponse { uris, cursor }))
        }

        async fn get_blocks(
            &self,
            request: Request<GetBlocksRequest>,
        ) -> Result<Response<GetBlocksResponse>, Status> {
            let req = request.into_inner();
            let page = lists::actor_records(&self.state, req.actor_did, jetstream::nsid::BLOCK, req.limit, req.cursor).await?;
            let (block_uris, cursor) = lists::uris(page);
            Ok(Response::new(GetBlocksResponse { block_uris, cursor }))
        }

        async fn get_blocklist_subscriptions(
            &self,
            request: Request<GetBlocklistSubscriptionsRequest>,
        ) -> Result<Response<GetBlocklistSubscriptionsResponse>, Status> {
            lists::get_blocklist_subscriptions(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_list_members(
            &self,
            request: Request<GetListMembersRequest>,
        ) -> Result<Response<GetListMembersResponse>, Status> {
            lists::get_list_members(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_list_count(
            &self,
            request: Request<GetListCountRequest>,
        ) -> Result<Response<GetListCountResponse>, Status> {
            lists::get_list_count(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_list_feed(
            &self,
            request: Request<GetListFeedRequest>,
        ) -> Result<Response<GetListFeedResponse>, Status> {
            lists::get_list_feed(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_starter_pack_counts(
            &self,
            request: Request<GetStarterPackCountsRequest>,
        ) -> Result<Response<GetStarterPackCountsResponse>, Status> {
            lists::get_starter_pack_counts(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_bidirectional_block(
            &self,
            request: Request<GetBidirectionalBlockRequest>,
        ) -> Result<Response<GetBidirectionalBlockResponse>, Status> {
            lists::get_bidirectional_block(&self.state, request.into_inner()).await.map(Response::new)
        }

        async fn get_bidirectional_block_via_list(
            &self,
            request: Request<GetBidirectionalBlockViaListRequest>,
        ) -> Result<Response<GetBidirectionalBlockViaListResponse>, Status> {
            lists::get_bidirectional_block_via_list(&self.state, request.into_inner()).await.map(Response::new)
        }
    }
    records {
        get_block_records(GetBlockRecordsRequest) -> GetBlockRecordsResponse = "app.bsky.graph.block";
        get_feed_generator_records(GetFeedGeneratorRecordsRequest) -> GetFeedGeneratorRecordsResponse = "app.bsky.feed.generator";
        get_follow_records(GetFollowRecordsRequest) -> GetFollowRecordsResponse = "app.bsky.graph.follow";
        get_like_records(GetLikeRecordsRequest) -> GetLikeRecordsResponse = "app.bsky.feed.like";
        get_list_block_records(GetListBlockRecordsRequest) -> GetListBlockRecordsResponse = "app.bsky.graph.listblock";
        get_list_item_records(GetListItemRecordsRequest) -> GetListItemRecordsResponse = "app.bsky.graph.listitem";
        get_list_records(GetListRecordsRequest) -> GetListRecordsResponse = "app.bsky.graph.list";
        get_profile_records(GetProfileRecordsRequest) -> GetProfileRecordsResponse = "app.bsky.actor.profile";
        get_actor_chat_declaration_records(GetActorChatDeclarationRecordsRequest) -> GetActorChatDeclarationRecordsResponse = "chat.bsky.actor.declaration";
        get_notification_declaration_records(GetNotificationDeclarationRecordsRequest) -> GetNotificationDeclarationRecordsResponse = "app.bsky.notification.declaration";
        get_status_records(GetStatusRecordsRequest) -> GetStatusRecordsResponse = "app.bsky.actor.status";
        get_repost_records(GetRepostRecordsRequest) -> GetRepostRecordsResponse = "app.bsky.feed.repost";
        get_thread_gate_records(GetThreadGateRecordsRequest) -> GetThreadGateRecordsResponse = "app.bsky.feed.threadgate";
        get_postgate_records(GetPostgateRecordsRequest) -> GetPostgateRecordsResponse = "app.bsky.feed.postgate";
        get_labeler_records(GetLabelerRecordsRequest) -> GetLabelerRecordsResponse = "app.bsky.labeler.service";
        get_starter_pack_records(GetStarterPackRecordsRequest) -> GetStarterPackRecordsResponse = "app.bsky.graph.starterpack";
        get_verification_records(GetVerificationRecordsRequest) -> GetVerificationRecordsResponse = "app.bsky.graph.verification";
    }
    unimplemented {
        GetGermDeclarationRecords: get_germ_declaration_records(
            GetGermDeclarationRecordsRequest
        ) -> GetGermDeclarationRecordsResponse;
        GetVerificationsIssued: get_verifications_issued(
            GetVerificationsIssuedRequest
        ) -> GetVerificationsIssuedResponse;
        GetVerificationsReceived: get_verifications_received(
            GetVerificationsReceivedRequest
        ) -> GetVerificationsReceivedResponse;
        GetNewUserCountForRange: get_new_user_count_for_range(
            GetNewUserCountForRangeRequest
        ) -> GetNewUserCountForRangeResponse;
        GetFeedGeneratorStatus: get_feed_generator_status(
            GetFeedGeneratorStatusRequest
        ) -> GetFeedGeneratorStatusResponse;
        GetAllLabelers: get_all_labelers(GetAllLabelersRequest) -> GetAllLabelersResponse;
        GetIdentityByHandle: get_identity_by_handle(
            GetIdentityByHandleRequest
        ) -> GetIdentityByHandleResponse;
        GetSitemapIndex: get_sitemap_index(GetSitemapIndexRequest) -> GetSitemapIndexResponse;
        GetSitemapPage: get_sitemap_page(GetSitemapPageRequest) -> GetSitemapPageResponse;
        CreateActorMute: create_actor_mute(CreateActorMuteRequest) -> CreateActorMuteResponse;
        DeleteActorMute: delete_actor_mute(DeleteActorMuteRequest) -> DeleteActorMuteResponse;
        ClearActorMutes: clear_actor_mutes(ClearActorMutesRequest) -> ClearActorMutesResponse;
        CreateActorMutelistSubscription: create_actor_mutelist_subscription(
            CreateActorMutelistSubscriptionRequest
        ) -> CreateActorMutelistSubscriptionResponse;
        DeleteActorMutelistSubscription: delete_actor_mutelist_subscription(
            DeleteActorMutelistSubscriptionRequest
        ) -> DeleteActorMutelistSubscriptionResponse;
        ClearActorMutelistSubscriptions: clear_actor_mutelist_subscriptions(
            ClearActorMutelistSubscriptionsRequest
        ) -> ClearActorMutelistSubscriptionsResponse;
        CreateThreadMute: create_thread_mute(CreateThreadMuteRequest) -> CreateThreadMuteResponse;
        DeleteThreadMute: delete_thread_mute(DeleteThreadMuteRequest) -> DeleteThreadMuteResponse;
        ClearThreadMutes: clear_thread_mutes(ClearThreadMutesRequest) -> ClearThreadMutesResponse;
        GetSiteStandardRecordsByURI: get_site_standard_records_by_uri(
            GetSiteStandardRecordsByUriRequest
        ) -> GetSiteStandardRecordsByUriResponse;
    }
}
