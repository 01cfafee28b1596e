//! Secrets from the environment: a value given in one variable
//! (`PSMRAIL_JOB_SECRET`), or a file named by another
//! (`PSMRAIL_JOB_SECRET_FILE`), which keeps the secret out of the process
//! environment (and so out of `/proc/<pid>/environ`, `ps e` and the
//! environments of child processes).
//!
//! Exactly one of the two may be set. The value of the first is text: it
//! must be UTF-8, not blank, without whitespace at either end and without
//! control characters, and at least the setting's minimum length. The
//! file must be a regular file that only its owner may access (no
//! permission bits for group or others, as ssh demands of a private key:
//! `chmod 600`); its contents are bytes, of which one trailing newline is
//! dropped, and must be neither empty, nor only whitespace, nor shorter
//! than the minimum, nor longer than [`MAX_SECRET_FILE_LEN`].
//!
//! Errors never show the secret: one about the value is
//! [`ConfigError::withheld`]; one about the file shows its path, never its
//! contents.

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::env::VarSource;
use super::error::ConfigError;
use super::text::read_text_var;

/// The longest secret file read, in bytes (a key file is far smaller; a
/// larger file is the wrong file).
pub(crate) const MAX_SECRET_FILE_LEN: usize = 4096;

/// Longest path accepted (`PATH_MAX` - 1).
const MAX_PATH_LEN: usize = 4095;

const EXPECTED_PATH: &str = "the path of a regular file only its owner may read (mode 600 or \
     400) holding the secret: 16 to 4096 bytes, one trailing newline dropped";

/// Reads a secret of at least `min_len` bytes: from `var`, or from the file
/// `file_var` names; `None` when neither is set.
///
/// # Errors
/// A [`ConfigError`] naming the variable: both set; a value that breaks
/// the rules of the [module](self) (withheld); a path that is not clean
/// text, or a file that cannot be read, is not a regular file, is open to
/// group or others, or whose contents are empty, blank, too short or too
/// long.
pub(crate) fn read_secret<V: VarSource + ?Sized>(
    vars: &V,
    var: &'static str,
    file_var: &'static str,
    min_len: usize,
) -> Result<Option<Vec<u8>>, ConfigError> {
    let value = vars.var_os(var);
    if value.is_some() && vars.var_os(file_var).is_some() {
        let path = vars
            .var_os(file_var)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Err(
            ConfigError::new(file_var, &path, 0..path.len(), EXPECTED_PATH).with_problem(format!(
                "{var} is set too; give the secret one way, not both"
            )),
        );
    }
    if let Some(value) = value {
        return secret_value(var, value, min_len).map(Some);
    }
    let Some(path) = read_text_var(vars, file_var, MAX_PATH_LEN, EXPECTED_PATH)? else {
        return Ok(None);
    };
    secret_file(file_var, &path, min_len).map(Some)
}

/// Checks the secret `value` of `var` (never shown in an error).
fn secret_value(
    var: &'static str,
    value: OsString,
    min_len: usize,
) -> Result<Vec<u8>, ConfigError> {
    let expected = format!(
        "a secret of at least {min_len} bytes of UTF-8 text, without control characters or \
         whitespace at either end"
    );
    let refuse = |problem: String| Err(ConfigError::withheld(var, problem, expected.clone()));
    let Ok(text) = value.into_string() else {
        return refuse("the value is not valid UTF-8".to_owned());
    };
    if text.is_empty() {
        return refuse("the value is empty".to_owned());
    }
    if text.chars().all(char::is_whitespace) {
        return refuse(format!(
            "the value is blank ({} bytes of whitespace)",
            text.len()
        ));
    }
    if text.starts_with(char::is_whitespace) || text.ends_with(char::is_whitespace) {
        return refuse("the value starts or ends with whitespace".to_owned());
    }
    if text.chars().any(char::is_control) {
        return refuse("the value holds a control character".to_owned());
    }
    if text.len() < min_len {
        return refuse(format!("{} bytes is too short", text.len()));
    }
    Ok(text.into_bytes())
}

