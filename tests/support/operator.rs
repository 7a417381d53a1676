//! A nats-server in operator mode (decentralized authentication, as `nsc` sets it up): an
//! operator, one account with JetStream, and a user JWT per cronrun role in a `.creds`
//! file, with the allow-lists `cronrun auth permissions ROLE` prints.

use base64::Engine;
use cronrun::embedded::{EmbeddedNats, ServerOptions};
use nkeys::KeyPair;
use serde_json::{Value, json};

use super::{BIN, Nats, test_dir};

impl Nats {
    /// The server and `<dir>/ids/<role>.creds` for admin, viewer, scheduler and runner,
    /// plus `test.creds`, a user without limits for what tests read. `max_control_line`
    /// (e.g. `64KB`) must hold the longest JWT for its identity to connect.
    pub async fn with_operator(max_control_line: &str) -> Nats {
        let dir = test_dir();
        let ids = dir.path().join("ids");
        std::fs::create_dir_all(&ids).unwrap();
        let operator = KeyPair::new_operator();
        let account = KeyPair::new_account();
        let operator_jwt = jwt(&operator, &operator.public_key(), "test-operator", json!({ "type": "operator" }));
        let unlimited = json!({ "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
            "wildcards": true, "conn": -1, "leaf": -1, "mem_storage": -1, "disk_storage": -1,
            "streams": -1, "consumer": -1 });
        let account_jwt =
            jwt(&operator, &account.public_key(), "CRONRUN", json!({ "type": "account", "limits": unlimited }));
        // JetStream needs a system account. A user JWT with a role's allow-lists is some
        // 5 to 10 KB, past the 4 KB of a CONNECT line nats-server takes by default.
        let system = KeyPair::new_account();
        let system_jwt = jwt(&operator, &system.public_key(), "SYS", json!({ "type": "account" }));
        for role in ["admin", "viewer", "scheduler", "runner"] {
            let out = std::process::Command::new(BIN).args(["auth", "permissions", role]).output().unwrap();
            let p: Value = serde_json::from_slice(&out.stdout).expect("auth permissions prints JSON");
            let claims = json!({ "type": "user", "pub": p["publish"], "sub": p["subscribe"],
                "subs": -1, "data": -1, "payload": -1 });
            write_creds(&ids.join(format!("{role}.creds")), &account, role, claims);
        }
        let test = json!({ "type": "user", "subs": -1, "data": -1, "payload": -1 });
        write_creds(&ids.join("test.creds"), &account, "test", test);
        let options = ServerOptions {
            extra_config: format!(
                "max_control_line: {max_control_line}\noperator: {operator_jwt:?}\nsystem_account: {system}\nresolver: MEMORY\n\
                 resolver_preload: {{\n  {account}: {account_jwt:?}\n  {system}: {system_jwt:?}\n}}\n",
                account = account.public_key(),
                system = system.public_key(),
            ),
            probe_creds: Some(ids.join("test.creds").to_string_lossy().into_owned()),
            ..ServerOptions::default()
        };
        let server = EmbeddedNats::start(dir.path(), &options).await.unwrap();
        Nats { url: server.url.clone(), server: Some(server), dir }
    }
}

/// A JWT of `issuer` about `subject`, its `nats` claims version 2, as nats-io/jwt signs it.
fn jwt(issuer: &KeyPair, subject: &str, name: &str, mut nats: Value) -> String {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    nats["version"] = json!(2);
    let iat = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({ "jti": format!("{subject}{iat}"), "iat": iat, "iss": issuer.public_key(),
        "name": name, "sub": subject, "nats": nats });
    let head = b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let input = format!("{head}.{}", b64(claims.to_string().as_bytes()));
    let signature = issuer.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", b64(&signature))
}

/// A `.creds` file (0600) of a new user of `account` named `name` with `claims`.
fn write_creds(path: &std::path::Path, account: &KeyPair, name: &str, claims: Value) {
    let user = KeyPair::new_user();
    let jwt = jwt(account, &user.public_key(), name, claims);
    let text = format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        user.seed().unwrap()
    );
    cronrun::private_file::write(path, &text).unwrap();
}
