//! The PostgreSQL store: one database shared by many processes and hosts.
//!
//! - **Client**: `tokio-postgres` behind a `deadpool-postgres` pool (size
//!   `idem_pool_size`, default 16); statements are prepared once per
//!   connection and cached. TLS with rustls (see the `tls` module).
//! - **Schema**: every object lives in one schema (`idem_schema`, default
//!   `idem`), so several services can share a database. Its name is the one
//!   identifier interpolated into SQL: it is checked against
//!   `[a-z_][a-z0-9_]{0,62}` and quoted. Every value is a bound parameter.
//! - **Migrations**: versioned in `idem_schema_migrations`, applied on
//!   open (and by [`crate::migrate`]) in one transaction holding a
//!   `pg_advisory_xact_lock` per schema, so racing processes migrate once.
//!   A schema newer than this build is refused
//!   ([`StoreError::DatabaseSchemaTooNew`]).
//! - **Clock**: leases and retention are measured by the *database
//!   server's* clock (`clock_timestamp()`, read after the record's row lock
//!   is held), never the caller's, so that every client of the database
//!   agrees on when a lease expired. Tests drive time through
//!   [`crate::StoreOptions::clock`]: a [`crate::ManualClock`] pins "now" to
//!   its reading (passed as a parameter of the same statement), and
//!   [`crate::StoreClock::system_with_offset`] shifts the server's clock.
//! - **Fences**: `nextval` of a sequence in the schema: store-wide,
//!   monotonic, never reset by gc or reconnecting.
//! - **Transactions** (see [`PostgresStore::transact`]): a write runs in
//!   two round trips. The first pipelines `BEGIN`, `SELECT … FOR UPDATE` of
//!   the record and the clock (and a fence); `machine.rs` decides, as for
//!   every store; the second pipelines the write (conditional on the key and
//!   the fence it read) and `COMMIT`. A fresh claim (no row under the key,
//!   the common case) takes one round trip: a single
//!   `INSERT … ON CONFLICT DO NOTHING RETURNING` whose arithmetic mirrors
//!   `machine::new_record` (checked against it after every such claim in
//!   debug builds); when a row exists, the transaction above decides.
//! - **Isolation**: READ COMMITTED plus the row lock. Each call touches one
//!   record, and `FOR UPDATE` serialises every writer of that record and
//!   returns its latest committed version, which is all the state machine
//!   needs; SERIALIZABLE would add predicate locks and spurious aborts for
//!   nothing. The one gap of row locks, two claims of a key that has no row
//!   yet, is closed by the primary key: the loser's `INSERT … ON CONFLICT
//!   DO NOTHING` writes nothing and the call is retried, and then sees the
//!   winner's row. Serialization failures and deadlocks (SQLSTATE 40001,
//!   40P01) cannot arise from these statements at this level, but a server
//!   configured with `default_transaction_isolation = serializable` would
//!   raise them: the whole call is retried (a few times), which is safe
//!   because a failed transaction changed nothing.
//! - **Cancellation**: a call dropped mid-transaction discards its
//!   connection (the server rolls back) instead of returning it to the pool
//!   with a transaction open.

mod batch;
mod finish;
mod tls;
mod url;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use idem_core::{Digest, RecordState};
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::machine::{self, ClaimStep};
use crate::{
    Claim, ClaimOutcome, ClaimRequest, ConnectErrorKind, Finish, Holder, JobLease, JobLeaseAcquire,
    ListFilter, Membership, Outcome, OwnershipToken, Record, RecordKey, RecordView, Store,
    StoreError, StoreOptions,
};

pub use url::{DEFAULT_POOL_SIZE, DEFAULT_SCHEMA, PostgresUrl, TlsMode};
pub(crate) use url::{is_postgres, redact};

/// The newest PostgreSQL schema version this build knows: 1 records and
/// fences; 2 memberships with their epochs, and job leases; 3 the records'
/// column checks as domains (see migration 3).
pub const POSTGRES_SCHEMA_VERSION: i64 = 3;

/// Migration `i` takes the schema from version `i` to `i + 1`; `{s}` is the
/// quoted schema. Append only.
const MIGRATIONS: &[&str] = &[
    "
    CREATE SEQUENCE {s}.fence_seq AS bigint MINVALUE 1 START 1 NO CYCLE;
    CREATE TABLE {s}.records (
        namespace      text    NOT NULL,
        key            bytea   NOT NULL CHECK (octet_length(key) = 32),
        policy_digest  text    NOT NULL,
        fingerprint    bytea   NOT NULL CHECK (octet_length(fingerprint) = 32),
        partition      text    NOT NULL,
        state          text    NOT NULL CHECK (state IN ('in-progress', 'completed',
                           'failed-retryable', 'failed-permanent', 'outcome-unknown')),
        fence          bigint  NOT NULL CHECK (fence > 0),
        lease_until    bigint  NOT NULL,
        attempts       bigint  NOT NULL,
        created        bigint  NOT NULL,
        updated        bigint  NOT NULL,
        retention_ms   bigint  NOT NULL,
        retain_until   bigint  NOT NULL,
        outcome_status integer,
        outcome_body   bytea,
        outcome_error  text,
        holder_run_id  text,
        holder_trigger text,
        holder_attempt bigint,
        holder_host    text    NOT NULL,
        holder_pid     bigint  NOT NULL,
        PRIMARY KEY (namespace, key)
    );
    CREATE INDEX records_retain_until ON {s}.records (retain_until);
    CREATE INDEX records_updated ON {s}.records (updated);
",
    "
    CREATE SEQUENCE {s}.epoch_seq AS bigint MINVALUE 1 START 1 NO CYCLE;
    CREATE TABLE {s}.memberships (
        grp     text    PRIMARY KEY,
        epoch   bigint  NOT NULL CHECK (epoch > 0),
        members text[]  NOT NULL,
        updated bigint  NOT NULL
    );
    CREATE TABLE {s}.job_leases (
        job         text   PRIMARY KEY,
        holder      text   NOT NULL,
        fence       bigint NOT NULL CHECK (fence > 0),
        lease_until bigint NOT NULL,
        acquired    bigint NOT NULL
    );
",
    // The same four checks on `records`, as domains. The server re-reads a
    // table's CHECK constraints from the catalog and plans them again in
    // every statement that writes the table (25-40 µs per claim or
    // completion here, a third of the statement's execution); a domain's
    // checks are planned once per connection and cached. Changing a column
    // to a domain over its own type rewrites nothing and keeps the indexes;
    // the checks are added after the change, so the rows are verified
    // against them once, here.
    "
    CREATE DOMAIN {s}.digest AS bytea;
    CREATE DOMAIN {s}.record_state AS text;
    CREATE DOMAIN {s}.fence AS bigint;
    ALTER TABLE {s}.records
        DROP CONSTRAINT records_key_check,
        DROP CONSTRAINT records_fingerprint_check,
        DROP CONSTRAINT records_state_check,
        DROP CONSTRAINT records_fence_check,
        ALTER COLUMN key TYPE {s}.digest,
        ALTER COLUMN fingerprint TYPE {s}.digest,
        ALTER COLUMN state TYPE {s}.record_state,
        ALTER COLUMN fence TYPE {s}.fence;
    ALTER DOMAIN {s}.digest ADD CONSTRAINT digest_is_32_bytes CHECK (octet_length(VALUE) = 32);
    ALTER DOMAIN {s}.record_state ADD CONSTRAINT record_state_is_known CHECK (VALUE IN
        ('in-progress', 'completed', 'failed-retryable', 'failed-permanent', 'outcome-unknown'));
    ALTER DOMAIN {s}.fence ADD CONSTRAINT fence_is_positive CHECK (VALUE > 0);
",
];

