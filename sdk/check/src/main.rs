//! `cronrun-plugin-check FILE.wasm...`: prints each plugin's imports, exports and
//! manifest, and exits non-zero if one is not a plugin the host can run.

use cronrun_plugin_check::{check, inspect};
use std::process::ExitCode;

fn main() -> ExitCode {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        eprintln!("usage: cronrun-plugin-check FILE.wasm...");
        return ExitCode::from(2);
    }
    let mut failed = false;
    for file in &files {
        let result = std::fs::read(file)
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|bytes| inspect(&bytes).map(|found| (bytes.len(), found)));
        match result {
            Ok((size, found)) => {
                println!("{file}: {size} bytes, component: {}", found.is_component);
                println!("  exports: {}", found.exports.join(", "));
                for import in &found.imports {
                    println!("  import {import}");
                }
                for import in &found.other_imports {
                    println!("  import {import}");
                }
                println!("  manifest: {}", found.manifest.as_deref().unwrap_or("(none)"));
                if let Err(e) = check(&found) {
                    println!("  NOT RUNNABLE: {e}");
                    failed = true;
                }
            }
            Err(e) => {
                eprintln!("{file}: {e}");
                failed = true;
            }
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
