//! [`PolicyRegistry`]: which policy each namespace runs.

use async_trait::async_trait;

use crate::vocabulary::StoreError;
use crate::vocabulary::{Activation, Registration, Rollback};

/// The policy registry: each namespace's active policy, the digests it
/// accepts claims from, its dual-read window and its history.
#[async_trait]
pub trait PolicyRegistry: Send + Sync + 'static {
    /// The registration of `namespace`. `None` when no policy was ever
    /// activated for it.
    async fn registration(&self, namespace: &str) -> Result<Option<Registration>, StoreError>;

    /// Every namespace's registration, by namespace.
    async fn registrations(&self) -> Result<Vec<Registration>, StoreError>;

    /// Makes `request.digest` the active policy of its namespace (and a
    /// registered one), keeping its component bytes and logging who, why
    /// and when (store clock) — conditional on `request.expected_active`
    /// still being the active digest ([`StoreError::RegistryMoved`]
    /// otherwise, nothing changed). Activating the active digest changes
    /// nothing. The caller runs the gate and the diff first: the store
    /// never looks inside a component.
    async fn activate_policy(&self, request: Activation) -> Result<Registration, StoreError>;

    /// Makes the version active before the current one active again,
    /// conditional on `request.expected_active`, logged; closes the
    /// dual-read window.
    async fn rollback_policy(&self, request: Rollback) -> Result<Registration, StoreError>;

    /// The component bytes an activation kept under `digest`.
    async fn policy_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Whether the store requires every namespace to be registered before
    /// anything claims in it (default: no — see
    /// [`PolicyRegistry::set_require_registration`]).
    async fn requires_registration(&self) -> Result<bool, StoreError>;

    /// Turns the requirement on or off for every process using the store.
    /// Off (the default), a namespace nobody registered works as before
    /// registries existed, so upgrading idem breaks no running job; a
    /// registered namespace is always enforced. On, a claim in an
    /// unregistered namespace is refused too: for a shared store where one
    /// team must not be able to start writing into a namespace first.
    async fn set_require_registration(&self, on: bool) -> Result<(), StoreError>;
}
