//! Connecting to NATS, with errors that say what to do.

use std::time::Duration;

use crate::error::Error;

pub async fn connect(url: &str, creds: Option<&str>, name: &str) -> Result<async_nats::Client, Error> {
    let mut opts = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(Duration::from_secs(5))
        .request_timeout(Some(Duration::from_secs(10)));
    if let Some(path) = creds {
        opts = opts
            .credentials_file(path)
            .await
            .map_err(|e| Error::invalid("creds", format!("cannot read NATS credentials {path}: {e}")))?;
    }
    // A comma-separated list: the client moves to the next server when one is lost.
    let servers =
        url.split(',').map(|u| u.trim().parse::<async_nats::ServerAddr>()).collect::<Result<Vec<_>, _>>().map_err(
            |e| {
                Error::invalid("nats", format!("--nats {url:?}: {e}; give URLs like nats://host:4222, comma-separated"))
            },
        )?;
    opts.connect(servers).await.map_err(|e| {
        Error::nats(
            &format!("cannot reach NATS at {url}"),
            format!("{e}; start one with `cronrun up` or pass --nats URL"),
        )
    })
}
