//! Builds the example plugins with plugins/build.sh and checks each .wasm the way the
//! host will load it: a valid component exporting only `run`, importing only
//! cronrun:job and wasi 0.2 interfaces, and carrying a `cronrun-manifest` section whose
//! schedule is the one written in the plugin's `#[job(schedule = ...)]`.

use cronrun_plugin_check::{Inspection, check, inspect};
use std::path::{Path, PathBuf};
use std::process::Command;

fn plugins_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins")
}

/// Runs build.sh and returns the .wasm paths it printed.
fn build_plugins() -> Vec<PathBuf> {
    let out = Command::new("bash")
        .arg(plugins_dir().join("build.sh"))
        // build.sh picks the repository's target/; an outer CARGO_TARGET_DIR could be the
        // very directory this test run holds locked.
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("run plugins/build.sh");
    assert!(out.status.success(), "plugins/build.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(PathBuf::from).collect()
}

/// The `schedule = "..."` written in the plugin's source.
fn schedule_in_source(wasm: &Path) -> String {
    let crate_dir = wasm.file_stem().unwrap().to_str().unwrap().replace('_', "-");
    let source = std::fs::read_to_string(plugins_dir().join(crate_dir).join("src/lib.rs")).unwrap();
    let start = source.find("schedule = \"").expect("a schedule in the source") + "schedule = \"".len();
    let len = source[start..].find('"').unwrap();
    source[start..start + len].to_string()
}

#[test]
fn every_plugin_is_a_runnable_component_with_its_manifest() {
    let wasms = build_plugins();
    let names: Vec<_> = wasms.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for expected in ["hello.wasm", "emit_event.wasm", "health_check.wasm"] {
        assert!(names.iter().any(|n| n == expected), "{expected} not built: {names:?}");
    }
    for wasm in &wasms {
        let bytes = std::fs::read(wasm).unwrap();
        let found = inspect(&bytes).unwrap_or_else(|e| panic!("{}: {e}", wasm.display()));
        let schedule = check(&found).unwrap_or_else(|e| panic!("{}: {e}", wasm.display()));
        assert_eq!(schedule, Some(schedule_in_source(wasm)), "{}", wasm.display());
        let has = |name: &str| found.imports.iter().any(|i| i == name);
        assert!(has("cronrun:job/log@0.1.0"), "{}: {:?}", wasm.display(), found.imports);
        println!(
            "{}: {} bytes, {} imports, manifest {}",
            wasm.display(),
            bytes.len(),
            found.imports.len(),
            found.manifest.unwrap()
        );
    }
    // What each example uses shows up as imports, and nothing it does not use.
    let imports = |file: &str| {
        let path = wasms.iter().find(|p| p.ends_with(file)).unwrap();
        inspect(&std::fs::read(path).unwrap()).unwrap().imports
    };
    assert!(imports("emit_event.wasm").iter().any(|i| i == "cronrun:job/nats@0.1.0"));
    let health = imports("health_check.wasm");
    assert!(health.iter().any(|i| i == "wasi:http/outgoing-handler@0.2.12"), "{health:?}");
    assert!(health.iter().any(|i| i == "cronrun:job/kv@0.1.0"), "{health:?}");
    assert!(!imports("hello.wasm").iter().any(|i| i.starts_with("wasi:http/")));
    // Only a guest that reads its input imports `input`: the others run on older runners.
    assert!(imports("hello.wasm").iter().any(|i| i == "cronrun:job/input@0.1.0"));
    assert!(!imports("emit_event.wasm").iter().any(|i| i == "cronrun:job/input@0.1.0"));
}

/// A job started only by a trigger carries no schedule; one with neither is refused.
#[test]
fn a_manifest_needs_a_schedule_or_a_trigger() {
    let with = |manifest: &str| Inspection {
        is_component: true,
        exports: vec!["func run".into()],
        manifest: Some(manifest.into()),
        ..Inspection::default()
    };
    assert_eq!(check(&with(r#"{"schedule":"@daily"}"#)), Ok(Some("@daily".into())));
    assert_eq!(check(&with(r#"{"on":{"subject":"a.b"}}"#)), Ok(None));
    assert_eq!(check(&with(r#"{"after":[{"job":"x"}]}"#)), Ok(None));
    assert!(check(&with(r#"{"timeout":"1s"}"#)).unwrap_err().contains("nor a trigger"));
    assert!(check(&with(r#"{"schedule":1}"#)).unwrap_err().contains("no schedule string"));
}

#[test]
fn a_core_module_is_refused() {
    // The smallest core module: magic and version.
    let found = inspect(b"\0asm\x01\0\0\0").unwrap();
    assert!(!found.is_component);
    assert!(check(&found).unwrap_err().contains("not a component"));
}
