//! The keyspace: its tables, the schema version and upgrade, and the prepared statements.

use super::*;

/// The statements of the writer row (lease, epoch, committed batch) and of the change log's
/// readers.
pub(super) struct WriterStatements {
    pub(super) init: PreparedStatement,
    pub(super) get: PreparedStatement,
    pub(super) commit: PreparedStatement,
    pub(super) lease_take: PreparedStatement,
    pub(super) lease_renew: PreparedStatement,
    pub(super) lease_release: PreparedStatement,
    pub(super) put_reader: PreparedStatement,
    pub(super) scan_readers: PreparedStatement,
    pub(super) del_reader: PreparedStatement,
}

/// Prepared statements, one per request the store makes.
pub(super) struct Statements {
    /// The statements on the writer row and the readers' positions, all lightweight
    /// transactions or their companions.
    pub(super) writer: WriterStatements,
    pub(super) get_record: PreparedStatement,
    pub(super) put_record: PreparedStatement,
    pub(super) scan_records: PreparedStatement,
    pub(super) scan_all_records: PreparedStatement,
    /// Every row of the index, count, pair count and actor tables, for the usage.
    pub(super) scan_all_entries: PreparedStatement,
    pub(super) scan_all_counts: PreparedStatement,
    pub(super) scan_all_pairs: PreparedStatement,
    pub(super) scan_all_actors: PreparedStatement,
    pub(super) put_entry: PreparedStatement,
    pub(super) del_entry: PreparedStatement,
    pub(super) put_bucket: PreparedStatement,
    pub(super) first_entry: PreparedStatement,
    pub(super) entries_desc: PreparedStatement,
    pub(super) entries_below: PreparedStatement,
    pub(super) buckets_desc: PreparedStatement,
    pub(super) get_count: PreparedStatement,
    pub(super) put_count: PreparedStatement,
    pub(super) del_count: PreparedStatement,
    pub(super) get_pair: PreparedStatement,
    pub(super) put_pair: PreparedStatement,
    pub(super) del_pair: PreparedStatement,
    pub(super) scan_pairs: PreparedStatement,
    pub(super) get_actor: PreparedStatement,
    pub(super) put_actor: PreparedStatement,
    pub(super) scan_actors: PreparedStatement,
    pub(super) get_actor_id: PreparedStatement,
    pub(super) put_actor_id: PreparedStatement,
    pub(super) get_handle: PreparedStatement,
    pub(super) put_handle: PreparedStatement,
    pub(super) del_handle: PreparedStatement,
    pub(super) get_meta: PreparedStatement,
    pub(super) scan_meta: PreparedStatement,
    pub(super) put_meta: PreparedStatement,
    pub(super) put_graph_log: PreparedStatement,
    pub(super) scan_graph_log: PreparedStatement,
    pub(super) prune_graph_log: PreparedStatement,
    pub(super) put_batch_chunk: PreparedStatement,
    pub(super) get_batch_chunks: PreparedStatement,
    pub(super) del_batch: PreparedStatement,
    pub(super) put_meta_now: PreparedStatement,
    pub(super) get_private: PreparedStatement,
    pub(super) scan_private: PreparedStatement,
    pub(super) scan_private_below: PreparedStatement,
    /// Writes (a value) or removes (null) one private row: one shape for both, so that a
    /// logged batch of them takes one list of values.
    pub(super) set_private: PreparedStatement,
}

