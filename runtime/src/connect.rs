//! Connecting to NATS, with errors that say what to do.

use std::sync::Mutex;
use std::time::Duration;

use crate::auth::Credentials;
use crate::error::Error;

/// The last permission violation the server reported on any connection of this process.
/// A denied publish is not answered (a JetStream write then times out), so the CLI looks
/// here to say "permission denied" instead of "timed out".
static LAST_DENIAL: Mutex<Option<String>> = Mutex::new(None);

/// The last permission violation reported, if any.
pub fn last_denial() -> Option<String> {
    LAST_DENIAL.lock().ok()?.clone()
}

/// Connects to `url` (comma-separated servers) as the identity in `creds`: a `.creds`
/// file or an nkey seed file (`cronrun auth init`); none for a server without auth.
pub async fn connect(url: &str, creds: Option<&str>, name: &str) -> Result<async_nats::Client, Error> {
    let mut opts = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(Duration::from_secs(5))
        .request_timeout(Some(Duration::from_secs(10)))
        .event_callback(|event| async move {
            match &event {
                async_nats::Event::Disconnected => tracing::warn!("NATS connection lost; reconnecting"),
                async_nats::Event::Connected => tracing::info!("NATS connected"),
                _ => {}
            }
            if let async_nats::Event::ServerError(e) = event {
                let text = e.to_string();
                if text.to_ascii_lowercase().contains("permission") {
                    tracing::warn!(error = %text, "NATS refused an operation: this identity lacks the permission");
                    if let Ok(mut slot) = LAST_DENIAL.lock() {
                        *slot = Some(text);
                    }
                } else {
                    tracing::warn!(error = %text, "NATS server error");
                }
            }
        });
    match creds.map(Credentials::load).transpose()? {
        None => {}
        Some(Credentials::CredsFile(path)) => {
            opts = opts.credentials_file(&path).await.map_err(|e| {
                Error::invalid("creds", format!("cannot read NATS credentials {}: {e}", path.display()))
            })?;
        }
        Some(Credentials::Nkey { seed, public_key }) => {
            // Replies come under a prefix only this identity may subscribe to.
            opts = opts.nkey(seed).custom_inbox_prefix(crate::model::roles::inbox_prefix(&public_key));
        }
    }
    // A comma-separated list: the client moves to the next server when one is lost.
    let servers =
        url.split(',').map(|u| u.trim().parse::<async_nats::ServerAddr>()).collect::<Result<Vec<_>, _>>().map_err(
            |e| {
                Error::invalid("nats", format!("--nats {url:?}: {e}; give URLs like nats://host:4222, comma-separated"))
            },
        )?;
    opts.connect(servers).await.map_err(|e| {
        let text = e.to_string();
        let hint = if text.contains("maximum control line exceeded") {
            "the identity's JWT is longer than the server takes in a CONNECT: set `max_control_line: 64KB` in nats-server.conf (docs/deploy.md)".to_string()
        } else if text.contains("authorization") || text.contains("authentication") {
            match creds {
                None => "the server requires credentials: pass --creds FILE (an identity from `cronrun auth init`, or admin.nk in `cronrun up`'s data directory)".to_string(),
                Some(path) => format!("the server does not accept the identity in {path}"),
            }
        } else {
            "start one with `cronrun up` or pass --nats URL".to_string()
        };
        Error::nats_msg(&format!("cannot reach NATS at {url}"), format!("{e}; {hint}")).with_source(e)
    })
}
