//! NATS identities (nkeys) per role and the nats-server `authorization` block that gives
//! each its permissions (docs/security.md).
//!
//! An identity is an nkey seed in a file of its own, `<dir>/<name>.nk`, mode 0600: the
//! server holds only public keys, and a client proves its identity by signing the
//! server's nonce, so the seed never crosses the network. The permissions come from
//! `Names::permissions`, so the subjects the server allows are the subjects the code uses.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::error::{Error, ErrorKind};
use crate::model::roles::{Permissions, Role, inbox_prefix};
use crate::names::Names;

/// The identities `cronrun auth init` and `cronrun up` create, with the roles each holds.
/// `agent` is for a host that runs both scheduler and runner.
pub const IDENTITIES: [(&str, &[Role]); 5] = [
    ("admin", &[Role::Admin]),
    ("viewer", &[Role::Viewer]),
    ("scheduler", &[Role::Scheduler]),
    ("runner", &[Role::Runner]),
    ("agent", &[Role::Scheduler, Role::Runner]),
];

/// The identity that publishes the subjects given to `auth init --publish` (the messages
/// that start jobs with `on`): no cronrun role, only those subjects and its own inbox.
pub const PUBLISHER: &str = "publisher";

/// The route user of a cluster's `cluster { authorization { } }`.
pub const ROUTE_USER: &str = "cronrun-route";

/// A directory of identity files.
pub struct Identities {
    pub dir: PathBuf,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::new(ErrorKind::Other, format!("{what}: {e}"))
}

impl Identities {
    /// Creates the directory (0700) and every identity file that is missing; existing
    /// files are kept, so running it again changes nothing that clients already use.
    pub fn ensure(dir: &Path) -> Result<Identities, Error> {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io(format!("restricting {} to its owner", dir.display())))?;
        let ids = Identities { dir: dir.to_path_buf() };
        for name in IDENTITIES.iter().map(|(name, _)| *name).chain([PUBLISHER]) {
            let path = ids.path(name);
            if path.exists() {
                continue;
            }
            let seed = nkeys::KeyPair::new_user()
                .seed()
                .map_err(|e| Error::new(ErrorKind::Other, format!("generating identity {name}: {e}")))?;
            crate::private_file::write(&path, &format!("{seed}\n"))?;
        }
        Ok(ids)
    }

    /// `<dir>/<name>.nk`
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.nk"))
    }

    /// The public key of identity `name`.
    pub fn public_key(&self, name: &str) -> Result<String, Error> {
        let seed = read_seed(&self.path(name))?;
        Ok(keypair(&seed, &self.path(name))?.public_key())
    }

    /// nats-server's `authorization` block for every identity (see `users`). JSON is valid
    /// nats-server config.
    pub fn authorization(
        &self,
        names: &Names,
        guest_publish: &[String],
        publish: &[String],
        extra_users: &[serde_json::Value],
    ) -> Result<String, Error> {
        let block = json!({ "users": self.users(names, guest_publish, publish, extra_users)? });
        Ok(format!(
            "# Written by cronrun auth init: one nkey user per identity file beside it.\nauthorization {}\n",
            pretty(&block)?
        ))
    }

    /// An account of its own for the identities (`auth init --account`): the entry to
    /// include inside nats-server's `accounts { }`, with the account's JetStream limits and
    /// the same users as `authorization`. Accounts share no subject, stream or bucket, so
    /// deployments in two accounts cannot see each other whatever their namespaces.
    pub fn account(
        &self,
        account: &Account,
        names: &Names,
        guest_publish: &[String],
        publish: &[String],
        extra_users: &[serde_json::Value],
    ) -> Result<String, Error> {
        let block = json!({
            "jetstream": { "max_file": account.max_file, "max_mem": account.max_mem },
            "users": self.users(names, guest_publish, publish, extra_users)?,
        });
        Ok(format!(
            "# Written by cronrun auth init: include inside accounts {{ }}; one nkey user per identity file beside it.\n{:?}: {}\n",
            account.name,
            pretty(&block)?
        ))
    }

    /// A user per identity, the publisher with `publish` (left out when there is none: an
    /// empty allow list would allow all), plus `extra_users` (already JSON objects, e.g. a
    /// test's unrestricted user).
    fn users(
        &self,
        names: &Names,
        guest_publish: &[String],
        publish: &[String],
        extra_users: &[serde_json::Value],
    ) -> Result<Vec<serde_json::Value>, Error> {
        let mut users = Vec::new();
        for (name, roles) in IDENTITIES {
            let public_key = self.public_key(name)?;
            let p = identity_permissions(names, roles, &inbox_prefix(&public_key), guest_publish);
            users.push(json!({ "nkey": public_key, "permissions": server_permissions(&p) }));
        }
        if !publish.is_empty() {
            let public_key = self.public_key(PUBLISHER)?;
            let p = Permissions {
                publish: publish.to_vec(),
                subscribe: vec![format!("{}.>", inbox_prefix(&public_key))],
                publish_deny: Vec::new(),
            };
            users.push(json!({ "nkey": public_key, "permissions": server_permissions(&p) }));
        }
        users.extend(extra_users.iter().cloned());
        Ok(users)
    }
}

