//! Wasm components in the `cronrun_plugins` object store, named by content:
//! `sha256-<hex>` of their bytes. A name never changes meaning, so a stored object is
//! never rewritten, and a fetched one is checked against its name.

use async_nats::jetstream::object_store::{InfoErrorKind, ObjectStore};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::Store;
use crate::error::Error;

/// Largest component accepted (the object store chunks it; this bounds memory).
pub const MAX_PLUGIN_BYTES: usize = 64 << 20;

/// `sha256-<64 hex digits>` of `bytes`: the plugin's name and the spec's `wasm.plugin`.
pub fn plugin_digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256-{hex}")
}

impl Store {
    async fn plugins(&self) -> Result<ObjectStore, Error> {
        let name = self.names.plugins_store();
        self.js.get_object_store(&name).await.map_err(|e| Error::nats(&format!("opening object store {name}"), e))
    }

    /// Whether a plugin of this digest is stored.
    pub async fn has_plugin(&self, digest: &str) -> Result<bool, Error> {
        match self.plugins().await?.info(digest).await {
            Ok(info) => Ok(!info.deleted),
            Err(e) if e.kind() == InfoErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::nats(&format!("looking up plugin {digest}"), e)),
        }
    }

    /// Stores `bytes` under their digest unless already there; returns the digest and
    /// whether it was written now.
    pub async fn put_plugin(&self, bytes: &[u8]) -> Result<(String, bool), Error> {
        let digest = plugin_digest(bytes);
        if self.has_plugin(&digest).await? {
            return Ok((digest, false));
        }
        let mut reader = bytes;
        self.plugins()
            .await?
            .put(digest.as_str(), &mut reader)
            .await
            .map_err(|e| Error::nats(&format!("storing plugin {digest}"), e))?;
        Ok((digest, true))
    }

    /// The bytes of plugin `digest`, checked against the digest.
    pub async fn get_plugin(&self, digest: &str) -> Result<Vec<u8>, Error> {
        if !self.has_plugin(digest).await? {
            return Err(Error::not_found(format!(
                "plugin {digest} is not in {}; deploy it with `cronrun deploy FILE.wasm`",
                self.names.plugins_store()
            )));
        }
        let mut object = self
            .plugins()
            .await?
            .get(digest)
            .await
            .map_err(|e| Error::nats(&format!("fetching plugin {digest}"), e))?;
        let mut bytes = Vec::new();
        (&mut object)
            .take(MAX_PLUGIN_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| Error::nats(&format!("reading plugin {digest}"), e))?;
        if bytes.len() > MAX_PLUGIN_BYTES {
            return Err(Error::invalid(
                "wasm.plugin",
                format!("plugin {digest} is larger than {MAX_PLUGIN_BYTES} bytes"),
            ));
        }
        let actual = plugin_digest(&bytes);
        if actual != digest {
            return Err(Error::invalid(
                "wasm.plugin",
                format!("plugin {digest} is corrupt: its bytes hash to {actual}"),
            ));
        }
        Ok(bytes)
    }
}

#[async_trait::async_trait]
impl crate::wasm::Plugins for Store {
    async fn fetch(&self, digest: &str) -> Result<Vec<u8>, Error> {
        self.get_plugin(digest).await
    }
}

impl Store {
    /// The Wasm host of an agent on this connection: guests' KV and publish through it,
    /// plugins from its object store.
    pub fn wasm_host(&self, config: crate::wasm::WasmConfig) -> Result<crate::wasm::WasmRuntime, Error> {
        let nats =
            crate::wasm::HostNats { client: self.client.clone(), js: self.js.clone(), names: self.names.clone() };
        crate::wasm::WasmRuntime::new(nats, std::sync::Arc::new(self.clone()), config)
    }
}
