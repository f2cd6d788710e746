//! Workflow attributes on a [`Client`]: replace, clear and merge, as DBOS's
//! `update_workflow_attributes`. The types and encoding are `crate::base::attributes`; the SQL is the
//! store's (`Manage::update_attributes`).

use crate::base::attributes::{encode, Attributes};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::sysdb::AttributesUpdate;

impl Client {
    /// Replaces the attributes of workflow `id` with `attributes`, or clears them (`None`).
    /// Fails with [`Error::NotFound`] when there is no such workflow.
    pub async fn update_workflow_attributes(
        &self,
        id: &str,
        attributes: Option<Attributes>,
    ) -> Result<()> {
        let value = attributes.as_ref().map(encode).transpose()?;
        self.change_attributes(id, AttributesUpdate::Replace(value))
            .await
    }

    /// Sets each top-level key of `attributes` on workflow `id`, keeping its other keys (a
    /// matching key's value is replaced whole, nested objects included; `null` is stored as
    /// JSON null), in one atomic write, as DBOS's `update_workflow_attributes(merge=True)`.
    /// Fails with [`Error::NotFound`] when there is no such workflow.
    pub async fn merge_workflow_attributes(&self, id: &str, attributes: Attributes) -> Result<()> {
        let value = encode(&attributes)?;
        self.change_attributes(id, AttributesUpdate::Merge(value))
            .await
    }

    async fn change_attributes(&self, id: &str, update: AttributesUpdate) -> Result<()> {
        let target = id.to_owned();
        let found = self
            .shared()
            .db
            .call_with((target, update), |db, (target, update)| async move {
                db.update_attributes(&target, &update).await
            })
            .await?;
        if found {
            Ok(())
        } else {
            Err(Error::NotFound(id.to_owned()))
        }
    }
}
