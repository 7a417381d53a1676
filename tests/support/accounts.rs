//! Deployments in NATS accounts of their own on one server, each with the identities and
//! the account block `cronrun auth init --account` writes.

use cronrun::embedded::{EmbeddedNats, ServerOptions};

use super::{BIN, Nats, test_dir};

impl Nats {
    /// One server and a deployment per `(account, auth init flags)`, the account included
    /// inside `accounts { }` as `auth init` says to. The first deployment holds the server;
    /// each has its identities under `<dir>/ids`, as `Nats::start`'s have.
    pub async fn in_accounts(accounts: &[(&str, &[&str])]) -> Vec<Nats> {
        let dirs: Vec<tempfile::TempDir> = accounts.iter().map(|_| test_dir()).collect();
        let mut includes = String::new();
        for ((name, flags), dir) in accounts.iter().zip(&dirs) {
            let ids = dir.path().join("ids");
            let out = std::process::Command::new(BIN)
                .args(["auth", "init", "--dir"])
                .arg(&ids)
                .args(["--account", name])
                .args(*flags)
                .output()
                .unwrap();
            assert!(out.status.success(), "auth init: {}", String::from_utf8_lossy(&out.stderr));
            // Included by a path relative to the server's config, in the first directory.
            let relative = format!("../{}/ids/account.conf", dir.path().file_name().unwrap().to_string_lossy());
            includes.push_str(&format!("  include {relative:?}\n"));
        }
        let options = ServerOptions {
            extra_config: format!("accounts {{\n{includes}}}\n"),
            probe_creds: Some(dirs[0].path().join("ids/admin.nk").to_string_lossy().into_owned()),
            ..ServerOptions::default()
        };
        let server = EmbeddedNats::start(dirs[0].path(), &options).await.unwrap();
        let url = server.url.clone();
        let mut server = Some(server);
        dirs.into_iter().map(|dir| Nats { server: server.take(), url: url.clone(), dir }).collect()
    }
}
