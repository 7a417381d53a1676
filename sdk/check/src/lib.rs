//! Reads what the host needs to know from a built cronrun plugin: whether it is a
//! component, its imports and exports, and the `cronrun-manifest` JSON.
//!
//! The manifest is a custom section of the *core* module that rustc links;
//! wasm-component-ld wraps that module into the component unchanged, so the section
//! sits inside a nested module, not at the component's top level. [`inspect`] walks
//! every nested module and component to find it.

use wasmparser::{ComponentExternalKind, ComponentTypeRef, Encoding, Parser, Payload, Validator};

/// The custom section that `#[cronrun_sdk::job]` fills with the manifest JSON.
pub const MANIFEST_SECTION: &str = "cronrun-manifest";

/// What [`inspect`] found.
#[derive(Debug, Default)]
pub struct Inspection {
    /// The top level is a component (not a core module).
    pub is_component: bool,
    /// Interfaces (instances) the component imports, e.g. `cronrun:job/log@0.1.0`,
    /// `wasi:io/streams@0.2.12`: what the host must link.
    pub imports: Vec<String>,
    /// Imports of other kinds, as `kind name`. A world that `use`s a type for its own
    /// functions (here `job-context` for `run`) imports that type at the top level;
    /// it is an alias of the interface's type, and needs nothing from the linker.
    pub other_imports: Vec<String>,
    /// Exports, as `kind name`, e.g. `func run`.
    pub exports: Vec<String>,
    /// The manifest JSON, if the section is present.
    pub manifest: Option<String>,
}

/// Validates `wasm` and lists its top-level imports and exports and its manifest.
pub fn inspect(wasm: &[u8]) -> Result<Inspection, String> {
    Validator::new().validate_all(wasm).map_err(|e| format!("invalid wasm: {e}"))?;
    let mut found = Inspection::default();
    // Nesting depth: 1 is the outermost module or component.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(|e| format!("unreadable wasm: {e}"))? {
            Payload::Version { encoding, .. } => {
                depth += 1;
                if depth == 1 {
                    found.is_component = encoding == Encoding::Component;
                }
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    let import = import.map_err(|e| e.to_string())?;
                    let name = import.name.full_name().into_owned();
                    match import.ty {
                        ComponentTypeRef::Instance(_) => found.imports.push(name),
                        ComponentTypeRef::Type(_) => found.other_imports.push(format!("type {name}")),
                        other => found.other_imports.push(format!("{other:?} {name}")),
                    }
                }
            }
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    let export = export.map_err(|e| e.to_string())?;
                    let kind = match export.kind {
                        ComponentExternalKind::Func => "func",
                        ComponentExternalKind::Instance => "instance",
                        ComponentExternalKind::Type => "type",
                        ComponentExternalKind::Component => "component",
                        ComponentExternalKind::Module => "module",
                        ComponentExternalKind::Value => "value",
                    };
                    found.exports.push(format!("{kind} {}", export.name.full_name()));
                }
            }
            Payload::CustomSection(section) if section.name() == MANIFEST_SECTION => {
                if found.manifest.is_some() {
                    return Err(format!("more than one {MANIFEST_SECTION} section: use #[job] once per plugin"));
                }
                let text =
                    std::str::from_utf8(section.data()).map_err(|_| format!("{MANIFEST_SECTION} is not UTF-8"))?;
                found.manifest = Some(text.to_string());
            }
            _ => {}
        }
    }
    Ok(found)
}

/// Why `found` is not a plugin the host can run, if it is not: a component exporting
/// only the function `run`, importing only `cronrun:job/*@0.1.0` and `wasi:*@0.2.*`
/// interfaces (and the `job-context` type), with a manifest whose JSON is an object with
/// a `schedule` string, or a trigger (`on`, `after`) instead. Returns that schedule.
pub fn check(found: &Inspection) -> Result<Option<String>, String> {
    if !found.is_component {
        return Err("a core module, not a component: build with --target wasm32-wasip2".to_string());
    }
    if found.exports != ["func run"] {
        return Err(format!("exports {:?}, expected only the function run", found.exports));
    }
    let allowed = |name: &str| {
        (name.starts_with("cronrun:job/") && name.ends_with("@0.1.0"))
            || (name.starts_with("wasi:") && name.contains("@0.2."))
    };
    if let Some(bad) = found.imports.iter().find(|name| !allowed(name)) {
        return Err(format!("imports {bad:?}, which the host does not provide"));
    }
    if let Some(bad) = found.other_imports.iter().find(|i| *i != "type job-context") {
        return Err(format!("imports {bad:?}, which the host does not provide"));
    }
    let text = found.manifest.as_deref().ok_or_else(|| format!("no {MANIFEST_SECTION} section"))?;
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("{MANIFEST_SECTION} is not JSON: {e}: {text}"))?;
    match json.get("schedule") {
        Some(serde_json::Value::String(schedule)) => Ok(Some(schedule.clone())),
        None if json.get("on").is_some() || json.get("after").is_some() => Ok(None),
        _ => Err(format!("{MANIFEST_SECTION} has no schedule string, nor a trigger (on, after): {text}")),
    }
}
