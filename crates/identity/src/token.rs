//! A bearer token as presented, with the SHA-256 that both its static caller and its verified JWT are found by, taken once per call.

use crate::AuthError;
use toolmesh::digest::{hex, sha256};

/// A bearer token read from an `authorization` header: one word, and its
/// SHA-256 (static callers are kept by it, and so are the JWTs verified
/// lately), so a call hashes its token once whichever finds it.
#[derive(Debug, Clone, Copy)]
pub struct Token<'a> {
    text: &'a str,
    digest: [u8; 32],
}

impl<'a> Token<'a> {
    /// The token `text` (as [`toolmesh_transport::bearer_token`] gives
    /// it); refused when it holds whitespace, which only a header of more
    /// than `Bearer` and one token leaves in it.
    pub fn read(text: &'a str) -> Result<Token<'a>, AuthError> {
        if toolmesh_transport::has_whitespace(text) {
            return Err(AuthError::MalformedHeader);
        }
        Ok(Token {
            text,
            digest: sha256(text.as_bytes()),
        })
    }

    /// The token itself.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// Its SHA-256.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// The refusal of a token nobody holds: it names the token by the
    /// start of its digest, never by its text.
    pub fn unknown(&self) -> AuthError {
        AuthError::UnknownToken {
            digest_prefix: hex(&self.digest[..6]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token is hashed as its bytes, and a header's second word is
    /// refused by name.
    #[test]
    fn reads_one_word() {
        let token = Token::read("tok-1").unwrap();
        assert_eq!(token.text(), "tok-1");
        assert_eq!(token.digest(), &sha256(b"tok-1"));
        assert!(matches!(
            token.unknown(),
            AuthError::UnknownToken { digest_prefix } if digest_prefix == hex(&sha256(b"tok-1")[..6])
        ));
        for spaced in ["Bearer tok", "a\tb", "a\u{a0}b"] {
            assert_eq!(Token::read(spaced).unwrap_err(), AuthError::MalformedHeader);
        }
    }
}
