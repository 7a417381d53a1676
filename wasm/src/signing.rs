//! Signed Wasm jobs. `cronrun deploy --sign KEY` signs, with an nkey (ed25519; `cronrun
//! auth keygen` makes one), the Wasm part of the spec a runner runs: the job's name, its
//! pool, the plugin's digest, its config, every grant and the signing time. It writes
//! `<public key>:<signature>` into `wasm.signature` and the time into `wasm.signed_at`.
//! A runner whose `[wasm] trusted_keys` lists keys runs only jobs whose signature is by one
//! of them over exactly what it is about to run: whoever can write job specs and the plugin
//! store, an admin identity misused, can neither make such a runner execute code the key
//! holders did not sign nor widen a signed job's grants, change its config or move it to
//! another pool. The digest binds the signature to the bytes: the runner checks a fetched
//! plugin against its digest before compiling it. Checked before anything is fetched or
//! compiled; a refusal fails the run with one line. Replays of an older signed spec are
//! refused by the runner from the signing time (see `runner/src/runner/exec/wasm.rs`).
//!
//! The signed bytes ([`signed_bytes`]) are compact JSON of one object with these members
//! in this order, strings escaped as serde_json does, nothing else (no spaces, no newline):
//!
//! ```text
//! {"format":"cronrun-wasm-signature/2","job":NAME,"pool":POOL,"plugin":"sha256-…",
//!  "config":{KEY:VALUE,…},"allow_publish":[…],"allow_http":[…],"allow_kv":BOOL,
//!  "signed_at":RFC3339}
//! ```
//!
//! `config` keys are sorted (byte order), so the order a file or the CLI gave them in does
//! not matter; the grant lists are signed in the order the spec holds them. A config value
//! that names a secret is signed as the spec holds it, `{"secret":"NAME"}`: the signature
//! covers which secret a key takes, not its value, which the spec never holds (whoever may
//! write secrets changes what the guest reads; docs/security.md). Signatures of
//! cronrun before this format covered the digest alone; they have no `signed_at` and are
//! refused by runners with trusted keys, asking for the job to be signed again.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cronrun_model::spec::WasmSpec;
use cronrun_model::spec::secret::Value;
use serde::Serialize;

/// Why a spec could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// Never a signature over nothing: an encoding that failed signs and verifies nothing.
    #[error("encoding what the signature of job {job} covers: {source}")]
    Encode { job: String, source: serde_json::Error },
    #[error("not an nkey seed: {0}")]
    Seed(#[source] nkeys::error::Error),
    #[error("signing job {job}: {source}")]
    Sign { job: String, source: nkeys::error::Error },
}

/// Why a runner with trusted keys refuses a spec's signature; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(
        "job {job} is not signed, and this runner runs only Wasm jobs signed by its [wasm] trusted_keys: \
         deploy it with `cronrun deploy --sign KEY`"
    )]
    NotSigned { job: String },
    #[error("job {job} is signed by {key}, which is not among this runner's [wasm] trusted_keys")]
    UntrustedKey { job: String, key: String },
    #[error(
        "job {job} has a signature without a signing time (an older cronrun's, over its plugin's digest \
         alone), which does not cover its grants, config and pool: sign it again with this version \
         (`cronrun deploy --sign KEY`)"
    )]
    NoSigningTime { job: String },
    #[error("the signature of job {job} is malformed")]
    Malformed { job: String, source: base64::DecodeError },
    #[error(transparent)]
    Encode(#[from] SignError),
    #[error(
        "the signature of job {job} by {key} does not cover this spec: its plugin, grants, config, pool or \
                 signing time differ from what was signed; sign it again with `cronrun deploy --sign KEY`"
    )]
    Mismatch { job: String, key: String, source: nkeys::error::Error },
}

/// An entry of `[wasm] trusted_keys` that is not an nkey public key.
#[derive(Debug, thiserror::Error)]
#[error("{key:?} is not an nkey public key (as `cronrun auth keygen` prints)")]
pub struct NotAPublicKey {
    pub key: String,
    source: nkeys::error::Error,
}