/// A NATS account of a deployment's own (`cronrun auth init --account`).
pub struct Account {
    /// `A-Z a-z 0-9 _ -`: a name nats-server's config takes as it is.
    pub name: String,
    /// The account's JetStream file storage, in bytes.
    pub max_file: u64,
    /// The account's JetStream memory storage, in bytes (cronrun stores nothing in memory).
    pub max_mem: u64,
}

fn pretty(block: &serde_json::Value) -> Result<String, Error> {
    serde_json::to_string_pretty(block)
        .map_err(|e| Error::new(ErrorKind::Other, format!("writing the server's users: {e}")))
}

/// The permissions of an identity holding `roles` (their union), replies under `inbox`.
pub fn identity_permissions(names: &Names, roles: &[Role], inbox: &str, guest_publish: &[String]) -> Permissions {
    let all = roles.iter().map(|&role| names.permissions(role, inbox, guest_publish));
    // Reduced, not folded from an empty set: the union keeps what both sides deny.
    let union = all.reduce(Permissions::union).unwrap_or_default();
    // With a JetStream domain, the plain forms for clients of the hub and the domain's for
    // clients of its leaf nodes: one authorization for both (docs/deploy.md, "Leaf nodes").
    union.with_domain_forms(names.js_api())
}

/// `permissions` in nats-server's form.
pub fn server_permissions(p: &Permissions) -> serde_json::Value {
    let mut publish = json!({ "allow": p.publish });
    if !p.publish_deny.is_empty() {
        publish["deny"] = json!(p.publish_deny);
    }
    json!({ "publish": publish, "subscribe": { "allow": p.subscribe } })
}

/// Reads an nkey seed file, refusing one that others can read: a seed is a password.
pub fn read_seed(path: &Path) -> Result<String, Error> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| Error::invalid("creds", format!("cannot read {shown}: {e}")))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Error::invalid(
            "creds",
            format!("{shown} is readable by others (mode {mode:o}): a seed is a secret; run `chmod 600 {shown}`"),
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::invalid("creds", format!("cannot read {shown}: {e}")))?;
    Ok(text.trim().to_string())
}

fn keypair(seed: &str, path: &Path) -> Result<nkeys::KeyPair, Error> {
    nkeys::KeyPair::from_seed(seed).map_err(|e| {
        Error::invalid("creds", format!("{} does not hold an nkey user seed (SU...): {e}", path.display()))
    })
}

/// What a credentials file holds: a `.creds` file (JWT and seed, for operator mode) or a
/// bare nkey seed as `cronrun auth init` writes.
pub enum Credentials {
    CredsFile(PathBuf),
    Nkey { seed: String, public_key: String },
}

impl Credentials {
    pub fn load(path: &str) -> Result<Credentials, Error> {
        let p = Path::new(path);
        let text = read_seed(p)?;
        if text.contains("BEGIN NATS USER JWT") {
            return Ok(Credentials::CredsFile(p.to_path_buf()));
        }
        let public_key = keypair(&text, p)?.public_key();
        Ok(Credentials::Nkey { seed: text, public_key })
    }
}