pub(super) const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS records (p blob, k blob, v blob, PRIMARY KEY (p, k))",
    "CREATE TABLE IF NOT EXISTS index_entries (p blob, b bigint, k blob, PRIMARY KEY ((p, b), k))",
    "CREATE TABLE IF NOT EXISTS buckets (p blob, b bigint, PRIMARY KEY (p, b)) WITH CLUSTERING ORDER BY (b DESC)",
    "CREATE TABLE IF NOT EXISTS counts (k blob PRIMARY KEY, n bigint)",
    "CREATE TABLE IF NOT EXISTS pairs (k blob PRIMARY KEY, n int)",
    "CREATE TABLE IF NOT EXISTS actors (block int, id int, did text, state blob, PRIMARY KEY (block, id))",
    "CREATE TABLE IF NOT EXISTS actor_ids (did text PRIMARY KEY, id int)",
    "CREATE TABLE IF NOT EXISTS handles (handle text PRIMARY KEY, id int)",
    "CREATE TABLE IF NOT EXISTS meta (part text, name text, v blob, PRIMARY KEY (part, name))",
    "CREATE TABLE IF NOT EXISTS graph_log (bucket bigint, seq bigint, changes blob, PRIMARY KEY (bucket, seq))",
    "CREATE TABLE IF NOT EXISTS batch_chunks (writer bigint, seq bigint, chunk int, data blob, PRIMARY KEY ((writer, seq), chunk))",
    "CREATE TABLE IF NOT EXISTS writer (name text PRIMARY KEY, owner text, epoch bigint, batch_seq bigint, batch_ts bigint, batch_chunks int, batch_writer bigint)",
    // Each user's private state (`private.rs`): added in place, without a schema version, since
    // older replicas neither read nor write it.
    "CREATE TABLE IF NOT EXISTS private_state (p blob, k blob, v blob, PRIMARY KEY (p, k)) WITH CLUSTERING ORDER BY (k DESC)",
    "CREATE TABLE IF NOT EXISTS log_readers (part int, reader bigint, seq bigint, PRIMARY KEY (part, reader))",
];

/// What [`CassandraStore::scan_log`] hands each change log entry to: its sequence and bytes.
pub(super) type LogVisit<'a> = dyn FnMut(u64, &[u8]) -> Result<(), StoreError> + 'a;

pub(super) async fn connect(
    options: &CassandraOptions,
) -> Result<(Session, Box<Statements>), StoreError> {
    let profile = ExecutionProfile::builder()
        .consistency(options.consistency.driver())
        .serial_consistency(Some(SerialConsistency::Serial))
        .request_timeout(Some(REQUEST_TIMEOUT))
        .speculative_execution_policy(Some(Arc::new(SimpleSpeculativeExecutionPolicy {
            max_retry_count: SPECULATIVE_MAX,
            retry_interval: SPECULATIVE_AFTER,
        })))
        .build();
    let session = SessionBuilder::new()
        .known_nodes(&options.nodes)
        .connection_timeout(Duration::from_secs(5))
        .default_execution_profile_handle(profile.into_handle())
        .build()
        .await
        .map_err(|err| StoreError::Unavailable {
            what: format!(
                "cannot connect to cassandra at {}: {err}",
                options.nodes.join(", ")
            ),
        })?;
    let ks = &options.keyspace;
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = \
                 {{'class': 'SimpleStrategy', 'replication_factor': {}}}",
                options.replication_factor
            ),
            (),
        )
        .await
        .ctx("creating the keyspace")?;
    for table in TABLES {
        let ddl = table.replacen("EXISTS ", &format!("EXISTS {ks}."), 1);
        session
            .query_unpaged(ddl, ())
            .await
            .ctx("creating a table")?;
    }
    session
        .await_schema_agreement()
        .await
        .ctx("waiting for schema agreement")?;
    let st = prepare(&session, ks).await?;
    // The schema version: written by the first Starling, checked by every later one. Its
    // write timestamp is the version, so an upgrade's write wins.
    let version = match meta_row(&session, &st, "schema", "version").await? {
        Some(bytes) => Some(u64_value(&bytes)?),
        None => None,
    };
    // A new keyspace has nothing to upgrade; version 1 becomes 2 here, 2 becomes the current
    // version once its list indexes are built (`upgrade.rs`), and 3 (whose notification keys
    // stay readable) becomes it here.
    let write_version = match version {
        None => Some(SCHEMA_VERSION),
        Some(1) => {
            check_upgrade_from_v1(&session, &st, ks).await?;
            Some(2)
        }
        Some(2 | SCHEMA_VERSION) => None,
        Some(3) => Some(SCHEMA_VERSION),
        Some(found) => {
            return Err(StoreError::Cluster {
                what: format!(
                    "keyspace `{ks}` has schema version {found}, this Starling reads version {SCHEMA_VERSION}"
                ),
            });
        }
    };
    // The writer row starts at the newest applied batch (none in a new keyspace).
    let applied = match meta_row(&session, &st, "batch", "applied").await? {
        Some(bytes) => u64_value(&bytes)?,
        None => 0,
    };
    let applied_ts = match meta_row(&session, &st, "batch", "ts").await? {
        Some(bytes) => u64_value(&bytes)?,
        None => 0,
    };
    session
        .execute_unpaged(&st.writer.init, (applied as i64, applied_ts as i64))
        .await
        .ctx("creating the writer row")?;
    if let Some(version) = write_version {
        put_version(&session, &st, version).await?;
    }
    Ok((session, Box::new(st)))
}