const COLUMNS: &str = "namespace, key, policy_digest, fingerprint, partition, state, fence, lease_until, attempts, \
     created, updated, retention_ms, retain_until, outcome_status, outcome_body, outcome_error, holder_run_id, \
     holder_trigger, holder_attempt, holder_host, holder_pid";

/// The SQL type of each of [`COLUMNS`]' parameters. A parameter written to
/// a column is cast to it: left to the server, a parameter written to a
/// domain column would be typed as the domain, which the client's types
/// do not accept.
const COLUMN_TYPES: [&str; 21] = [
    "text", "bytea", "text", "bytea", "text", "text", "int8", "int8", "int8", "int8", "int8",
    "int8", "int8", "int4", "bytea", "text", "text", "text", "int8", "text", "int8",
];

/// The store clock in ms, in SQL: `$1` pins it (a manual clock), else the
/// server's clock plus `$2`. `clock_timestamp()`, not `now()`: `now()` is
/// the transaction's start, before the row lock was granted.
const NOW: &str =
    "COALESCE($1::int8, floor(extract(epoch FROM clock_timestamp()) * 1000)::int8 + $2::int8)";

/// "Counts as absent" (see `machine::is_expired`) for a row `r` at `n.ms`.
const EXPIRED: &str =
    "(r.retain_until < n.ms AND NOT (r.state = 'in-progress' AND r.lease_until > n.ms))";

/// Largest time a store holds (`machine::MAX_TIME_MS`), for the fast claim.
const MAX_TIME: &str = "9223372036854775807";

/// How often a call is retried after a serialization failure, a deadlock
/// or a lost insert race before it gives up.
const MAX_ATTEMPTS: u32 = 10;

/// The SQL of one schema, built once.
#[derive(Debug)]
struct Sql {
    lock: String,
    now: String,
    now_and_fence: String,
    insert: String,
    update: String,
    fast_claim: String,
    fast_claim_owned: String,
    batch_claim: String,
    get: String,
    list: String,
    gc: String,
    epoch_for_share: String,
    join: String,
    membership: String,
    job_acquire: String,
    job_get: String,
    job_heartbeat: String,
    job_release: String,
    finish_fast: String,
    finish_batch: String,
}