/// Who a CLI command acts as, for the audit trail (spec history, events): the identity's
/// name and public key and the local user and host, e.g. `admin UABC… (root@build-1)`.
/// The name is a seed file's stem, or a `.creds` JWT's `name` claim. Written by the client,
/// so it tells honest operators apart; it does not prove who wrote (docs/security.md).
pub fn actor(creds: Option<&str>) -> String {
    let who = match creds.map(|path| (path, Credentials::load(path))) {
        None => "anonymous".to_string(),
        Some((path, Ok(Credentials::Nkey { public_key, .. }))) => {
            let name = Path::new(path).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            format!("{name} {public_key}")
        }
        Some((path, Ok(Credentials::CredsFile(_)))) => {
            jwt_subject(&std::fs::read_to_string(path).unwrap_or_default()).unwrap_or_else(|| path.to_string())
        }
        Some((path, Err(_))) => path.to_string(),
    };
    let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| "?".into());
    format!("{who} ({user}@{})", crate::config::default_name())
}

/// `name sub` of the user JWT in a `.creds` file.
fn jwt_subject(creds: &str) -> Option<String> {
    use base64::Engine;
    let jwt = creds.lines().skip_while(|l| !l.contains("BEGIN NATS USER JWT")).nth(1)?.trim();
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(jwt.split('.').nth(1)?).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&payload).ok()?;
    Some(format!("{} {}", claims["name"].as_str()?, claims["sub"].as_str()?))
}

/// Where `cronrun up` keeps its identities, under its data directory.
pub fn up_identities_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("identities")
}

/// The lines inside `cluster { }` that make routes authenticate: the route user with
/// `password`, and the routes to `host:port`s that carry it.
pub fn route_authorization(password: &str, routes: &[String]) -> String {
    let urls: Vec<String> =
        routes.iter().map(|route| format!("  \"nats-route://{ROUTE_USER}:{password}@{route}\"")).collect();
    format!(
        "authorization {{\n  user: {ROUTE_USER}\n  password: \"{password}\"\n}}\nroutes: [\n{}\n]\n",
        urls.join("\n")
    )
}

/// A random route password for a cluster's route authentication.
pub fn route_password() -> String {
    use rand::Rng;
    let bytes: [u8; 24] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_actor_names_the_identity_and_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let ids = Identities::ensure(&dir.path().join("ids")).unwrap();
        let admin = actor(Some(ids.path("admin").to_str().unwrap()));
        assert!(admin.starts_with(&format!("admin {} (", ids.public_key("admin").unwrap())), "{admin}");
        assert!(actor(None).starts_with("anonymous ("));
        // A .creds file: the JWT's name and subject (the payload is all that is read).
        let claims = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            br#"{"name":"ops-alice","sub":"UALICE"}"#,
        );
        let creds = format!("-----BEGIN NATS USER JWT-----\nhdr.{claims}.sig\n------END NATS USER JWT------\n");
        assert_eq!(jwt_subject(&creds).as_deref(), Some("ops-alice UALICE"));
        assert_eq!(jwt_subject("garbage"), None);
    }

    #[test]
    fn identities_are_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let ids = Identities::ensure(&dir.path().join("ids")).unwrap();
        let admin = ids.public_key("admin").unwrap();
        assert!(admin.starts_with('U'));
        let mode = std::fs::metadata(ids.path("admin")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = Identities::ensure(&ids.dir).unwrap();
        assert_eq!(again.public_key("admin").unwrap(), admin, "a second init keeps existing identities");
        let roles = IDENTITIES.iter().find(|(name, _)| *name == "agent").unwrap().1;
        let agent = identity_permissions(&Names::new("cronrun").unwrap(), roles, "_INBOX.U", &[]);
        assert!(agent.may_publish("$KV.cronrun_leases.shard.1") && agent.may_publish("$KV.cronrun_leases.run.j.r"));
        let viewer = identity_permissions(&Names::new("cronrun").unwrap(), &[Role::Viewer], "_INBOX.U", &[]);
        assert!(!viewer.may_publish("$JS.API.CONSUMER.DELETE.CRONRUN_EVENTS.notify"), "the viewer's denials are kept");
    }

    #[test]
    fn seeds_readable_by_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.nk");
        std::fs::write(&path, "SUAAAA\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Credentials::load(path.to_str().unwrap()).err().unwrap().to_string();
        assert!(err.contains("readable by others") && err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = Credentials::load(path.to_str().unwrap()).err().unwrap().to_string();
        assert!(err.contains("does not hold an nkey user seed"), "{err}");
    }
}
