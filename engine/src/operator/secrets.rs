//! Secrets as a cluster or client file gives them: inline (`secret = "..."`), in a file of
//! their own (`secret_file = "/etc/bank/peer.secret"`), or, for the command line, in an
//! environment variable; and the key rings derived from them. A secret file must be its
//! owner's alone: one that the group or others may read is refused (as ssh refuses such a
//! private key), naming the file and the `chmod` that fixes it.

use net::auth::{Key, KeyRing, ShortSecret};
use std::path::{Path, PathBuf};

/// Most bytes a secret file may hold (a secret is a line; a larger file is not one).
pub const SECRET_FILE_BYTES_MAX: u64 = 4096;

/// The environment variable that supplies the peer secret to the command line.
pub const SECRET_ENV: &str = "ENGINE_SECRET";
/// The environment variable that supplies the client secret to the command line.
pub const CLIENT_SECRET_ENV: &str = "ENGINE_CLIENT_SECRET";
/// The environment variable that supplies the operator secret to the command line.
pub const OPERATOR_SECRET_ENV: &str = "ENGINE_OPERATOR_SECRET";

/// A secret's text as a cluster or client file holds it inline. It never prints: a file's
/// `Debug` shows `SecretText(..)` in its place.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct SecretText(String);

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretText(..)")
    }
}

impl From<String> for SecretText {
    fn from(text: String) -> Self {
        SecretText(text)
    }
}

impl From<&str> for SecretText {
    fn from(text: &str) -> Self {
        SecretText(text.to_string())
    }
}

