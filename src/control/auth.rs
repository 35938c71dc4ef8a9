//! Token authentication without sending the token: a challenge–response over the handshake, HMAC-SHA256 keyed by
//! the token.
//!
//! ```text
//! sender  Hello{nonce C}                          ──▶
//!         ◀──  Challenge{nonce S, proof HMAC(token, "receiver" C S)}   the receiver knows the token too
//!         Proof{HMAC(token, "sender" C S)}        ──▶  checked in constant time, then Welcome | Error
//! ```
//!
//! Both nonces are fresh random bytes per connection, so a captured handshake proves nothing on the next one. Both
//! ends then derive the session key `HMAC(token, "session" C S)`: the TCP transport's data connections prove they
//! belong to the session with it (see [`data_proof`]), and it never crosses the network. Without a token (loopback
//! serve) the same exchange runs with the empty key, which proves nothing but keeps one code path.

use anyhow::{anyhow, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Bytes of each nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of a proof (an HMAC-SHA256 output).
pub const PROOF_LEN: usize = 32;

/// The key a session's data connections prove themselves with. Derived on both ends, never sent.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SessionKey([u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

/// One connection's two nonces, as both ends hold them after the Challenge.
pub struct Nonces {
    pub sender: [u8; NONCE_LEN],
    pub receiver: [u8; NONCE_LEN],
}

/// A fresh random nonce.
pub fn nonce() -> Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| anyhow!("no randomness for the handshake nonce: {e}"))?;
    Ok(n)
}

fn mac(token: &str, label: &str, n: &Nonces) -> [u8; PROOF_LEN] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(token.as_bytes()).expect("HMAC takes keys of any length");
    m.update(b"kvxfer ");
    m.update(label.as_bytes());
    m.update(&n.sender);
    m.update(&n.receiver);
    m.finalize().into_bytes().into()
}

/// The receiver's proof that it holds the token.
pub fn receiver_proof(token: &str, n: &Nonces) -> [u8; PROOF_LEN] {
    mac(token, "receiver", n)
}

/// The sender's proof that it holds the token.
pub fn sender_proof(token: &str, n: &Nonces) -> [u8; PROOF_LEN] {
    mac(token, "sender", n)
}

/// The session key both ends derive once the proofs check out.
pub fn session_key(token: &str, n: &Nonces) -> SessionKey {
    SessionKey(mac(token, "session", n))
}

/// Whether the hex text `given` is `expected`, compared in constant time.
pub fn proof_matches(expected: &[u8; PROOF_LEN], given: &str) -> bool {
    let Ok(bytes) = hex::decode(given) else { return false };
    bytes.len() == PROOF_LEN && bool::from(bytes.ct_eq(expected))
}

/// A nonce from its hex text, or None when it is not [`NONCE_LEN`] bytes of hex.
pub fn parse_nonce(text: &str) -> Option<[u8; NONCE_LEN]> {
    hex::decode(text).ok()?.try_into().ok()
}

/// What data connection `stream` of a session presents first: bound to the session (its key) and to the stream's
/// index, so each index is accepted once.
pub fn data_proof(key: &SessionKey, stream: u32) -> [u8; PROOF_LEN] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&key.0).expect("HMAC takes keys of any length");
    m.update(b"kvxfer data");
    m.update(&stream.to_le_bytes());
    m.finalize().into_bytes().into()
}

impl SessionKey {
    /// The key of the session's reverse connection (`--bidir`: the receiver's transport writes into the sender's
    /// buffer), derived from this one, so that what a forward data connection presents proves nothing to the
    /// sender's reverse target.
    pub fn reversed(&self) -> SessionKey {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(b"kvxfer reverse");
        SessionKey(m.finalize().into_bytes().into())
    }
}

/// Whether `given` is data connection `stream`'s proof for `key`, compared in constant time.
pub fn data_proof_matches(key: &SessionKey, stream: u32, given: &[u8]) -> bool {
    bool::from(given.ct_eq(&data_proof(key, stream)))
}

/// The shortest token accepted for an address other than loopback (`serve`'s listener, a cluster's coordinator).
pub const MIN_TOKEN_LEN: usize = 16;

/// The rule for a token that guards an address other than loopback: `serve --listen` and a cluster's coordinator
/// both let whoever holds it write into this host's memory, so neither may go without one, nor with one shorter than
/// [`MIN_TOKEN_LEN`] characters. `place` names the address for the message (`--listen 0.0.0.0:18515`, `the
/// coordinator node1:18600`), `how` the ways this command takes a token. Loopback needs none.
pub fn check_token(place: &str, loopback: bool, token: &str, how: &str) -> Result<()> {
    let chars = token.chars().count();
    if loopback || chars >= MIN_TOKEN_LEN {
        return Ok(());
    }
    if chars == 0 {
        crate::bail_usage!(
            "{place}: a non-loopback address needs a token ({how}; `kvxfer token` makes one), so that only holders of the token can write into this host's memory"
        );
    }
    crate::bail_usage!(
        "{place}: the token has {chars} characters; a non-loopback address needs at least {MIN_TOKEN_LEN} (`kvxfer token` makes one)"
    )
}

/// A new random token for `kvxfer token`: 32 hex digits (128 bits).
pub fn new_token() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| anyhow!("no randomness for a token: {e}"))?;
    Ok(hex::encode(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n() -> Nonces {
        Nonces { sender: [1; NONCE_LEN], receiver: [2; NONCE_LEN] }
    }

    #[test]
    fn a_token_off_loopback_must_be_long_enough() {
        let check = |loopback, token: &str| check_token("--listen 0.0.0.0:1", loopback, token, "--token T");
        assert!(check(true, "").is_ok() && check(true, "abc").is_ok(), "loopback needs none");
        assert!(check(false, &"x".repeat(MIN_TOKEN_LEN)).is_ok());
        let short = check(false, "abcdef").unwrap_err();
        assert_eq!(crate::error::exit_code(&short), 2);
        assert!(short.to_string().starts_with("--listen 0.0.0.0:1: the token has 6 characters"), "{short}");
        let none = check(false, "").unwrap_err().to_string();
        assert!(none.contains("needs a token (--token T;"), "{none}");
    }

    #[test]
    fn proofs_differ_by_role_token_and_nonce_and_check_in_constant_time() {
        let p = sender_proof("t0ken-of-16-chars", &n());
        assert!(proof_matches(&p, &hex::encode(p)));
        assert_ne!(p, receiver_proof("t0ken-of-16-chars", &n()), "the two roles' proofs differ");
        assert_ne!(p, sender_proof("another-token-xx", &n()));
        let other = Nonces { sender: [3; NONCE_LEN], receiver: [2; NONCE_LEN] };
        assert_ne!(p, sender_proof("t0ken-of-16-chars", &other), "a fresh nonce, a fresh proof");
        assert!(!proof_matches(&p, "zz") && !proof_matches(&p, &hex::encode(&p[..31])));
        let k = session_key("t0ken-of-16-chars", &n());
        assert!(data_proof_matches(&k, 0, &data_proof(&k, 0)) && !data_proof_matches(&k, 1, &data_proof(&k, 0)));
        assert!(!data_proof_matches(&k.reversed(), 0, &data_proof(&k, 0)), "the reverse connection's proofs differ");
        assert_eq!(new_token().unwrap().len(), 32);
        assert!(parse_nonce(&hex::encode([7u8; NONCE_LEN])).is_some() && parse_nonce("00").is_none());
    }
}
