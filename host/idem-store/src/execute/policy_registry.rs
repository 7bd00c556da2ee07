//! [`PolicyRegistry`] for every backend: each change decided
//! (`machine/activation.rs`), then saved by the backend in one transaction.

use async_trait::async_trait;

use crate::backend::RegistryBackend;
use crate::port::PolicyRegistry;
use crate::vocabulary::StoreError;
use crate::vocabulary::{Activation, Registration, Rollback};

/// The store-wide setting behind [`PolicyRegistry::requires_registration`].
const REQUIRE_REGISTRATION: &str = "require-registration";

#[async_trait]
impl<B: RegistryBackend> PolicyRegistry for B {
    async fn registration(&self, namespace: &str) -> Result<Option<Registration>, StoreError> {
        Ok(self.read_registrations(Some(namespace)).await?.pop())
    }

    async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        self.read_registrations(None).await
    }

    async fn activate_policy(&self, request: Activation) -> Result<Registration, StoreError> {
        let change = crate::machine::activate(&request)?;
        let component = Some((request.digest.clone(), request.component));
        self.update_registration(&request.namespace, component, change)
            .await
    }

    async fn rollback_policy(&self, request: Rollback) -> Result<Registration, StoreError> {
        let change = crate::machine::rollback(&request)?;
        self.update_registration(&request.namespace, None, change)
            .await
    }

    async fn policy_component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read_component(digest).await
    }

    async fn requires_registration(&self) -> Result<bool, StoreError> {
        Ok(self.read_setting(REQUIRE_REGISTRATION).await?.as_deref() == Some("on"))
    }

    async fn set_require_registration(&self, on: bool) -> Result<(), StoreError> {
        self.write_setting(REQUIRE_REGISTRATION, if on { "on" } else { "off" })
            .await
    }
}
