//! Signed plugins. `cronrun deploy --sign KEY` signs the plugin's digest with an nkey
//! (ed25519; `cronrun auth keygen` makes one) and writes `<public key>:<signature>` into the
//! spec's `wasm.signature`. A runner whose `[wasm] trusted_keys` lists keys runs only
//! plugins whose signature is by one of them and over that very digest: whoever can write
//! job specs and the plugin store, an admin identity misused, still cannot make such a
//! runner execute code the key holders did not sign. The digest binds the signature to the
//! bytes: the runner checks a fetched plugin against its digest before compiling it.
//! Checked before anything is fetched or compiled; a refusal fails the run with one line.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The `wasm.signature` of `digest` by the nkey `seed`.
pub fn sign(seed: &str, digest: &str) -> Result<String, String> {
    let key = nkeys::KeyPair::from_seed(seed).map_err(|e| format!("not an nkey seed: {e}"))?;
    let signature = key.sign(digest.as_bytes()).map_err(|e| format!("signing {digest}: {e}"))?;
    Ok(format!("{}:{}", key.public_key(), URL_SAFE_NO_PAD.encode(signature)))
}

/// Ok when `trusted` is empty (signatures not required), or `signature` is by one of the
/// `trusted` public keys over `digest`.
pub fn verify(digest: &str, signature: Option<&str>, trusted: &[String]) -> Result<(), String> {
    if trusted.is_empty() {
        return Ok(());
    }
    let Some(signature) = signature else {
        return Err(format!(
            "plugin {digest} is not signed, and this runner runs only plugins signed by its [wasm] trusted_keys: \
             deploy it with `cronrun deploy --sign KEY`"
        ));
    };
    let (key, sig) = signature.split_once(':').unwrap_or((signature, ""));
    if !trusted.iter().any(|t| t == key) {
        return Err(format!(
            "plugin {digest} is signed by {key}, which is not among this runner's [wasm] trusted_keys"
        ));
    }
    let bytes = URL_SAFE_NO_PAD.decode(sig).map_err(|_| format!("the signature of plugin {digest} is malformed"))?;
    nkeys::KeyPair::from_public_key(key)
        .and_then(|k| k.verify(digest.as_bytes(), &bytes))
        .map_err(|_| format!("the signature of plugin {digest} by {key} does not match it: sign it again"))
}

/// Err naming the first entry of `[wasm] trusted_keys` that is not an nkey public key.
pub fn check_trusted(trusted: &[String]) -> Result<(), String> {
    match trusted.iter().find(|k| nkeys::KeyPair::from_public_key(k).is_err()) {
        Some(bad) => Err(format!("{bad:?} is not an nkey public key (as `cronrun auth keygen` prints)")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_trusted_keys_signature_of_this_digest_passes() {
        let key = || {
            let pair = nkeys::KeyPair::new_account();
            (pair.seed().unwrap(), pair.public_key())
        };
        let ((ours, our_key), (theirs, _)) = (key(), key());
        let (digest, other) = (format!("sha256-{}", "a".repeat(64)), format!("sha256-{}", "b".repeat(64)));
        let signed = sign(&ours, &digest).unwrap();
        let trusted = vec![our_key.clone()];
        let forged = format!("{our_key}:{}", sign(&theirs, &digest).unwrap().split_once(':').unwrap().1);
        // (signature, trusted keys, digest) -> passes, or a word of the refusal
        type Case<'a> = (Option<&'a str>, &'a [String], &'a str, Result<(), &'a str>);
        let cases: [Case; 7] = [
            (Some(&signed), &trusted, &digest, Ok(())),
            (None, &[], &digest, Ok(())),
            (None, &trusted, &digest, Err("is not signed")),
            (Some(&sign(&theirs, &digest).unwrap()), &trusted, &digest, Err("not among this runner's")),
            (Some(&signed), &trusted, &other, Err("does not match")),
            (Some(&forged), &trusted, &digest, Err("does not match")),
            (Some(&format!("{our_key}:not base64!")), &trusted, &digest, Err("malformed")),
        ];
        for (signature, trusted, digest, want) in cases {
            match (verify(digest, signature, trusted), want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(needle)) => assert!(e.contains(needle), "{signature:?}: {e}"),
                (got, _) => panic!("{signature:?} over {digest}: {got:?}, want {want:?}"),
            }
        }
        assert!(check_trusted(&trusted).is_ok());
        assert!(check_trusted(&["UNOTAKEY".into()]).unwrap_err().contains("UNOTAKEY"));
    }
}