/// Names the layout of the signed bytes; a change to it is a new format.
pub const FORMAT: &str = "cronrun-wasm-signature/2";

/// What is signed, in the order it is encoded.
#[derive(Serialize)]
struct Signed<'a> {
    format: &'static str,
    job: &'a str,
    pool: &'a str,
    plugin: &'a str,
    config: &'a BTreeMap<String, Value>,
    allow_publish: &'a [String],
    allow_http: &'a [String],
    allow_kv: bool,
    signed_at: &'a str,
}

/// The bytes a signature of job `job` in pool `pool` with Wasm part `wasm`, signed at
/// `signed_at`, covers (see the module's documentation).
pub fn signed_bytes(job: &str, pool: &str, wasm: &WasmSpec, signed_at: &str) -> Result<Vec<u8>, SignError> {
    let signed = Signed {
        format: FORMAT,
        job,
        pool,
        plugin: &wasm.plugin,
        config: &wasm.config,
        allow_publish: &wasm.allow_publish,
        allow_http: &wasm.allow_http,
        allow_kv: wasm.allow_kv,
        signed_at,
    };
    serde_json::to_vec(&signed).map_err(|source| SignError::Encode { job: job.to_string(), source })
}

/// The `wasm.signature` by the nkey `seed` of job `job` in pool `pool` with Wasm part
/// `wasm`, signed at `signed_at` (which goes into `wasm.signed_at`).
pub fn sign(seed: &str, job: &str, pool: &str, wasm: &WasmSpec, signed_at: &str) -> Result<String, SignError> {
    let key = nkeys::KeyPair::from_seed(seed).map_err(SignError::Seed)?;
    let bytes = signed_bytes(job, pool, wasm, signed_at)?;
    let signature = key.sign(&bytes).map_err(|source| SignError::Sign { job: job.to_string(), source })?;
    Ok(format!("{}:{}", key.public_key(), URL_SAFE_NO_PAD.encode(signature)))
}

/// Ok when `trusted` is empty (signatures not required), or the spec's signature is by one
/// of the `trusted` public keys over exactly this job, pool and Wasm part. The error is one
/// line saying what is wrong.
pub fn verify(job: &str, pool: &str, wasm: &WasmSpec, trusted: &[String]) -> Result<(), VerifyError> {
    if trusted.is_empty() {
        return Ok(());
    }
    let job_name = || job.to_string();
    let Some(signature) = wasm.signature.as_deref() else {
        return Err(VerifyError::NotSigned { job: job_name() });
    };
    let (key, sig) = signature.split_once(':').unwrap_or((signature, ""));
    if !trusted.iter().any(|t| t == key) {
        return Err(VerifyError::UntrustedKey { job: job_name(), key: key.to_string() });
    }
    let Some(signed_at) = wasm.signed_at.as_deref() else {
        return Err(VerifyError::NoSigningTime { job: job_name() });
    };
    let bytes = URL_SAFE_NO_PAD.decode(sig).map_err(|source| VerifyError::Malformed { job: job_name(), source })?;
    let signed = signed_bytes(job, pool, wasm, signed_at)?;
    nkeys::KeyPair::from_public_key(key)
        .and_then(|k| k.verify(&signed, &bytes))
        .map_err(|source| VerifyError::Mismatch { job: job_name(), key: key.to_string(), source })
}

