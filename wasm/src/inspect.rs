//! What `cronrun deploy` reads from a plugin before storing anything: that it is a
//! component (not a core module), and the `cronrun-manifest` custom section, which
//! `#[cronrun_sdk::job]` puts in the *core* module that wasm-component-ld nests inside
//! the component, hence the walk over every nested module (`Parser::parse_all`). Whether
//! it is a component of the `job` world is checked by linking (`WasmRuntime::link`).
//! [`with_manifest`] writes the section into a component built without the SDK (e.g.
//! Python): at the component's top level, where `inspect` finds it as well.

use wasmparser::{Encoding, Parser, Payload};

/// The custom section that `#[cronrun_sdk::job]` fills with the manifest JSON.
pub const MANIFEST_SECTION: &str = "cronrun-manifest";

/// Why a file is no component `cronrun deploy` takes, or has no usable manifest.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("not a WebAssembly file (no \\0asm header)")]
    NotWasm,
    #[error(
        "a core wasm module, not a component: build it for the job world (wit/job.wit), e.g. with --target wasm32-wasip2 and cronrun-sdk"
    )]
    CoreModule,
    #[error("unreadable wasm: {0}")]
    Unreadable(#[source] wasmparser::BinaryReaderError),
    #[error("more than one {MANIFEST_SECTION} section: use #[cronrun_sdk::job] once per plugin")]
    TwoManifests,
    #[error("{MANIFEST_SECTION} is not UTF-8")]
    NotUtf8(#[source] std::str::Utf8Error),
    #[error(
        "no {MANIFEST_SECTION} section: mark the job function with #[cronrun_sdk::job(schedule = \"...\")] \
             (Rust), or add one with `cronrun manifest FILE --schedule EXPR` (other languages)"
    )]
    NoManifest,
    #[error("{MANIFEST_SECTION} is not a JSON object: {text}")]
    NotAnObject { text: String },
    #[error("{MANIFEST_SECTION} is not JSON ({source}): {text}")]
    NotJson { text: String, source: serde_json::Error },
    #[error(
        "it has a {MANIFEST_SECTION} section already (from #[cronrun_sdk::job] or an earlier `cronrun manifest`): \
             start from the component as built"
    )]
    HasManifest,
    #[error("the manifest: {0}")]
    Encode(#[source] serde_json::Error),
}

/// What [`inspect`] found.
#[derive(Debug)]
pub struct Inspected {
    /// The manifest: a JSON object of job spec fields (schedule, timezone, timeout, ...).
    pub manifest: serde_json::Map<String, serde_json::Value>,
}

/// Checks that `wasm` is a component with exactly one valid manifest; returns it.
pub fn inspect(wasm: &[u8]) -> Result<Inspected, InspectError> {
    inspect_or_none(wasm)?.ok_or(InspectError::NoManifest)
}

/// Checks that `wasm` is a component with at most one valid manifest; returns it if any.
pub fn inspect_or_none(wasm: &[u8]) -> Result<Option<Inspected>, InspectError> {
    let Some(text) = manifest_text(wasm)? else { return Ok(None) };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(Inspected { manifest: map })),
        Ok(_) => Err(InspectError::NotAnObject { text }),
        Err(source) => Err(InspectError::NotJson { text, source }),
    }
}

/// `wasm`, a component without a manifest, with `manifest` (a JSON object) appended as
/// its `cronrun-manifest` section.
pub fn with_manifest(
    wasm: &[u8],
    manifest: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<u8>, InspectError> {
    use wasm_encoder::ComponentSection;
    if manifest_text(wasm)?.is_some() {
        return Err(InspectError::HasManifest);
    }
    let data = serde_json::to_vec(manifest).map_err(InspectError::Encode)?;
    let section = wasm_encoder::CustomSection { name: MANIFEST_SECTION.into(), data: data.into() };
    let mut out = wasm.to_vec();
    section.append_to_component(&mut out);
    Ok(out)
}

/// The text of the one manifest section of component `wasm`, if it has one.
fn manifest_text(wasm: &[u8]) -> Result<Option<String>, InspectError> {
    if !wasm.starts_with(b"\0asm") {
        return Err(InspectError::NotWasm);
    }
    let mut depth = 0usize;
    let mut manifest = None;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(InspectError::Unreadable)? {
            Payload::Version { encoding, .. } => {
                depth += 1;
                if depth == 1 && encoding != Encoding::Component {
                    return Err(InspectError::CoreModule);
                }
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::CustomSection(section) if section.name() == MANIFEST_SECTION => {
                if manifest.is_some() {
                    return Err(InspectError::TwoManifests);
                }
                let text = std::str::from_utf8(section.data()).map_err(InspectError::NotUtf8)?;
                manifest = Some(text.to_string());
            }
            _ => {}
        }
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_wasm_and_core_modules() {
        assert!(inspect(b"hello").unwrap_err().to_string().contains("not a WebAssembly file"));
        // The smallest core module: magic and version 1.
        let core = b"\0asm\x01\0\0\0";
        assert!(inspect(core).unwrap_err().to_string().contains("core wasm module"));
    }

    #[test]
    fn the_texts_are_one_line_each_as_deploy_prints_them() {
        let component = b"\0asm\x0d\0\x01\0";
        assert_eq!(
            inspect(component).unwrap_err().to_string(),
            "no cronrun-manifest section: mark the job function with #[cronrun_sdk::job(schedule = \"...\")] \
             (Rust), or add one with `cronrun manifest FILE --schedule EXPR` (other languages)"
        );
        assert_eq!(inspect(b"hello").unwrap_err().to_string(), "not a WebAssembly file (no \\0asm header)");
    }

    #[test]
    fn a_manifest_written_in_is_read_back_and_only_once() {
        // The smallest component: magic and the component layer's version.
        let component = b"\0asm\x0d\0\x01\0";
        assert!(inspect(component).unwrap_err().to_string().contains("cronrun manifest FILE --schedule"));
        let manifest = serde_json::json!({ "schedule": "*/5 * * * * *", "timeout": "10s" });
        let manifest = manifest.as_object().unwrap();
        let with = with_manifest(component, manifest).unwrap();
        assert_eq!(&inspect(&with).unwrap().manifest, manifest);
        assert!(with_manifest(&with, manifest).unwrap_err().to_string().contains("already"));
        assert!(with_manifest(b"\0asm\x01\0\0\0", manifest).unwrap_err().to_string().contains("core wasm module"));
    }
}