/// Writes the schema version, with the version as its write timestamp: of two Starlings
/// writing at once, the newer version wins.
pub(super) async fn put_version(
    session: &Session,
    st: &Statements,
    version: u64,
) -> Result<(), StoreError> {
    session
        .execute_unpaged(
            &st.put_meta_now,
            (
                "schema",
                "version",
                version.to_be_bytes().to_vec(),
                version as i64,
            ),
        )
        .await
        .ctx("writing the schema version")?;
    Ok(())
}

pub(super) async fn meta_row(
    session: &Session,
    st: &Statements,
    part: &str,
    name: &str,
) -> Result<Option<Vec<u8>>, StoreError> {
    let res = session
        .execute_unpaged(&st.get_meta, (part, name))
        .await
        .ctx("reading meta")?;
    Ok(res
        .into_rows_result()
        .ctx("reading meta")?
        .maybe_first_row::<(Option<Vec<u8>>,)>()
        .ctx("reading meta")?
        .and_then(|(v,)| v))
}

/// Checks that a keyspace of schema version 1 can be upgraded in place: no replica of the
/// older version may hold its lease (it would go on writing, unfenced), and its last logged
/// batch must be applied (version 2 does not read the old batch log). Carries the change log
/// watermark over to its new name.
pub(super) async fn check_upgrade_from_v1(
    session: &Session,
    st: &Statements,
    ks: &str,
) -> Result<(), StoreError> {
    let mut lease = scylla::statement::unprepared::Statement::new(qualify(
        "SELECT owner FROM lease WHERE name = 'writer'",
        ks,
    ));
    lease.set_consistency(Consistency::Serial);
    let owner = session
        .query_unpaged(lease, ())
        .await
        .ctx("reading the version 1 writer lease")?
        .into_rows_result()
        .ctx("reading the version 1 writer lease")?
        .maybe_first_row::<(Option<String>,)>()
        .ctx("reading the version 1 writer lease")?
        .and_then(|(owner,)| owner);
    if let Some(owner) = owner {
        return Err(StoreError::Cluster {
            what: format!(
                "keyspace `{ks}` is at schema version 1 and `{owner}`, a replica of an older \
                 Starling, holds its writer lease: stop every older replica, then start this one \
                 again (it upgrades the keyspace to version {SCHEMA_VERSION})"
            ),
        });
    }
    let pending = match meta_row(session, st, "batch", "pending").await? {
        Some(marker) => u64_value(
            marker
                .get(..8)
                .ok_or_else(|| StoreError::corrupt("batch log marker", &[]))?,
        )?,
        None => 0,
    };
    let applied = match meta_row(session, st, "batch", "applied").await? {
        Some(bytes) => u64_value(&bytes)?,
        None => 0,
    };
    if pending > applied {
        return Err(StoreError::Cluster {
            what: format!(
                "keyspace `{ks}` holds batch {pending}, logged by an older Starling and not \
                 applied: open it once with that version (`starling stats` does), then start \
                 this one again"
            ),
        });
    }
    if let Some(bytes) = meta_row(session, st, "graph", "pruned").await? {
        let pruned = u64_value(&bytes)?;
        session
            .execute_unpaged(&st.put_meta, ("graph", "pruned_upto", bytes, pruned as i64))
            .await
            .ctx("writing the change log watermark")?;
    }
    tracing::info!(
        keyspace = ks,
        from = 1,
        to = SCHEMA_VERSION,
        "upgrading the keyspace schema"
    );
    Ok(())
}

/// The tables the statements name, qualified with the keyspace when prepared.
pub(super) const TABLE_NAMES: &[&str] = &[
    "records",
    "index_entries",
    "buckets",
    "counts",
    "pairs",
    "actors",
    "actor_ids",
    "handles",
    "meta",
    "graph_log",
    "batch_chunks",
    "writer",
    "log_readers",
    "lease",
    "private_state",
];