/// Err naming the first entry of `[wasm] trusted_keys` that is not an nkey public key.
pub fn check_trusted(trusted: &[String]) -> Result<(), NotAPublicKey> {
    for key in trusted {
        nkeys::KeyPair::from_public_key(key).map_err(|source| NotAPublicKey { key: key.clone(), source })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: &str = "2026-12-06T01:00:00.000Z";

    fn key() -> (String, String) {
        let pair = nkeys::KeyPair::new_account();
        (pair.seed().unwrap(), pair.public_key())
    }

    fn base() -> WasmSpec {
        WasmSpec {
            plugin: format!("sha256-{}", "a".repeat(64)),
            config: BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())]),
            allow_publish: vec!["orders.>".into()],
            allow_http: vec!["https://api.example.com".into()],
            allow_kv: false,
            signature: None,
            signed_at: None,
        }
    }

    #[test]
    fn the_signed_bytes_are_the_documented_json() {
        let bytes = String::from_utf8(signed_bytes("j", "default", &base(), AT).unwrap()).unwrap();
        let want = format!(
            r#"{{"format":"cronrun-wasm-signature/2","job":"j","pool":"default","plugin":"sha256-{}","config":{{"a":"1","b":"2"}},"allow_publish":["orders.>"],"allow_http":["https://api.example.com"],"allow_kv":false,"signed_at":"{AT}"}}"#,
            "a".repeat(64)
        );
        assert_eq!(bytes, want);
    }

    #[test]
    fn any_signed_field_changed_changes_the_bytes_and_config_order_does_not() {
        let before = signed_bytes("j", "default", &base(), AT).unwrap();
        // (what changed, job, pool, wasm, signed_at)
        type Case = (&'static str, &'static str, &'static str, WasmSpec, &'static str);
        let with = |f: fn(&mut WasmSpec)| {
            let mut w = base();
            f(&mut w);
            w
        };
        let changed: Vec<Case> = vec![
            ("job", "k", "default", base(), AT),
            ("pool", "j", "gpu", base(), AT),
            ("signed_at", "j", "default", base(), "2026-12-06T01:00:00.001Z"),
            ("plugin", "j", "default", with(|w| w.plugin = format!("sha256-{}", "b".repeat(64))), AT),
            ("config value", "j", "default", with(|w| drop(w.config.insert("a".into(), "9".into()))), AT),
            ("config key added", "j", "default", with(|w| drop(w.config.insert("c".into(), "3".into()))), AT),
            ("config key removed", "j", "default", with(|w| drop(w.config.remove("b"))), AT),
            ("allow_publish", "j", "default", with(|w| w.allow_publish.push("x.>".into())), AT),
            ("allow_publish emptied", "j", "default", with(|w| w.allow_publish.clear()), AT),
            ("allow_http", "j", "default", with(|w| w.allow_http = vec!["http://169.254.169.254".into()]), AT),
            ("allow_kv", "j", "default", with(|w| w.allow_kv = true), AT),
            // A value moved between fields is not the same bytes either.
            ("grant moved", "j", "default", with(|w| w.allow_http = std::mem::take(&mut w.allow_publish)), AT),
        ];
        for (what, job, pool, wasm, at) in changed {
            assert_ne!(signed_bytes(job, pool, &wasm, at).unwrap(), before, "{what} changed, the signed bytes did not");
        }
        // Same config given in another order (a map built from reversed entries), and the
        // signature fields themselves (not signed): the same bytes.
        let reordered = WasmSpec { config: base().config.into_iter().rev().collect(), ..base() };
        assert_eq!(signed_bytes("j", "default", &reordered, AT).unwrap(), before);
        let from_json: WasmSpec = serde_json::from_str(&format!(
            r#"{{"plugin":"sha256-{}","config":{{"b":"2","a":"1"}},"allow_publish":["orders.>"],"allow_http":["https://api.example.com"]}}"#,
            "a".repeat(64)
        ))
        .unwrap();
        assert_eq!(signed_bytes("j", "default", &from_json, AT).unwrap(), before, "config keys given b, a");
        let stamped = WasmSpec { signature: Some("K:S".into()), signed_at: Some(AT.into()), ..base() };
        assert_eq!(signed_bytes("j", "default", &stamped, AT).unwrap(), before);
    }

    /// A config value naming a secret is signed as its reference: another secret named is
    /// other bytes; the secret's value is in no spec, so no signature covers it.
    #[test]
    fn a_secret_in_the_config_is_signed_as_its_reference() {
        let secret = |name: &str| WasmSpec {
            config: BTreeMap::from([("a".into(), Value::Secret(name.into())), ("b".into(), "2".into())]),
            ..base()
        };
        let bytes = String::from_utf8(signed_bytes("j", "default", &secret("tok"), AT).unwrap()).unwrap();
        assert!(bytes.contains(r#""config":{"a":{"secret":"tok"},"b":"2"}"#), "{bytes}");
        assert_ne!(signed_bytes("j", "default", &secret("other"), AT).unwrap(), bytes.into_bytes());
        assert_ne!(
            signed_bytes("j", "default", &secret("1"), AT).unwrap(),
            signed_bytes("j", "default", &base(), AT).unwrap()
        );
    }

    #[test]
    fn only_a_trusted_keys_signature_of_this_very_spec_passes() {
        let ((ours, our_key), (theirs, _)) = (key(), key());
        let trusted = vec![our_key.clone()];
        let signed = |seed: &str, job: &str, pool: &str, wasm: WasmSpec| WasmSpec {
            signature: Some(sign(seed, job, pool, &wasm, AT).unwrap()),
            signed_at: Some(AT.into()),
            ..wasm
        };
        let good = signed(&ours, "j", "default", base());
        let forged = WasmSpec {
            signature: Some(format!(
                "{our_key}:{}",
                signed(&theirs, "j", "default", base()).signature.unwrap().split_once(':').unwrap().1
            )),
            ..good.clone()
        };
        let digest_only = {
            let pair = nkeys::KeyPair::from_seed(&ours).unwrap();
            let sig = URL_SAFE_NO_PAD.encode(pair.sign(base().plugin.as_bytes()).unwrap());
            WasmSpec { signature: Some(format!("{our_key}:{sig}")), ..base() }
        };
        // (case, job, pool, spec, trusted keys) -> passes, or a part of the refusal
        type Case<'a> = (&'a str, &'a str, &'a str, WasmSpec, &'a [String], Result<(), &'a str>);
        let cases: Vec<Case> = vec![
            ("signed by a trusted key", "j", "default", good.clone(), &trusted, Ok(())),
            ("no keys trusted", "j", "default", base(), &[], Ok(())),
            ("unsigned", "j", "default", base(), &trusted, Err("is not signed")),
            ("other key", "j", "default", signed(&theirs, "j", "default", base()), &trusted, Err("not among")),
            ("another job's", "k", "default", good.clone(), &trusted, Err("does not cover this spec")),
            ("another pool", "j", "gpu", good.clone(), &trusted, Err("does not cover this spec")),
            (
                "a grant added",
                "j",
                "default",
                WasmSpec { allow_http: vec!["http://169.254.169.254".into()], ..good.clone() },
                &trusted,
                Err("does not cover this spec"),
            ),
            (
                "config changed",
                "j",
                "default",
                WasmSpec { config: BTreeMap::from([("a".into(), "evil".into())]), ..good.clone() },
                &trusted,
                Err("does not cover this spec"),
            ),
            (
                "signed_at moved",
                "j",
                "default",
                WasmSpec { signed_at: Some("2027-01-01T00:00:00.000Z".into()), ..good.clone() },
                &trusted,
                Err("does not cover this spec"),
            ),
            ("signature by another key under ours", "j", "default", forged, &trusted, Err("does not cover")),
            ("digest-only signature", "j", "default", digest_only, &trusted, Err("sign it again with this version")),
            (
                "malformed",
                "j",
                "default",
                WasmSpec { signature: Some(format!("{our_key}:not base64!")), ..good.clone() },
                &trusted,
                Err("malformed"),
            ),
        ];
        for (what, job, pool, wasm, trusted, want) in cases {
            match (verify(job, pool, &wasm, trusted), want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(needle)) => {
                    let e = e.to_string();
                    assert!(e.contains(needle), "{what}: {e}");
                    assert!(!e.contains('\n'), "{what}: one line: {e}");
                }
                (got, _) => panic!("{what}: {got:?}, want {want:?}"),
            }
        }
        assert!(check_trusted(&trusted).is_ok());
        assert!(check_trusted(&["UNOTAKEY".into()]).unwrap_err().to_string().contains("UNOTAKEY"));
    }
}