/// Reads the secret file at `path`, named by `var`.
fn secret_file(var: &'static str, path: &str, min_len: usize) -> Result<Vec<u8>, ConfigError> {
    let refuse = |problem: String| {
        Err(ConfigError::new(var, path, 0..path.len(), EXPECTED_PATH).with_problem(problem))
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return refuse(format!("cannot open {path:?}: {e}")),
    };
    // The checks look at the file that was opened, not at whatever the
    // path names a moment later.
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return refuse(format!("cannot look at {path:?}: {e}")),
    };
    if !meta.is_file() {
        return refuse(format!("{path:?} is not a regular file"));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return refuse(format!(
            "{path:?} is open to group or others (mode {mode:03o}, owner uid {}); make it \
             private with chmod 600",
            meta.uid()
        ));
    }
    let mut bytes = Vec::new();
    let limit = MAX_SECRET_FILE_LEN as u64 + 1;
    if let Err(e) = file.take(limit).read_to_end(&mut bytes) {
        return refuse(format!("cannot read {path:?}: {e}"));
    }
    if bytes.len() > MAX_SECRET_FILE_LEN {
        return refuse(format!(
            "{path:?} is longer than {MAX_SECRET_FILE_LEN} bytes"
        ));
    }
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    if bytes.is_empty() {
        return refuse(format!("{path:?} is empty"));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return refuse(format!("{path:?} holds only whitespace"));
    }
    if bytes.len() < min_len {
        return refuse(format!(
            "{path:?} holds {} bytes, too few for a secret",
            bytes.len()
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::PathBuf;

    const VAR: &str = "S";
    const FILE_VAR: &str = "S_FILE";

    /// A file in the temporary directory with `contents` and `mode`,
    /// removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &[u8], mode: u32) -> TempFile {
            let path =
                std::env::temp_dir().join(format!("psmrail-secret-{}-{name}", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .unwrap();
            f.write_all(contents).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            TempFile(path)
        }

        fn path(&self) -> &str {
            self.0.to_str().unwrap()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn read(vars: &[(&str, OsString)]) -> Result<Option<Vec<u8>>, ConfigError> {
        read_secret(vars, VAR, FILE_VAR, 16)
    }

    #[test]
    fn neither_set_is_no_secret() {
        assert_eq!(read(&[]), Ok(None));
    }

    #[test]
    fn a_value_is_checked_and_never_shown() {
        let ok = [(VAR, OsString::from("sixteen bytes!!!"))];
        assert_eq!(read(&ok), Ok(Some(b"sixteen bytes!!!".to_vec())));
        for (value, problem) in [
            (&b""[..], "the value is empty"),
            (b"   ", "the value is blank (3 bytes of whitespace)"),
            (
                b" sixteen bytes!!!",
                "the value starts or ends with whitespace",
            ),
            (
                b"sixteen bytes!!!\n",
                "the value starts or ends with whitespace",
            ),
            (
                b"sixteen\x01bytes!!!",
                "the value holds a control character",
            ),
            (b"sixteen bytes!!\xff", "the value is not valid UTF-8"),
            (b"fifteen bytes!!", "15 bytes is too short"),
        ] {
            let e = read(&[(VAR, OsString::from_vec(value.to_vec()))]).unwrap_err();
            assert_eq!(e.var(), VAR);
            assert_eq!(e.problem(), Some(problem));
            assert_eq!(e.value(), "");
            let text = e.to_string();
            assert!(text.starts_with("S (value withheld): "), "{text}");
            assert!(!text.contains("bytes!!"), "{text}");
        }
    }

    #[test]
    fn a_private_file_gives_its_contents_without_one_trailing_newline() {
        let f = TempFile::new("ok", b"a secret in a file\n", 0o600);
        let vars = [(FILE_VAR, OsString::from(f.path()))];
        assert_eq!(read(&vars), Ok(Some(b"a secret in a file".to_vec())));
        // Bytes, not text; only one newline is dropped.
        let f = TempFile::new("bin", b"\x00\xff\x01 binary key bytes\n\n", 0o400);
        let vars = [(FILE_VAR, OsString::from(f.path()))];
        assert_eq!(
            read(&vars),
            Ok(Some(b"\x00\xff\x01 binary key bytes\n".to_vec()))
        );
    }

    /// The problem of the error for a file with `contents` and `mode`.
    fn file_problem(name: &str, contents: &[u8], mode: u32) -> String {
        let f = TempFile::new(name, contents, mode);
        let e = read(&[(FILE_VAR, OsString::from(f.path()))]).unwrap_err();
        assert_eq!(
            (e.var(), e.value(), e.item()),
            (FILE_VAR, f.path(), f.path())
        );
        let text = e.to_string();
        assert!(!text.contains("secret!!"), "{text}");
        e.problem().unwrap().replace(f.path(), "<path>")
    }

    #[test]
    fn a_file_that_breaks_a_rule_is_refused_by_path() {
        let open = file_problem("open", b"a long enough secret!!", 0o644);
        assert!(
            open.starts_with("\"<path>\" is open to group or others (mode 644, owner uid ")
                && open.ends_with("); make it private with chmod 600"),
            "{open}"
        );
        assert!(file_problem("group", b"a long enough secret!!", 0o640).contains("mode 640"));
        assert!(file_problem("world", b"a long enough secret!!", 0o602).contains("mode 602"));
        assert_eq!(file_problem("empty", b"", 0o600), "\"<path>\" is empty");
        assert_eq!(file_problem("newline", b"\n", 0o600), "\"<path>\" is empty");
        assert_eq!(
            file_problem("blank", b"                   \n", 0o600),
            "\"<path>\" holds only whitespace"
        );
        assert_eq!(
            file_problem("short", b"secret!!\n", 0o600),
            "\"<path>\" holds 8 bytes, too few for a secret"
        );
        assert_eq!(
            file_problem("long", &[b's'; MAX_SECRET_FILE_LEN + 1], 0o600),
            "\"<path>\" is longer than 4096 bytes"
        );
    }

    #[test]
    fn paths_that_name_no_secret_file_are_refused() {
        let missing = std::env::temp_dir().join("psmrail-secret-none/nope");
        for (path, problem) in [
            (missing.to_str().unwrap(), "cannot open"),
            ("/", "is not a regular file"),
            ("", "the value is empty"),
            (" /x", "starts with whitespace"),
            ("/x\n", "ends with whitespace"),
            ("/x\u{1}", "control character"),
        ] {
            let e = read(&[(FILE_VAR, OsString::from(path))]).unwrap_err();
            assert_eq!(e.var(), FILE_VAR, "{path:?}");
            assert!(e.problem().unwrap().contains(problem), "{path:?}: {e}");
        }
        let raw = [(FILE_VAR, OsString::from_vec(b"/x\xff".to_vec()))];
        assert!(read(&raw)
            .unwrap_err()
            .to_string()
            .contains("not valid UTF-8"));
    }

    #[test]
    fn both_at_once_is_an_error() {
        let f = TempFile::new("both", b"a long enough secret!!", 0o600);
        let vars = [
            (VAR, OsString::from("sixteen bytes!!!")),
            (FILE_VAR, OsString::from(f.path())),
        ];
        let e = read(&vars).unwrap_err();
        assert_eq!(e.var(), FILE_VAR);
        assert_eq!(
            e.problem(),
            Some("S is set too; give the secret one way, not both")
        );
        assert!(!e.to_string().contains("sixteen"), "{e}");
    }
}