/// `cql` with its table name qualified by `keyspace`: the session never `USE`s a keyspace, so
/// a statement names exactly one table whatever else shares the session.
pub(super) fn qualify(cql: &str, keyspace: &str) -> String {
    let mut out = format!("{cql} ");
    for table in TABLE_NAMES {
        for keyword in ["FROM ", "INTO ", "UPDATE "] {
            out = out.replace(
                &format!("{keyword}{table} "),
                &format!("{keyword}{keyspace}.{table} "),
            );
        }
    }
    out.trim_end().to_owned()
}

pub(super) async fn prepare(session: &Session, keyspace: &str) -> Result<Statements, StoreError> {
    let p = |cql: &'static str| prepare_one(session, keyspace, cql);
    Ok(Statements {
        get_record: p("SELECT v FROM records WHERE p = ? AND k = ?").await?,
        put_record: p("INSERT INTO records (p, k, v) VALUES (?, ?, ?) USING TIMESTAMP ?").await?,
        scan_records: p("SELECT k, v FROM records WHERE p = ?").await?,
        scan_all_records: p("SELECT p, k, v FROM records").await?,
        scan_all_entries: p("SELECT p, k FROM index_entries").await?,
        scan_all_counts: p("SELECT k, n FROM counts").await?,
        scan_all_pairs: p("SELECT k, n FROM pairs").await?,
        scan_all_actors: p("SELECT did, state FROM actors").await?,
        put_entry: p("INSERT INTO index_entries (p, b, k) VALUES (?, ?, ?) USING TIMESTAMP ?")
            .await?,
        del_entry: p("DELETE FROM index_entries USING TIMESTAMP ? WHERE p = ? AND b = ? AND k = ?")
            .await?,
        put_bucket: p("INSERT INTO buckets (p, b) VALUES (?, ?) USING TIMESTAMP ?").await?,
        first_entry: p("SELECT k FROM index_entries WHERE p = ? AND b = ? LIMIT 1").await?,
        entries_desc: p("SELECT k FROM index_entries WHERE p = ? AND b = ? ORDER BY k DESC")
            .await?,
        entries_below: p(
            "SELECT k FROM index_entries WHERE p = ? AND b = ? AND k < ? ORDER BY k DESC",
        )
        .await?,
        buckets_desc: p("SELECT b FROM buckets WHERE p = ? AND b <= ?").await?,
        get_count: p("SELECT n FROM counts WHERE k = ?").await?,
        put_count: p("INSERT INTO counts (k, n) VALUES (?, ?) USING TIMESTAMP ?").await?,
        del_count: p("DELETE FROM counts USING TIMESTAMP ? WHERE k = ?").await?,
        get_pair: p("SELECT n FROM pairs WHERE k = ?").await?,
        put_pair: p("INSERT INTO pairs (k, n) VALUES (?, ?) USING TIMESTAMP ?").await?,
        del_pair: p("DELETE FROM pairs USING TIMESTAMP ? WHERE k = ?").await?,
        scan_pairs: p("SELECT k, n FROM pairs").await?,
        get_actor: p("SELECT did, state FROM actors WHERE block = ? AND id = ?").await?,
        put_actor: p(
            "INSERT INTO actors (block, id, did, state) VALUES (?, ?, ?, ?) USING TIMESTAMP ?",
        )
        .await?,
        scan_actors: p("SELECT id, did, state FROM actors WHERE block = ? AND id >= ?").await?,
        get_actor_id: p("SELECT id FROM actor_ids WHERE did = ?").await?,
        put_actor_id: p("INSERT INTO actor_ids (did, id) VALUES (?, ?) USING TIMESTAMP ?").await?,
        get_handle: p("SELECT id FROM handles WHERE handle = ?").await?,
        put_handle: p("INSERT INTO handles (handle, id) VALUES (?, ?) USING TIMESTAMP ?").await?,
        del_handle: p("DELETE FROM handles USING TIMESTAMP ? WHERE handle = ?").await?,
        get_meta: p("SELECT v FROM meta WHERE part = ? AND name = ?").await?,
        scan_meta: p("SELECT name, v FROM meta WHERE part = ?").await?,
        put_meta: p("INSERT INTO meta (part, name, v) VALUES (?, ?, ?) USING TIMESTAMP ?").await?,
        put_meta_now: p("INSERT INTO meta (part, name, v) VALUES (?, ?, ?) USING TIMESTAMP ?")
            .await?,
        put_graph_log: p(
            "INSERT INTO graph_log (bucket, seq, changes) VALUES (?, ?, ?) USING TIMESTAMP ?",
        )
        .await?,
        scan_graph_log: p("SELECT seq, changes FROM graph_log WHERE bucket = ? AND seq > ?")
            .await?,
        prune_graph_log: p("DELETE FROM graph_log WHERE bucket = ? AND seq <= ?").await?,
        put_batch_chunk: p(
            "INSERT INTO batch_chunks (writer, seq, chunk, data) VALUES (?, ?, ?, ?) USING TIMESTAMP ?",
        )
        .await?,
        get_batch_chunks: p("SELECT chunk, data FROM batch_chunks WHERE writer = ? AND seq = ?")
            .await?,
        del_batch: p("DELETE FROM batch_chunks USING TIMESTAMP ? WHERE writer = ? AND seq = ?")
            .await?,
        get_private: p("SELECT v FROM private_state WHERE p = ? AND k = ?").await?,
        scan_private: p("SELECT k, v FROM private_state WHERE p = ? LIMIT ?").await?,
        scan_private_below: p("SELECT k, v FROM private_state WHERE p = ? AND k < ? LIMIT ?")
            .await?,
        set_private: p("UPDATE private_state USING TIMESTAMP ? SET v = ? WHERE p = ? AND k = ?")
            .await?,
        writer: prepare_writer(&p).await?,
    })
}

