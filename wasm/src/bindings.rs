//! The one place the host's bindings of `wit/job.wit` (`cronrun:job@0.1.0`, world `job`)
//! are generated. Imports are async (kv and nats calls await NATS); `run` is called async
//! so that epoch interruption can yield and a timed-out or cancelled run ends.
//!
//! `wasi:*` interfaces are not part of the world (see wit/README.md); the linker gets them
//! from wasmtime-wasi and wasmtime-wasi-http.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "job",
    imports: { default: async },
    exports: { default: async },
});

pub use self::cronrun::job::types::{Level, Trigger};
