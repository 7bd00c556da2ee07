//! The registry port beneath [`crate::PolicyRegistry`].

use async_trait::async_trait;

use crate::machine::Change;
use crate::vocabulary::Registration;
use crate::vocabulary::StoreError;

/// How a backend keeps registrations, components and store-wide settings.
/// [`crate::PolicyRegistry`] is implemented once for every
/// `RegistryBackend` (`execute/policy_registry.rs`), which decides each
/// change (`machine/activation.rs`) before the backend saves it.
#[async_trait]
pub trait RegistryBackend: Send + Sync + 'static {
    /// The registration of `namespace` (every one when `None`), by
    /// namespace.
    async fn read_registrations(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<Registration>, StoreError>;

    /// Changes the registration of `namespace` atomically: `change` sees the
    /// current one (or none) and the store clock, and returns the next; a
    /// refusal writes nothing. `component`, when given (digest, bytes), is
    /// kept in the same transaction (kept once per digest).
    async fn update_registration(
        &self,
        namespace: &str,
        component: Option<(String, Vec<u8>)>,
        change: Change,
    ) -> Result<Registration, StoreError>;

    /// The component bytes kept under `digest`.
    async fn read_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// A store-wide setting's value.
    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError>;

    /// Sets a store-wide setting.
    async fn write_setting(&self, name: &str, value: &str) -> Result<(), StoreError>;
}