/// Prepares one statement on the keyspace's tables.
async fn prepare_one(
    session: &Session,
    keyspace: &str,
    cql: &'static str,
) -> Result<PreparedStatement, StoreError> {
    let cql = qualify(cql, keyspace);
    let mut st = session
        .prepare(cql.as_str())
        .await
        .map_err(|err| StoreError::Cluster {
            what: format!("preparing `{cql}`: {err}"),
        })?;
    st.set_page_size(PAGE_ROWS);
    // Every write carries an explicit timestamp and every value is absolute, so a retry
    // of any statement (lease statements aside) is harmless.
    st.set_is_idempotent(!cql.contains(" IF "));
    Ok(st)
}

async fn prepare_writer<F, Fut>(p: &F) -> Result<WriterStatements, StoreError>
where
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = Result<PreparedStatement, StoreError>>,
{
    Ok(WriterStatements {
        init: p(
            "INSERT INTO writer (name, epoch, batch_seq, batch_ts, batch_chunks, batch_writer) \
             VALUES ('writer', 0, ?, ?, 0, 0) IF NOT EXISTS",
        )
        .await?,
        get: {
            let mut st = p("SELECT owner, epoch, batch_seq, batch_ts, batch_chunks, batch_writer \
                            FROM writer WHERE name = 'writer'")
            .await?;
            // Every transaction accepted before the read is in its answer.
            st.set_consistency(Consistency::Serial);
            st
        },
        commit: p(
            "UPDATE writer SET epoch = ?, batch_seq = ?, batch_ts = ?, batch_chunks = ?, \
             batch_writer = ? WHERE name = 'writer' IF epoch = ? AND owner = ? AND batch_seq = ?",
        )
        .await?,
        // The owner cell expires with the lease; the epoch never does, so the two are set by
        // two statements of one conditional batch (one Paxos round on one row).
        lease_take: p(
            "BEGIN BATCH \
             UPDATE writer USING TTL ? SET owner = ? WHERE name = 'writer' IF owner = null AND epoch = ?; \
             UPDATE writer SET epoch = ? WHERE name = 'writer'; \
             APPLY BATCH",
        )
        .await?,
        lease_renew: p(
            "UPDATE writer USING TTL ? SET owner = ? WHERE name = 'writer' IF owner = ? AND epoch = ?",
        )
        .await?,
        lease_release: p("DELETE owner FROM writer WHERE name = 'writer' IF owner = ?").await?,
        put_reader: p(
            "INSERT INTO log_readers (part, reader, seq) VALUES (0, ?, ?) USING TTL ? AND TIMESTAMP ?",
        )
        .await?,
        scan_readers: p("SELECT reader, seq FROM log_readers WHERE part = 0").await?,
        del_reader: p("DELETE FROM log_readers USING TIMESTAMP ? WHERE part = 0 AND reader = ?")
            .await?,
    })
}