impl std::ops::Deref for SecretText {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// Why a secret could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The secret is given both inline and as a file.
    #[error("{field} and {field}_file are both set: keep one")]
    Both {
        /// The key.
        field: &'static str,
    },
    /// The secret file cannot be read.
    #[error("{field}_file {}: {source}", path.display())]
    Unreadable {
        /// The key.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The secret file lets the group or others read it.
    #[error(
        "{field}_file {} may be read by other users (mode {mode:o}): run chmod 600 on it",
        path.display()
    )]
    OpenToOthers {
        /// The key.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The secret file is too large to be a secret.
    #[error("{field}_file {} holds over {SECRET_FILE_BYTES_MAX} bytes: not a secret", path.display())]
    TooLarge {
        /// The key.
        field: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The secret is too short.
    #[error("{field}: {error}")]
    Short {
        /// The key.
        field: &'static str,
        /// Why.
        error: ShortSecret,
    },
    /// The secret file holds more than one line.
    #[error("{field}_file {} holds more than one line: a secret is one line", path.display())]
    NotOneLine {
        /// The key.
        field: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The secret file holds bytes that are not UTF-8, where the secret must be written
    /// into a TOML file.
    #[error("{field}: the secret is not UTF-8 text, so it cannot be written into a file")]
    NotText {
        /// The key.
        field: &'static str,
    },
    /// A previous secret (a rotation under way) without a current one.
    #[error("previous_{field} is set without {field}: a rotation needs the new secret too")]
    PreviousOnly {
        /// The current secret's key.
        field: &'static str,
    },
    /// The secret is set in the file and in the environment.
    #[error("{field} is set in the file and in the environment variable {variable}: keep one")]
    FileAndEnvironment {
        /// The key.
        field: &'static str,
        /// The environment variable.
        variable: &'static str,
    },
}

/// Where one secret may come from: a key's inline value or the file its `_file` key names.
#[derive(Clone, Copy, Debug)]
pub struct SecretSource<'a> {
    /// The key (`secret`, `previous_client_secret`, ...).
    pub field: &'static str,
    /// Its inline value.
    pub inline: Option<&'a str>,
    /// The file its `_file` key names.
    pub file: Option<&'a Path>,
}

impl SecretSource<'_> {
    /// The secret's bytes (a file's, without its line ending), or `None` when neither is set.
    pub fn read(&self) -> Result<Option<Vec<u8>>, SecretError> {
        let field = self.field;
        match (self.inline, self.file) {
            (Some(_), Some(_)) => Err(SecretError::Both { field }),
            (Some(inline), None) => Ok(Some(inline.as_bytes().to_vec())),
            (None, Some(path)) => read_secret_file(field, path).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The secret as text (for a file that holds it inline), or `None` when it is not set.
    pub fn read_text(&self) -> Result<Option<SecretText>, SecretError> {
        let field = self.field;
        let text = |bytes| {
            let text = String::from_utf8(bytes).map_err(|_| SecretError::NotText { field })?;
            Ok(SecretText(text))
        };
        self.read()?.map(text).transpose()
    }

    /// True when the secret is given at all.
    pub fn is_set(&self) -> bool {
        self.inline.is_some() || self.file.is_some()
    }
}

/// Reads a secret file: owner-only, at most [`SECRET_FILE_BYTES_MAX`], one line.
fn read_secret_file(field: &'static str, path: &Path) -> Result<Vec<u8>, SecretError> {
    let unreadable = |source| SecretError::Unreadable {
        field,
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::metadata(path).map_err(unreadable)?.len();
    if bytes > SECRET_FILE_BYTES_MAX {
        return Err(SecretError::TooLarge {
            field,
            path: path.to_path_buf(),
        });
    }
    if let Some(mode) = crate::storage::files::open_to_others(path) {
        return Err(SecretError::OpenToOthers {
            field,
            path: path.to_path_buf(),
            mode,
        });
    }
    let mut secret = std::fs::read(path).map_err(unreadable)?;
    // The line ending an editor or `echo` leaves is not part of the secret.
    while secret.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        secret.pop();
    }
    if secret.iter().any(|b| *b == b'\n' || *b == b'\r') {
        return Err(SecretError::NotOneLine {
            field,
            path: path.to_path_buf(),
        });
    }
    Ok(secret)
}

/// The keys of one credential: the key of its `current` secret and, during a rotation, of its
/// `previous` one; `None` when the current secret is not set.
pub fn keys<K>(
    current: SecretSource<'_>,
    previous: SecretSource<'_>,
    derive: impl Fn(&[u8]) -> Result<K, ShortSecret>,
) -> Result<Option<(K, Option<K>)>, SecretError> {
    let key = |source: SecretSource<'_>| -> Result<Option<K>, SecretError> {
        let Some(secret) = source.read()? else {
            return Ok(None);
        };
        let field = source.field;
        derive(&secret)
            .map(Some)
            .map_err(|error| SecretError::Short { field, error })
    };
    let previous_key = key(previous)?;
    match key(current)? {
        Some(current) => Ok(Some((current, previous_key))),
        None if previous_key.is_some() => Err(SecretError::PreviousOnly {
            field: current.field,
        }),
        None => Ok(None),
    }
}

/// The key ring of one credential (see [`keys`]).
pub fn ring(
    current: SecretSource<'_>,
    previous: SecretSource<'_>,
    derive: impl Fn(&[u8]) -> Result<Key, ShortSecret>,
) -> Result<Option<KeyRing>, SecretError> {
    let keys = keys(current, previous, derive)?;
    Ok(keys.map(|(current, previous)| KeyRing { current, previous }))
}

/// Fills `inline`, the value of key `field`, from the environment variable `variable` (as
/// `lookup` reads it) when it is set there; an error when the file sets the secret too
/// (`set`: inline or as a file).
pub fn from_environment(
    (field, set): (&'static str, bool),
    inline: &mut Option<SecretText>,
    variable: &'static str,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<(), SecretError> {
    let Some(value) = lookup(variable) else {
        return Ok(());
    };
    if set {
        return Err(SecretError::FileAndEnvironment { field, variable });
    }
    *inline = Some(value.into());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn source<'a>(inline: Option<&'a str>, file: Option<&'a Path>) -> SecretSource<'a> {
        SecretSource {
            field: "secret",
            inline,
            file,
        }
    }

    /// Proves a secret is read inline or from an owner-only file (its line ending dropped),
    /// and that both at once, a file others may read, a file too large and a missing file
    /// are refused with the file named.
    #[test]
    fn a_secret_comes_inline_or_from_an_owner_only_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peer.secret");
        crate::storage::files::write_durably(&path, b"sixteen bytes at least\n").unwrap();
        let inline = source(Some("sixteen bytes inline"), None);
        assert_eq!(inline.read().unwrap().unwrap(), b"sixteen bytes inline");
        let file = source(None, Some(&path));
        assert_eq!(file.read().unwrap().unwrap(), b"sixteen bytes at least");
        assert!(source(None, None).read().unwrap().is_none());
        let both = source(Some("x"), Some(&path)).read().unwrap_err();
        assert!(matches!(both, SecretError::Both { .. }), "{both}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let open = file.read().unwrap_err().to_string();
        assert!(
            open.contains("chmod 600") && open.contains("peer.secret"),
            "{open}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let large = dir.path().join("large");
        crate::storage::files::write_durably(&large, &[b'x'; 5000]).unwrap();
        let error = source(None, Some(&large)).read().unwrap_err();
        assert!(matches!(error, SecretError::TooLarge { .. }), "{error}");
        let two = dir.path().join("two lines");
        crate::storage::files::write_durably(&two, b"sixteen bytes at least\nand more\n").unwrap();
        let error = source(None, Some(&two)).read().unwrap_err();
        assert!(matches!(error, SecretError::NotOneLine { .. }), "{error}");
        let text = SecretText::from("never printed, 16+");
        assert_eq!(format!("{:?}", Some(text)), "Some(SecretText(..))");
        let missing = dir.path().join("missing");
        let error = source(None, Some(&missing)).read().unwrap_err();
        assert!(matches!(error, SecretError::Unreadable { .. }), "{error}");
    }

    /// Proves a ring holds the current key and, during a rotation, the previous one; that a
    /// previous secret alone or a short one is refused; and that the environment fills a
    /// secret the file does not set, and is refused beside one it does.
    #[test]
    fn rings_and_the_environment() {
        let current = source(Some("the secret of this year"), None);
        let previous = SecretSource {
            field: "previous_secret",
            inline: Some("the secret of last year"),
            file: None,
        };
        let none = SecretSource {
            field: "previous_secret",
            inline: None,
            file: None,
        };
        let ring = super::ring(current, previous, Key::peer).unwrap().unwrap();
        assert_eq!(ring.current, Key::peer(b"the secret of this year").unwrap());
        assert_eq!(
            ring.previous,
            Some(Key::peer(b"the secret of last year").unwrap())
        );
        let alone = super::ring(current, none, Key::peer).unwrap().unwrap();
        assert_eq!(alone.previous, None);
        let error = super::ring(source(None, None), previous, Key::peer).unwrap_err();
        assert!(matches!(error, SecretError::PreviousOnly { .. }), "{error}");
        let short = super::ring(source(Some("short"), None), none, Key::peer).unwrap_err();
        assert!(matches!(short, SecretError::Short { .. }), "{short}");
        assert!(
            super::ring(source(None, None), none, Key::peer)
                .unwrap()
                .is_none()
        );
        let lookup = |name: &str| (name == SECRET_ENV).then(|| "from the environment".into());
        let mut inline = None;
        let unset = ("secret", false);
        from_environment(unset, &mut inline, SECRET_ENV, &lookup).unwrap();
        assert_eq!(inline.as_deref(), Some("from the environment"));
        let mut other = None;
        from_environment(unset, &mut other, CLIENT_SECRET_ENV, &lookup).unwrap();
        assert_eq!(other, None);
        let set = ("secret", true);
        let error = from_environment(set, &mut inline, SECRET_ENV, &lookup).unwrap_err();
        assert!(
            matches!(error, SecretError::FileAndEnvironment { .. }),
            "{error}"
        );
    }
}
