//! The nats-server configurations in deploy/, with the files `cronrun auth init` writes
//! for them, are configurations nats-server takes (`nats-server -t`).

use crate::support::*;

/// Each config in deploy/ and the `cronrun auth init` runs (`--dir` relative to it) that
/// write what it includes.
const CONFIGS: [(&str, &[&[&str]]); 5] = [
    ("nats-server.conf", &[&["--dir", "cronrun"]]),
    ("nats-cluster/n1.conf", &[CLUSTER]),
    ("nats-cluster/n2.conf", &[CLUSTER]),
    ("nats-cluster/n3.conf", &[CLUSTER]),
    (
        "accounts/nats-server.conf",
        &[
            &["--dir", "cronrun-prod", "--account", "CRONRUN_PROD", "--max-file", "16GiB"],
            &["--dir", "cronrun-staging", "--account", "CRONRUN_STAGING", "--max-file", "2GiB"],
        ],
    ),
];

const CLUSTER: &[&str] = &["--dir", "cronrun", "--routes", "nats-1:6222,nats-2:6222,nats-3:6222"];

#[test]
fn every_nats_config_in_deploy_is_taken_by_nats_server() {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    for (file, inits) in CONFIGS {
        let dir = test_dir();
        let root = dir.path().to_str().unwrap();
        for init in inits {
            let mut args = init.to_vec();
            let at = format!("{root}/{}", args[1]);
            args[1] = &at;
            let out = std::process::Command::new(BIN).args(["auth", "init"]).args(&args).output().unwrap();
            assert!(out.status.success(), "{file}: auth init {init:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let conf = std::fs::read_to_string(deploy.join(file)).unwrap();
        let path = dir.path().join("nats-server.conf");
        std::fs::write(&path, conf.replace("/var/lib/nats", root)).unwrap();
        let out = std::process::Command::new(cronrun::embedded::find_binary().unwrap())
            .args(["-t", "-c"])
            .arg(&path)
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "deploy/{file}: {said}");
    }
}
