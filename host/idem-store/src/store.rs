//! [`Store`]: a store's capabilities together, as the engine holds it.

use std::sync::Arc;

use crate::backend::{GateBackend, OwnershipBackend, RecordBackend, RegistryBackend};
use crate::port::{Database, Gates, Ownership, PolicyRegistry, Records, Transactions, Writes};
use crate::vocabulary::StoreClock;
use crate::vocabulary::StoreError;

/// A record store: one implementation of each capability (see the `port`
/// docs), where it is, and the clock it decides leases by.
///
/// Cheap to clone (shared handles). A backend ([`crate::MemoryStore`],
/// `SqliteStore`, `PostgresStore`) becomes a `Store` with
/// [`Store::from_backend`]; a wrapper takes the place of the one capability
/// it changes ([`Store::with_writes`]). Callers name the capability they
/// use: `store.writes().claim(…)`, `store.records().get(…)`.
#[derive(Clone)]
pub struct Store(Arc<Capabilities>);

/// What a [`Store`] shares among its clones: one handle to clone, not six.
#[derive(Clone)]
struct Capabilities {
    name: String,
    clock: StoreClock,
    writes: Arc<dyn Writes>,
    records: Arc<dyn Records>,
    ownership: Arc<dyn Ownership>,
    registry: Arc<dyn PolicyRegistry>,
    transactions: Arc<dyn Transactions>,
    gates: Arc<dyn Gates>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("name", &self.0.name).finish()
    }
}

impl Store {
    /// A store whose every capability is `backend`'s. `name` says where it
    /// is, for messages (`sqlite:/var/lib/idem.db`); `clock` is the clock
    /// it decides leases by.
    pub fn from_backend<B>(name: impl Into<String>, clock: StoreClock, backend: Arc<B>) -> Self
    where
        B: Writes + Records + Ownership + PolicyRegistry + Transactions + Gates,
    {
        Store(Arc::new(Capabilities {
            name: name.into(),
            clock,
            writes: backend.clone(),
            records: backend.clone(),
            ownership: backend.clone(),
            registry: backend.clone(),
            transactions: backend.clone(),
            gates: backend,
        }))
    }

    /// The same store with its writes made by `writes` (a
    /// [`crate::GroupCommit`] over [`Store::writes_handle`]); every other
    /// capability unchanged.
    pub fn with_writes(&self, writes: Arc<dyn Writes>) -> Self {
        Store(Arc::new(Capabilities {
            writes,
            ..(*self.0).clone()
        }))
    }

    /// Where the store is, for messages (e.g. `sqlite:/var/lib/idem.db`).
    pub fn describe(&self) -> &str {
        &self.0.name
    }

    /// The clock this store decides leases by, as this process reads it (a
    /// database server's own clock stays the authority for leases; see
    /// [`StoreClock`]). The engine hands its reading to policies as their
    /// logical time, so that a simulation on a [`crate::ManualClock`] is
    /// deterministic down to what the policy sees.
    pub fn clock(&self) -> &StoreClock {
        &self.0.clock
    }

    /// Claims and ends ([`Writes`]).
    pub fn writes(&self) -> &dyn Writes {
        &*self.0.writes
    }

    /// The writes capability as a shared handle, for a wrapper to wrap.
    pub fn writes_handle(&self) -> Arc<dyn Writes> {
        self.0.writes.clone()
    }

    /// Take-overs, heartbeats, review, reads, gc and the attempt log
    /// ([`Records`]).
    pub fn records(&self) -> &dyn Records {
        &*self.0.records
    }

    /// Memberships, epochs and job leases ([`Ownership`]).
    pub fn ownership(&self) -> &dyn Ownership {
        &*self.0.ownership
    }

    /// The policy registry ([`PolicyRegistry`]).
    pub fn registry(&self) -> &dyn PolicyRegistry {
        &*self.0.registry
    }

    /// The database this store keeps its records in, for an effect whose
    /// writes commit with its end ([`Transactions`]); the in-memory store
    /// refuses ([`StoreError::NotTransactional`]). A wrapper of the writes
    /// ([`crate::GroupCommit`]) does not change it: an effect in the
    /// store's transaction completes in that transaction, beside the
    /// batcher.
    pub async fn database(&self) -> Result<Database, StoreError> {
        self.0.transactions.database().await
    }

    /// The gate a downstream keeps in front of its writes ([`Gates`]): a
    /// `(key, fence)` admitted once, a repeat replayed, a lower fence
    /// refused, in this store's tables.
    pub fn gates(&self) -> &dyn Gates {
        &*self.0.gates
    }

    /// The gate capability as a shared handle (for a layer that keeps it).
    pub fn gates_handle(&self) -> Arc<dyn Gates> {
        self.0.gates.clone()
    }
}

impl Store {
    /// A store over one of this crate's backends, named and clocked as the
    /// backend says.
    fn of_backend<B>(backend: Arc<B>) -> Self
    where
        B: RecordBackend + OwnershipBackend + RegistryBackend + Transactions + GateBackend,
    {
        let (name, clock) = (backend.name().to_string(), backend.options().clock.clone());
        Store::from_backend(name, clock, backend)
    }
}

/// `impl From<Backend> for Store` and `From<Arc<Backend>>`: a backend kept
/// by its own handle (to ask it what only it knows, such as a SQLite
/// file's schema version) can be a [`Store`] too.
macro_rules! store_from_backend {
    ($($(#[$cfg:meta])* $backend:ty),*) => {$(
        $(#[$cfg])*
        impl From<$backend> for Store {
            fn from(backend: $backend) -> Self {
                Store::of_backend(Arc::new(backend))
            }
        }

        $(#[$cfg])*
        impl From<Arc<$backend>> for Store {
            fn from(backend: Arc<$backend>) -> Self {
                Store::of_backend(backend)
            }
        }
    )*};
}

store_from_backend!(
    crate::MemoryStore,
    #[cfg(feature = "sqlite")]
    crate::SqliteStore,
    #[cfg(feature = "postgres")]
    crate::PostgresStore
);