impl Sql {
    fn new(schema: &str) -> Sql {
        let s = quote(schema);
        let fence_seq = format!("'{s}.fence_seq'");
        let epoch_seq = format!("'{s}.epoch_seq'");
        let placeholders = COLUMN_TYPES
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::{t}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        let set = COLUMNS
            .split(", ")
            .zip(COLUMN_TYPES)
            .enumerate()
            .skip(2)
            .map(|(i, (c, t))| format!("{c} = ${}::{t}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        let r_columns = COLUMNS
            .split(", ")
            .map(|c| format!("r.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        // `$3`/`$4` are the clock parameters where `$1`/`$2` are taken.
        let now34 = NOW.replace("$1", "$3").replace("$2", "$4");
        // A fresh claim's insert, from `n` (its clock and fence).
        let fresh_insert = format!(
            "INSERT INTO {s}.records ({COLUMNS}) \
             SELECT $1::text, $2::bytea, $3::text, $4::bytea, $5::text, 'in-progress', n.fence, \
               LEAST(n.ms::numeric + $6::int8, {MAX_TIME})::int8, 1, n.ms, n.ms, $7::int8, \
               GREATEST(LEAST(n.ms::numeric + $7::int8, {MAX_TIME}), LEAST(n.ms::numeric + $6::int8, {MAX_TIME}))::int8, \
               NULL, NULL, NULL, $8::text, $9::text, $10::int8, $11::text, $12::int8 FROM n \
             ON CONFLICT (namespace, key) DO NOTHING \
             RETURNING fence, created, lease_until, retain_until"
        );
        Sql {
            lock: format!(
                "SELECT {COLUMNS} FROM {s}.records WHERE namespace = $1 AND key = $2 FOR UPDATE"
            ),
            now: format!("SELECT {NOW}, NULL::int8"),
            now_and_fence: format!("SELECT {NOW}, nextval({fence_seq})"),
            insert: format!(
                "INSERT INTO {s}.records ({COLUMNS}) VALUES ({placeholders}) ON CONFLICT (namespace, key) DO NOTHING"
            ),
            update: format!(
                "UPDATE {s}.records SET {set} WHERE namespace = $1 AND key = $2 AND fence = $22"
            ),
            // Mirrors machine::new_record: lease_until = now + lease,
            // retain_until = max(now + retention, lease_until), both clamped.
            fast_claim: format!(
                "WITH n AS (SELECT {} AS ms, nextval({fence_seq}) AS fence) {fresh_insert}",
                NOW.replace("$1", "$13").replace("$2", "$14")
            ),
            // The same under an ownership token ($15 group, $16 epoch): it
            // inserts only while the epoch is current, holding the
            // membership row FOR SHARE until commit so that a membership
            // change waits for it; when it inserts nothing, the transaction
            // path says why. A statement of its own: naming the membership
            // table costs every claim that has no token (its lock and
            // executor set-up, some 15 µs) for a check it does not make.
            fast_claim_owned: format!(
                "WITH m AS (SELECT epoch FROM {s}.memberships WHERE grp = $15::text FOR SHARE), \
                 n AS (SELECT {} AS ms, nextval({fence_seq}) AS fence \
                   WHERE EXISTS (SELECT 1 FROM m WHERE m.epoch = $16::int8)) {fresh_insert}",
                NOW.replace("$1", "$13").replace("$2", "$14")
            ),
            batch_claim: batch::claim_sql(&s, &fence_seq, COLUMNS, &r_columns),
            get: format!(
                "SELECT n.ms, {r_columns} FROM (SELECT {now34} AS ms) n \
                 LEFT JOIN {s}.records r ON r.namespace = $1 AND r.key = $2"
            ),
            // The clock is read once (MATERIALIZED), the row for it is kept
            // even when nothing matches (LEFT JOIN), so `now` is always known.
            list: format!(
                "WITH n AS MATERIALIZED (SELECT {NOW} AS ms) \
                 SELECT n.ms, {r_columns} FROM n LEFT JOIN LATERAL ( \
                   SELECT r.* FROM {s}.records r WHERE NOT {EXPIRED} \
                   AND ($3::text IS NULL OR r.namespace = $3) AND ($4::text IS NULL OR r.partition = $4) \
                   AND ($5::text IS NULL OR r.state = $5) \
                   ORDER BY r.updated DESC, r.namespace COLLATE \"C\", r.key LIMIT $6::int8 \
                 ) r ON true ORDER BY r.updated DESC, r.namespace COLLATE \"C\", r.key"
            ),
            gc: format!(
                "WITH n AS MATERIALIZED (SELECT {NOW} AS ms) \
                 DELETE FROM {s}.records r USING n WHERE {EXPIRED}"
            ),
            // FOR SHARE: a membership change (which updates the row) waits
            // for this claim's transaction, so the claim is ordered before
            // or after it, never across it.
            epoch_for_share: format!("SELECT epoch FROM {s}.memberships WHERE grp = $1 FOR SHARE"),
            // One statement: the row lock of the upsert serialises joiners;
            // the epoch moves (store-wide sequence) only when the members
            // differ. The sequence value drawn for the insert attempt is lost
            // on conflict: epochs may skip values, never go back.
            join: format!(
                "INSERT INTO {s}.memberships AS m (grp, epoch, members, updated) \
                 SELECT $1::text, nextval({epoch_seq}), $2::text[], {now34} \
                 ON CONFLICT (grp) DO UPDATE SET \
                   epoch = CASE WHEN m.members = EXCLUDED.members THEN m.epoch ELSE nextval({epoch_seq}) END, \
                   updated = CASE WHEN m.members = EXCLUDED.members THEN m.updated ELSE EXCLUDED.updated END, \
                   members = EXCLUDED.members \
                 RETURNING epoch, members"
            ),
            membership: format!("SELECT epoch, members FROM {s}.memberships WHERE grp = $1"),
            // Takes the lease when absent, or when it ended by the store
            // clock (`acquired` holds this statement's "now").
            job_acquire: format!(
                "INSERT INTO {s}.job_leases AS j (job, holder, fence, lease_until, acquired) \
                 SELECT $1::text, $2::text, nextval({fence_seq}), \
                   LEAST(n.ms::numeric + $5::int8, {MAX_TIME})::int8, n.ms \
                 FROM (SELECT {now34} AS ms) n \
                 ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, fence = EXCLUDED.fence, \
                   lease_until = EXCLUDED.lease_until, acquired = EXCLUDED.acquired \
                 WHERE j.lease_until <= EXCLUDED.acquired \
                 RETURNING fence, lease_until"
            ),
            job_get: format!(
                "SELECT n.ms, j.holder, j.fence, j.lease_until FROM (SELECT {} AS ms) n \
                 LEFT JOIN {s}.job_leases j ON j.job = $1",
                NOW.replace("$2", "$3").replace("$1", "$2")
            ),
            job_heartbeat: format!(
                "UPDATE {s}.job_leases j SET lease_until = LEAST(n.ms::numeric + $5::int8, {MAX_TIME})::int8 \
                 FROM (SELECT {now34} AS ms) n WHERE j.job = $1 AND j.fence = $2 RETURNING j.lease_until"
            ),
            job_release: format!("DELETE FROM {s}.job_leases WHERE job = $1 AND fence = $2"),
            // A holder's completion or failure in one autocommit statement:
            // the conditions are `machine::held` (live, same fence, in
            // progress) and the new values are `machine::finish`'s. When it
            // changes nothing, the locked path finds out why.
            finish_batch: finish::finish_sql(&s),
            finish_fast: format!(
                "WITH n AS (SELECT {NOW} AS ms) \
                 UPDATE {s}.records AS r SET state = $5::text, outcome_status = $6::int4, \
                 outcome_body = $7::bytea, outcome_error = $8::text, updated = n.ms, \
                 retain_until = CASE WHEN r.retention_ms > 9223372036854775807 - n.ms \
                     THEN 9223372036854775807 ELSE n.ms + r.retention_ms END \
                 FROM n WHERE r.namespace = $3 AND r.key = $4 AND r.fence = $9 \
                 AND r.state = 'in-progress' AND NOT {EXPIRED} RETURNING r.fence"
            ),
        }
    }
}

/// A checked schema name as an SQL identifier.
fn quote(schema: &str) -> String {
    debug_assert!(url::check_schema(schema).is_ok(), "{schema}");
    format!("\"{schema}\"")
}

/// A store in a PostgreSQL database. Cheap to clone (clones share the
/// pool).
#[derive(Debug, Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: Pool,
    sql: Sql,
    url: PostgresUrl,
    /// The redacted URL: for messages.
    name: String,
    options: StoreOptions,
}

/// A pooled connection that is discarded, not returned to the pool, when
/// dropped while a transaction may be open (an error mid-transaction or a
/// cancelled call): the server then rolls the transaction back.
struct Conn {
    object: Option<Object>,
    in_transaction: bool,
}

impl std::ops::Deref for Conn {
    type Target = deadpool_postgres::ClientWrapper;

    fn deref(&self) -> &Self::Target {
        // Only `drop` takes the object out.
        self.object.as_ref().expect("a live connection")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.in_transaction
            && let Some(object) = self.object.take()
        {
            drop(Object::take(object));
        }
    }
}

/// Whether a failed call may be retried as a whole: it changed nothing.
fn is_retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// Classifies a failure to connect or to open.
fn connect_kind(e: &tokio_postgres::Error) -> ConnectErrorKind {
    if let Some(code) = e.code() {
        let class = &code.code()[..2];
        return match class {
            "28" => ConnectErrorKind::Auth,
            "3D" => ConnectErrorKind::NoSuchDatabase,
            "42" if *code == SqlState::INSUFFICIENT_PRIVILEGE => ConnectErrorKind::Permission,
            "08" | "57" => ConnectErrorKind::Unreachable,
            _ => ConnectErrorKind::Other,
        };
    }
    let text = e.to_string();
    if text.contains("TLS") || text.contains("tls") || text.contains("SSL") {
        return ConnectErrorKind::Tls;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if s.downcast_ref::<rustls::Error>().is_some() {
            return ConnectErrorKind::Tls;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io
                .get_ref()
                .is_some_and(|inner| inner.is::<rustls::Error>())
            {
                return ConnectErrorKind::Tls;
            }
            return ConnectErrorKind::Unreachable;
        }
        source = s.source();
    }
    if text.contains("connect") || text.contains("closed") || text.contains("timeout") {
        ConnectErrorKind::Unreachable
    } else {
        ConnectErrorKind::Other
    }
}

/// The message of an error with its sources (tokio-postgres puts the
/// server's message in the source).
fn detail(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// A record's columns as SQL values, in [`COLUMNS`] order.
struct Params {
    namespace: String,
    key: Vec<u8>,
    policy_digest: String,
    fingerprint: Vec<u8>,
    partition: String,
    state: &'static str,
    ints: [i64; 7],
    outcome_status: Option<i32>,
    outcome_body: Option<Vec<u8>>,
    outcome_error: Option<String>,
    run_id: Option<String>,
    trigger: Option<String>,
    attempt: Option<i64>,
    host: String,
    pid: i64,
}

impl Params {
    fn of(r: &Record) -> Result<Params, StoreError> {
        let int = |v: u64, what: &str| {
            i64::try_from(v).map_err(|_| {
                StoreError::InvalidRequest(format!("{what} {v} does not fit the store"))
            })
        };
        let outcome = r.outcome.as_ref();
        Ok(Params {
            namespace: r.key.namespace.clone(),
            key: r.key.key.0.to_vec(),
            policy_digest: r.policy_digest.clone(),
            fingerprint: r.fingerprint.0.to_vec(),
            partition: r.partition.clone(),
            state: r.state.as_str(),
            ints: [
                int(r.fence, "fence")?,
                int(r.lease_until_ms, "lease_until")?,
                i64::from(r.attempts),
                int(r.created_ms, "created")?,
                int(r.updated_ms, "updated")?,
                int(r.retention_ms, "retention")?,
                int(r.retain_until_ms, "retain_until")?,
            ],
            outcome_status: outcome.map(|o| o.status),
            outcome_body: outcome.map(|o| o.body.clone()),
            outcome_error: outcome.and_then(|o| o.error.clone()),
            run_id: r.holder.run_id.clone(),
            trigger: r.holder.trigger.clone(),
            attempt: r.holder.attempt.map(i64::from),
            host: r.holder.host.clone(),
            pid: i64::from(r.holder.pid),
        })
    }

    fn values(&self) -> [&(dyn ToSql + Sync); 21] {
        [
            &self.namespace,
            &self.key,
            &self.policy_digest,
            &self.fingerprint,
            &self.partition,
            &self.state,
            &self.ints[0],
            &self.ints[1],
            &self.ints[2],
            &self.ints[3],
            &self.ints[4],
            &self.ints[5],
            &self.ints[6],
            &self.outcome_status,
            &self.outcome_body,
            &self.outcome_error,
            &self.run_id,
            &self.trigger,
            &self.attempt,
            &self.host,
            &self.pid,
        ]
    }
}

/// What a write transaction does once `machine.rs` has decided.
enum Step<T> {
    /// Nothing to write: end the transaction and return.
    Done(T),
    /// Write this record (replacing the row that was read, if any) and
    /// return.
    Put(Box<Record>, T),
}

impl PostgresStore {
    /// Opens the store `url` names (a `postgres://` or `postgresql://` URL,
    /// see [`PostgresUrl`]): connects once to check the server, the
    /// credentials and TLS, then migrates the schema.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        Self::open(url.parse()?, options).await
    }

    /// Opens the store at a parsed URL: connects once, migrates the schema.
    pub async fn open(url: PostgresUrl, options: StoreOptions) -> Result<Self, StoreError> {
        let tls = tls::connector(&url)?;
        let manager = Manager::from_config(
            url.client_config()?,
            tls,
            ManagerConfig {
                // Checking out a connection costs nothing; a broken one fails
                // its first statement and is dropped by the pool. Connections
                // that may hold an open transaction never go back (`Conn`).
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(url.pool_size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Connect {
                url: url.redacted().to_string(),
                kind: ConnectErrorKind::Other,
                detail: e.to_string(),
            })?;
        let store = PostgresStore {
            inner: Arc::new(Inner {
                pool,
                sql: Sql::new(&url.schema),
                name: url.redacted().to_string(),
                url,
                options,
            }),
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Brings the schema to [`POSTGRES_SCHEMA_VERSION`] (creating it when
    /// absent) and returns the version. Safe to run from many processes at
    /// once: they serialise on an advisory lock and migrate once. Opening a
    /// store already does this.
    pub async fn migrate(&self) -> Result<i64, StoreError> {
        let inner = &self.inner;
        let mut conn = inner.conn().await?;
        // Fast path, no lock: already current.
        if let Some(found) = inner.schema_version_on(&conn).await? {
            if found == POSTGRES_SCHEMA_VERSION {
                return Ok(found);
            }
            inner.check_not_newer(found)?;
        }
        let schema = &inner.url.schema;
        let s = quote(schema);
        let fail = |e: tokio_postgres::Error| inner.open_err(&e);
        conn.in_transaction = true;
        conn.batch_execute("BEGIN").await.map_err(fail)?;
        conn.query_one(
            "SELECT pg_advisory_xact_lock($1::int8)",
            &[&advisory_key(schema)],
        )
        .await
        .map_err(fail)?;
        // Creating a schema that exists needs no privilege this way, unlike
        // CREATE SCHEMA IF NOT EXISTS, which checks CREATE on the database.
        let exists: bool = conn
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                &[schema],
            )
            .await
            .map_err(fail)?
            .get(0);
        if !exists {
            conn.batch_execute(&format!("CREATE SCHEMA {s}"))
                .await
                .map_err(fail)?;
        }
        conn.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {s}.idem_schema_migrations (
                version    integer     PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )"
        ))
        .await
        .map_err(fail)?;
        // Read again under the lock: another process may have migrated.
        let found = inner.schema_version_on(&conn).await?.unwrap_or(0);
        inner.check_not_newer(found)?;
        if found == 0 {
            // A `records` table idem did not create: another application's.
            let foreign: bool = conn
                .query_one(
                    "SELECT to_regclass($1) IS NOT NULL",
                    &[&format!("{s}.records")],
                )
                .await
                .map_err(fail)?
                .get(0);
            if foreign {
                return Err(StoreError::Connect {
                    url: inner.name.clone(),
                    kind: ConnectErrorKind::ForeignSchema,
                    detail: format!(
                        "schema `{schema}` holds a `records` table but no idem migration history; choose another idem_schema"
                    ),
                });
            }
        }
        for (from, sql) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(found).unwrap_or(usize::MAX))
        {
            conn.batch_execute(&sql.replace("{s}", &s))
                .await
                .map_err(fail)?;
            let to = i32::try_from(from + 1).unwrap_or(i32::MAX);
            conn.execute(
                &format!("INSERT INTO {s}.idem_schema_migrations (version) VALUES ($1)"),
                &[&to],
            )
            .await
            .map_err(fail)?;
        }
        conn.batch_execute("COMMIT").await.map_err(fail)?;
        conn.in_transaction = false;
        Ok(POSTGRES_SCHEMA_VERSION)
    }

    /// The schema's version (for `idem inspect` and tests).
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        let conn = self.inner.conn().await?;
        Ok(self.inner.schema_version_on(&conn).await?.unwrap_or(0))
    }

    /// Whether the pool's connections are encrypted (TLS), as the server
    /// reports it.
    pub async fn tls_in_use(&self) -> Result<bool, StoreError> {
        let conn = self.inner.conn().await?;
        let row = conn
            .query_one(
                "SELECT COALESCE((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
                &[],
            )
            .await
            .map_err(|e| self.inner.err("checking TLS", e))?;
        Ok(row.get(0))
    }

    /// Drops the store's schema and everything in it (for the conformance
    /// suite, which gives every test a schema of its own). Gives up rather
    /// than wait long on a lock.
    #[cfg(feature = "conformance")]
    pub(crate) async fn drop_schema(&self) -> Result<(), StoreError> {
        let conn = self.inner.conn().await?;
        conn.batch_execute(&format!(
            "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {} CASCADE",
            quote(&self.inner.url.schema)
        ))
        .await
        .map_err(|e| self.inner.err("dropping the schema", e))
    }

    /// The schema this store's tables live in.
    pub fn schema(&self) -> &str {
        &self.inner.url.schema
    }
}

/// The advisory lock that serialises migrations of one schema: FNV-1a of
/// a fixed prefix and the schema name (stable across builds and hosts).
fn advisory_key(schema: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"idem-migrate:".iter().chain(schema.as_bytes()) {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

impl Inner {
    /// A pooled connection; failing to get one is a connection error.
    async fn conn(&self) -> Result<Conn, StoreError> {
        match self.pool.get().await {
            Ok(object) => Ok(Conn {
                object: Some(object),
                in_transaction: false,
            }),
            Err(deadpool_postgres::PoolError::Backend(e)) => Err(self.open_err(&e)),
            Err(e) => Err(StoreError::Connect {
                url: self.name.clone(),
                kind: ConnectErrorKind::Other,
                detail: e.to_string(),
            }),
        }
    }

    fn open_err(&self, e: &tokio_postgres::Error) -> StoreError {
        StoreError::Connect {
            url: self.name.clone(),
            kind: connect_kind(e),
            detail: detail(e),
        }
    }

    fn err(&self, context: &'static str, e: tokio_postgres::Error) -> StoreError {
        if e.is_closed() {
            // The connection broke: say so, naming the URL.
            return self.open_err(&e);
        }
        StoreError::Backend {
            store: self.name.clone(),
            context,
            source: Box::new(e),
        }
    }

    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Corrupt {
            store: self.name.clone(),
            what,
        }
    }

    fn check_not_newer(&self, found: i64) -> Result<(), StoreError> {
        if found > POSTGRES_SCHEMA_VERSION {
            return Err(StoreError::DatabaseSchemaTooNew {
                store: format!("{} (schema {})", self.name, self.url.schema),
                found,
                supported: POSTGRES_SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// The schema's version, `None` when it has no migration table yet.
    async fn schema_version_on(&self, conn: &Conn) -> Result<Option<i64>, StoreError> {
        let s = quote(&self.url.schema);
        let fail = |e: tokio_postgres::Error| self.open_err(&e);
        let has_table: bool = conn
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&format!("{s}.idem_schema_migrations")],
            )
            .await
            .map_err(fail)?
            .get(0);
        if !has_table {
            return Ok(None);
        }
        let version: i64 = conn
            .query_one(
                &format!("SELECT COALESCE(max(version), 0)::int8 FROM {s}.idem_schema_migrations"),
                &[],
            )
            .await
            .map_err(fail)?
            .get(0);
        Ok(Some(version))
    }

    /// The clock parameters of [`NOW`].
    fn clock(&self) -> (Option<i64>, i64) {
        let (manual, offset) = self.options.clock.for_database();
        (
            manual.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
            offset,
        )
    }

    fn unsigned(&self, v: i64, what: &str) -> Result<u64, StoreError> {
        u64::try_from(v).map_err(|_| self.corrupt(format!("{what} is {v}")))
    }

    /// Decodes the record starting at column `at`; `None` when the row
    /// holds none (a LEFT JOIN that matched nothing).
    fn decode(&self, row: &Row, at: usize) -> Result<Option<Record>, StoreError> {
        let get_err =
            |e: tokio_postgres::Error| self.corrupt(format!("a row does not decode: {e}"));
        let namespace: Option<String> = row.try_get(at).map_err(get_err)?;
        let Some(namespace) = namespace else {
            return Ok(None);
        };
        let digest = |i: usize, what: &str| -> Result<Digest, StoreError> {
            let bytes: Vec<u8> = row.try_get(at + i).map_err(get_err)?;
            <[u8; 32]>::try_from(bytes.as_slice())
                .map(Digest)
                .map_err(|_| self.corrupt(format!("{what} is {} bytes, not 32", bytes.len())))
        };
        let int = |i: usize| -> Result<i64, StoreError> { row.try_get(at + i).map_err(get_err) };
        let small = |v: i64, what: &str| {
            u32::try_from(v).map_err(|_| self.corrupt(format!("{what} is {v}")))
        };
        let key = RecordKey {
            namespace,
            key: digest(1, "key")?,
        };
        let state: String = row.try_get(at + 5).map_err(get_err)?;
        let state: RecordState = state
            .parse()
            .map_err(|e: String| self.corrupt(format!("record {key}: {e}")))?;
        let status: Option<i32> = row.try_get(at + 13).map_err(get_err)?;
        let outcome = match status {
            None => None,
            Some(status) => Some(Outcome {
                status,
                body: row
                    .try_get::<_, Option<Vec<u8>>>(at + 14)
                    .map_err(get_err)?
                    .unwrap_or_default(),
                error: row.try_get(at + 15).map_err(get_err)?,
            }),
        };
        let attempt: Option<i64> = row.try_get(at + 18).map_err(get_err)?;
        Ok(Some(Record {
            policy_digest: row.try_get(at + 2).map_err(get_err)?,
            fingerprint: digest(3, "fingerprint")?,
            partition: row.try_get(at + 4).map_err(get_err)?,
            state,
            fence: self.unsigned(int(6)?, "fence")?,
            lease_until_ms: self.unsigned(int(7)?, "lease_until")?,
            attempts: small(int(8)?, "attempts")?,
            created_ms: self.unsigned(int(9)?, "created")?,
            updated_ms: self.unsigned(int(10)?, "updated")?,
            retention_ms: self.unsigned(int(11)?, "retention_ms")?,
            retain_until_ms: self.unsigned(int(12)?, "retain_until")?,
            outcome,
            holder: Holder {
                run_id: row.try_get(at + 16).map_err(get_err)?,
                trigger: row.try_get(at + 17).map_err(get_err)?,
                attempt: attempt.map(|a| small(a, "holder attempt")).transpose()?,
                host: row.try_get(at + 19).map_err(get_err)?,
                pid: small(int(20)?, "holder pid")?,
            },
            key,
        }))
    }

    /// Runs one call as a write transaction (see the module docs):
    ///
    /// 1. one round trip: `BEGIN`, `SELECT … FOR UPDATE` of the record,
    ///    then the clock (and, with `draw_fence`, the next fence), read
    ///    after the row lock is held so that "now" is ordered with the
    ///    writes it decides;
    /// 2. `decide` (a `machine.rs` transition) turns the record, now and
    ///    fence into a [`Step`] or a typed error;
    /// 3. one round trip: the write, conditional on the key and the fence
    ///    that was read (or, with no row, an insert that yields to a racing
    ///    one), then `COMMIT`; or just `ROLLBACK`.
    ///
    /// With an `ownership` token, one more round trip after the first reads
    /// the group's epoch `FOR SHARE` (held to commit, so a membership change
    /// waits for this call) and refuses a stale one before `decide`.
    ///
    /// Retried as a whole after a serialization failure, a deadlock or a
    /// lost insert race: each of those changed nothing.
    async fn transact<T>(
        &self,
        context: &'static str,
        key: &RecordKey,
        draw_fence: bool,
        ownership: Option<&OwnershipToken>,
        mut decide: impl FnMut(Option<Record>, u64, u64) -> Result<Step<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let (manual, offset) = self.clock();
        let key_bytes = key.key.0.to_vec();
        let fail = |e| self.err(context, e);
        for _ in 0..MAX_ATTEMPTS {
            let mut conn = self.conn().await?;
            let lock = conn.prepare_cached(&self.sql.lock).await.map_err(fail)?;
            let now_sql = if draw_fence {
                &self.sql.now_and_fence
            } else {
                &self.sql.now
            };
            let now = conn.prepare_cached(now_sql).await.map_err(fail)?;
            let key_params: [&(dyn ToSql + Sync); 2] = [&key.namespace, &key_bytes];
            let clock_params: [&(dyn ToSql + Sync); 2] = [&manual, &offset];
            conn.in_transaction = true;
            // Pipelined: `biased` polls (so sends) them in this order.
            let (begun, row, clock) = tokio::join!(
                biased;
                conn.batch_execute("BEGIN"),
                conn.query_opt(&lock, &key_params),
                conn.query_one(&now, &clock_params),
            );
            let read = begun.and(row).and_then(|row| Ok((row, clock?)));
            let (row, clock) = match read {
                Ok(read) => read,
                // Dropping `conn` mid-transaction discards it.
                Err(e) if is_retryable(&e) => continue,
                Err(e) => return Err(fail(e)),
            };
            if let Some(token) = ownership {
                let epoch = conn
                    .prepare_cached(&self.sql.epoch_for_share)
                    .await
                    .map_err(fail)?;
                let current = match conn.query_opt(&epoch, &[&token.group]).await {
                    Ok(row) => row
                        .map(|row| self.unsigned(row.get(0), "an epoch"))
                        .transpose()?,
                    Err(e) if is_retryable(&e) => continue,
                    Err(e) => return Err(fail(e)),
                };
                if let Err(stale) = machine::check_epoch(Some(token), current) {
                    conn.batch_execute("ROLLBACK").await.map_err(fail)?;
                    conn.in_transaction = false;
                    return Err(stale);
                }
            }
            let current = row.map(|row| self.decode(&row, 0)).transpose()?.flatten();
            let now_ms = self.unsigned(clock.get::<_, i64>(0), "the clock")?;
            let fence = clock
                .get::<_, Option<i64>>(1)
                .map(|f| self.unsigned(f, "the fence sequence"))
                .transpose()?
                .unwrap_or(0);
            let read_fence = current.as_ref().map(|r| r.fence);
            let (record, out) = match decide(current, now_ms, fence) {
                Ok(Step::Put(record, out)) => (*record, out),
                Ok(Step::Done(out)) => {
                    conn.batch_execute("ROLLBACK").await.map_err(fail)?;
                    conn.in_transaction = false;
                    return Ok(out);
                }
                Err(refused) => {
                    conn.batch_execute("ROLLBACK").await.map_err(fail)?;
                    conn.in_transaction = false;
                    return Err(refused);
                }
            };
            let params = Params::of(&record)?;
            let mut values: Vec<&(dyn ToSql + Sync)> = params.values().to_vec();
            let expected = read_fence.map(|f| i64::try_from(f).unwrap_or(i64::MAX));
            let write_sql = match &expected {
                Some(expected) => {
                    values.push(expected);
                    &self.sql.update
                }
                None => &self.sql.insert,
            };
            let write = conn.prepare_cached(write_sql).await.map_err(fail)?;
            // If the write fails, COMMIT of the aborted transaction rolls
            // back: nothing is half-written.
            let (written, committed) = tokio::join!(
                biased;
                conn.execute(&write, &values),
                conn.batch_execute("COMMIT"),
            );
            if committed.is_ok() {
                // COMMIT answered: the transaction is over either way.
                conn.in_transaction = false;
            }
            match (written, committed) {
                (Ok(1), Ok(())) => return Ok(out),
                // Lost the race to insert a fresh key (or the row changed
                // under a lock it could not have: defensive): retry.
                (Ok(_), Ok(())) => {}
                (Err(e), _) | (Ok(_), Err(e)) if is_retryable(&e) => {}
                (Err(e), _) | (Ok(_), Err(e)) => return Err(fail(e)),
            }
        }
        Err(StoreError::Backend {
            store: self.name.clone(),
            context,
            source: format!(
                "gave up after {MAX_ATTEMPTS} attempts that conflicted with concurrent writers"
            )
            .into(),
        })
    }

    /// The one-round-trip fresh claim: inserts when no row exists under the
    /// key; `None` when one does (the transaction path then decides).
    async fn fast_claim(&self, request: &ClaimRequest) -> Result<Option<Claim>, StoreError> {
        let (manual, offset) = self.clock();
        let fail = |e| self.err("claiming", e);
        let lease = i64::try_from(machine::millis(request.lease)).unwrap_or(i64::MAX);
        let retention = i64::try_from(machine::millis(request.retention)).unwrap_or(i64::MAX);
        let key = request.key.key.0.to_vec();
        let fingerprint = request.fingerprint.0.to_vec();
        let h = &request.holder;
        let attempt = h.attempt.map(i64::from);
        let pid = i64::from(h.pid);
        let group = request.ownership.as_ref().map(|t| t.group.clone());
        let epoch = request
            .ownership
            .as_ref()
            .map(|t| i64::try_from(t.epoch).unwrap_or(i64::MAX));
        let all: [&(dyn ToSql + Sync); 16] = [
            &request.key.namespace,
            &key,
            &request.policy_digest,
            &fingerprint,
            &request.partition,
            &lease,
            &retention,
            &h.run_id,
            &h.trigger,
            &attempt,
            &h.host,
            &pid,
            &manual,
            &offset,
            &group,
            &epoch,
        ];
        // Without a token, the statement takes neither group nor epoch.
        let (sql, params) = match &request.ownership {
            Some(_) => (&self.sql.fast_claim_owned, &all[..]),
            None => (&self.sql.fast_claim, &all[..14]),
        };
        for _ in 0..MAX_ATTEMPTS {
            let conn = self.conn().await?;
            let statement = conn.prepare_cached(sql).await.map_err(fail)?;
            let row = match conn.query_opt(&statement, params).await {
                Ok(row) => row,
                Err(e) if is_retryable(&e) => continue,
                Err(e) => return Err(fail(e)),
            };
            let Some(row) = row else { return Ok(None) };
            let fence = self.unsigned(row.get(0), "fence")?;
            let now_ms = self.unsigned(row.get(1), "created")?;
            let record = machine::new_record(request, fence, now_ms);
            // The SQL above must agree with machine::new_record.
            debug_assert_eq!(
                (
                    self.unsigned(row.get(2), "lease_until")?,
                    self.unsigned(row.get(3), "retain_until")?
                ),
                (record.lease_until_ms, record.retain_until_ms),
                "the fast claim disagrees with machine::new_record"
            );
            return Ok(Some(machine::claim_of(&record)));
        }
        Err(StoreError::Backend {
            store: self.name.clone(),
            context: "claiming",
            source: format!("gave up after {MAX_ATTEMPTS} serialization failures").into(),
        })
    }

    /// A single autocommit statement, retried after a serialization
    /// failure or deadlock.
    async fn query(
        &self,
        context: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let fail = |e| self.err(context, e);
        for _ in 0..MAX_ATTEMPTS {
            let conn = self.conn().await?;
            let statement = conn.prepare_cached(sql).await.map_err(fail)?;
            match conn.query(&statement, params).await {
                Ok(rows) => return Ok(rows),
                Err(e) if is_retryable(&e) => continue,
                Err(e) => return Err(fail(e)),
            }
        }
        Err(StoreError::Backend {
            store: self.name.clone(),
            context,
            source: format!("gave up after {MAX_ATTEMPTS} serialization failures").into(),
        })
    }

    /// `finish` as one conditional statement: `Ok(true)` when it wrote.
    async fn finish_fast(
        &self,
        key: &RecordKey,
        fence: u64,
        state: RecordState,
        outcome: &Outcome,
    ) -> Result<bool, StoreError> {
        let (manual, offset) = self.clock();
        let fail = |e| self.err("finishing an attempt", e);
        let conn = self.conn().await?;
        let stmt = conn
            .prepare_cached(&self.sql.finish_fast)
            .await
            .map_err(fail)?;
        let key_bytes = key.key.0.to_vec();
        let fence = i64::try_from(fence).unwrap_or(i64::MAX);
        let rows = conn
            .query(
                &stmt,
                &[
                    &manual,
                    &offset,
                    &key.namespace,
                    &key_bytes,
                    &state.as_str(),
                    &outcome.status,
                    &outcome.body,
                    &outcome.error,
                    &fence,
                ],
            )
            .await
            .map_err(fail)?;
        Ok(rows.len() == 1)
    }

    async fn finish(
        &self,
        key: &RecordKey,
        fence: u64,
        state: RecordState,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let limit = self.options.max_outcome_bytes;
        // The common case in one round trip; any refusal (or error) goes
        // through the locked read, which says exactly why.
        let checked = machine::checked_outcome(key, outcome.clone(), limit)?;
        if matches!(
            self.finish_fast(key, fence, state, &checked).await,
            Ok(true)
        ) {
            return Ok(());
        }
        self.transact(
            "finishing an attempt",
            key,
            false,
            None,
            |current, now, _| {
                let record =
                    machine::finish(current, key, fence, state, outcome.clone(), limit, now)?;
                Ok(Step::Put(Box::new(record), ()))
            },
        )
        .await
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn describe(&self) -> String {
        self.inner.name.clone()
    }

    fn clock(&self) -> &crate::StoreClock {
        &self.inner.options.clock
    }

    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        machine::validate(&request)?;
        let inner = &self.inner;
        if let Some(claim) = inner.fast_claim(&request).await? {
            return Ok(ClaimOutcome::Claimed(claim));
        }
        inner
            .transact(
                "claiming",
                &request.key,
                true,
                request.ownership.as_ref(),
                |current, now, fence| {
                    Ok(match machine::claim(current, &request, now) {
                        ClaimStep::Existing(existing) => {
                            Step::Done(ClaimOutcome::Existing(existing))
                        }
                        ClaimStep::Insert => {
                            let record = machine::new_record(&request, fence, now);
                            let claim = machine::claim_of(&record);
                            Step::Put(Box::new(record), ClaimOutcome::Claimed(claim))
                        }
                    })
                },
            )
            .await
    }

    async fn claim_many(
        &self,
        requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        batch::claim_many(self, requests).await
    }

    async fn take_over_with(
        &self,
        key: &RecordKey,
        observed_fence: u64,
        lease: Duration,
        holder: Holder,
        ownership: Option<&OwnershipToken>,
    ) -> Result<Claim, StoreError> {
        self.inner
            .transact(
                "taking over",
                key,
                true,
                ownership,
                |current, now, fence| {
                    let record = machine::take_over_check(current, key, observed_fence, now)?;
                    let record = machine::taken_over(record, fence, lease, holder.clone(), now);
                    let claim = machine::claim_of(&record);
                    Ok(Step::Put(Box::new(record), claim))
                },
            )
            .await
    }

    async fn mark_unknown(&self, key: &RecordKey, observed_fence: u64) -> Result<(), StoreError> {
        self.inner
            .transact(
                "marking outcome-unknown",
                key,
                false,
                None,
                |current, now, _| {
                    Ok(
                        match machine::mark_unknown(current, key, observed_fence, now)? {
                            Some(record) => Step::Put(Box::new(record), ()),
                            None => Step::Done(()),
                        },
                    )
                },
            )
            .await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        fence: u64,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        self.inner
            .finish(key, fence, RecordState::Completed, outcome)
            .await
    }

    async fn fail(
        &self,
        key: &RecordKey,
        fence: u64,
        retryable: bool,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let state = machine::failed_state(retryable);
        self.inner.finish(key, fence, state, outcome).await
    }

    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        finish::finish_many(&self.inner, finishes).await
    }

    async fn heartbeat(
        &self,
        key: &RecordKey,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        self.inner
            .transact("heartbeating", key, false, None, |current, now, _| {
                let record = machine::heartbeat(current, key, fence, lease, now)?;
                let until = record.lease_until_ms;
                Ok(Step::Put(Box::new(record), until))
            })
            .await
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<RecordView>, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let key_bytes = key.key.0.to_vec();
        // One statement is one snapshot: the clock and the row agree.
        let rows = inner
            .query(
                "reading a record",
                &inner.sql.get,
                &[&key.namespace, &key_bytes, &manual, &offset],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| inner.corrupt("the clock query returned no row".into()))?;
        let now = inner.unsigned(row.get(0), "the clock")?;
        let record = inner.decode(row, 1)?;
        Ok(machine::live(record, now).map(|r| RecordView::at(r, now)))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<RecordView>, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let limit = filter.limit.map(i64::from);
        let state = filter.state.map(RecordState::as_str);
        let rows = inner
            .query(
                "listing records",
                &inner.sql.list,
                &[
                    &manual,
                    &offset,
                    &filter.namespace,
                    &filter.partition,
                    &state,
                    &limit,
                ],
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let now = inner.unsigned(row.get(0), "the clock")?;
            if let Some(record) = inner.decode(row, 1)? {
                out.push(RecordView::at(record, now));
            }
        }
        Ok(out)
    }

    async fn gc(&self) -> Result<u64, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let fail = |e| inner.err("collecting garbage", e);
        for _ in 0..MAX_ATTEMPTS {
            let conn = inner.conn().await?;
            let statement = conn.prepare_cached(&inner.sql.gc).await.map_err(fail)?;
            match conn.execute(&statement, &[&manual, &offset]).await {
                Ok(n) => return Ok(n),
                Err(e) if is_retryable(&e) => continue,
                Err(e) => return Err(fail(e)),
            }
        }
        Err(StoreError::Backend {
            store: inner.name.clone(),
            context: "collecting garbage",
            source: format!("gave up after {MAX_ATTEMPTS} serialization failures").into(),
        })
    }

    async fn join_membership(
        &self,
        group: &str,
        members: &[String],
    ) -> Result<Membership, StoreError> {
        let members = machine::normalize_members(group, members)?;
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let rows = inner
            .query(
                "joining a membership",
                &inner.sql.join,
                &[&group, &members, &manual, &offset],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| inner.corrupt("the membership upsert returned no row".into()))?;
        Ok(Membership {
            group: group.to_string(),
            epoch: inner.unsigned(row.get(0), "an epoch")?,
            members: row.get(1),
        })
    }

    async fn membership(&self, group: &str) -> Result<Option<Membership>, StoreError> {
        let inner = &self.inner;
        let rows = inner
            .query("reading a membership", &inner.sql.membership, &[&group])
            .await?;
        rows.first()
            .map(|row| {
                Ok(Membership {
                    group: group.to_string(),
                    epoch: inner.unsigned(row.get(0), "an epoch")?,
                    members: row.get(1),
                })
            })
            .transpose()
    }

    async fn acquire_job_lease(
        &self,
        job: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<JobLeaseAcquire, StoreError> {
        machine::check_name("job", job)?;
        machine::check_name("job-lease holder", holder)?;
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let lease_ms = i64::try_from(machine::millis(lease)).unwrap_or(i64::MAX);
        // Take it, else read who holds it; between the two statements the
        // holder may release it or its lease may end: then try again.
        for _ in 0..MAX_ATTEMPTS {
            let rows = inner
                .query(
                    "acquiring a job lease",
                    &inner.sql.job_acquire,
                    &[&job, &holder, &manual, &offset, &lease_ms],
                )
                .await?;
            if let Some(row) = rows.first() {
                return Ok(JobLeaseAcquire::Acquired(JobLease {
                    job: job.to_string(),
                    holder: holder.to_string(),
                    fence: inner.unsigned(row.get(0), "a job-lease fence")?,
                    lease_until_ms: inner.unsigned(row.get(1), "a job lease's end")?,
                }));
            }
            let rows = inner
                .query(
                    "reading a job lease",
                    &inner.sql.job_get,
                    &[&job, &manual, &offset],
                )
                .await?;
            let row = rows
                .first()
                .ok_or_else(|| inner.corrupt("the clock query returned no row".into()))?;
            let now = inner.unsigned(row.get(0), "the clock")?;
            let Some(holder) = row.get::<_, Option<String>>(1) else {
                continue;
            };
            let current = JobLease {
                job: job.to_string(),
                holder,
                fence: inner.unsigned(row.get(2), "a job-lease fence")?,
                lease_until_ms: inner.unsigned(row.get(3), "a job lease's end")?,
            };
            if let machine::JobStep::Held(current, remaining_ms) =
                machine::acquire_job(Some(current), now)
            {
                return Ok(JobLeaseAcquire::Held {
                    current,
                    remaining_ms,
                });
            }
        }
        Err(StoreError::Backend {
            store: inner.name.clone(),
            context: "acquiring a job lease",
            source: format!("gave up after {MAX_ATTEMPTS} attempts racing other holders").into(),
        })
    }

    async fn heartbeat_job_lease(
        &self,
        job: &str,
        fence: u64,
        lease: Duration,
    ) -> Result<u64, StoreError> {
        let inner = &self.inner;
        let (manual, offset) = inner.clock();
        let lease_ms = i64::try_from(machine::millis(lease)).unwrap_or(i64::MAX);
        let fence_param = i64::try_from(fence).unwrap_or(i64::MAX);
        let rows = inner
            .query(
                "heartbeating a job lease",
                &inner.sql.job_heartbeat,
                &[&job, &fence_param, &manual, &offset, &lease_ms],
            )
            .await?;
        match rows.first() {
            Some(row) => inner.unsigned(row.get(0), "a job lease's end"),
            None => Err(StoreError::JobLeaseLost {
                job: job.to_string(),
                fence,
            }),
        }
    }

    async fn release_job_lease(&self, job: &str, fence: u64) -> Result<(), StoreError> {
        let inner = &self.inner;
        let fence_param = i64::try_from(fence).unwrap_or(i64::MAX);
        let fail = |e| inner.err("releasing a job lease", e);
        let conn = inner.conn().await?;
        let statement = conn
            .prepare_cached(&inner.sql.job_release)
            .await
            .map_err(fail)?;
        match conn.execute(&statement, &[&job, &fence_param]).await {
            Ok(0) => Err(StoreError::JobLeaseLost {
                job: job.to_string(),
                fence,
            }),
            Ok(_) => Ok(()),
            Err(e) => Err(fail(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement of a schema, by name. Destructured, so that a
    /// statement added to `Sql` must be added here too.
    fn statements(sql: &Sql) -> Vec<(&'static str, &str)> {
        let Sql {
            lock,
            now,
            now_and_fence,
            insert,
            update,
            fast_claim,
            fast_claim_owned,
            batch_claim,
            get,
            list,
            gc,
            epoch_for_share,
            join,
            membership,
            job_acquire,
            job_get,
            job_heartbeat,
            job_release,
            finish_fast,
            finish_batch,
        } = sql;
        vec![
            ("lock", lock),
            ("now", now),
            ("now_and_fence", now_and_fence),
            ("insert", insert),
            ("update", update),
            ("fast_claim", fast_claim),
            ("fast_claim_owned", fast_claim_owned),
            ("batch_claim", batch_claim),
            ("get", get),
            ("list", list),
            ("gc", gc),
            ("epoch_for_share", epoch_for_share),
            ("join", join),
            ("membership", membership),
            ("job_acquire", job_acquire),
            ("job_get", job_get),
            ("job_heartbeat", job_heartbeat),
            ("job_release", job_release),
            ("finish_fast", finish_fast),
            ("finish_batch", finish_batch),
        ]
    }

    /// The statements are fixed text but for the (checked, quoted) schema:
    /// built for two schemas they differ only in its name, so no value can
    /// reach them except as a bound parameter.
    #[test]
    fn the_schema_is_the_only_interpolation() {
        let (a, b) = (Sql::new("svc_a"), Sql::new("svc_b"));
        for ((name, a), (_, b)) in statements(&a).into_iter().zip(statements(&b)) {
            assert_eq!(a.replace("\"svc_a\"", "\"svc_b\""), b, "{name}");
            assert!(!a.replace("\"svc_a\"", "").contains("svc_a"), "{name}: {a}");
        }
        for text in [&a.lock, &a.insert, &a.fast_claim, &a.get, &a.list, &a.gc] {
            assert!(text.contains("\"svc_a\".records"), "{text}");
        }
        assert!(a.now_and_fence.contains("nextval('\"svc_a\".fence_seq')"));
        assert_eq!(a.update.matches('$').count(), 22);
    }

    #[test]
    fn advisory_keys_differ_by_schema() {
        assert_ne!(advisory_key("idem"), advisory_key("idem2"));
        assert_eq!(advisory_key("idem"), advisory_key("idem"));
    }
}
