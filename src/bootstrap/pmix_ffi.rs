//! The slice of the PMIx client ABI (`libpmix.so.2`, PMIx 4.x) that
//! [`PmixClient`](super::PmixClient) calls, loaded at run time: the C
//! structures as `#[repr(C)]` mirrors, the constants, the function types
//! and the one-time `dlopen`.
//!
//! The mirrors follow `pmix_common.h` (Debian's libpmix-dev installs it in
//! `/usr/lib/x86_64-linux-gnu/pmix2/include`); the unit test at the end
//! compiles a small C program against that header and compares sizes and
//! offsets. Only the union members psmrail reads are named; the union is
//! padded to the size of its largest member (`pmix_envar_t`, three words).
//!
//! The library is loaded once and never unloaded: `PMIx_Init` starts a
//! progress thread inside it, which must stay mapped until the process
//! exits. `RTLD_GLOBAL`, since libpmix `dlopen`s plugins of its own that
//! expect its symbols.

#![allow(non_camel_case_types)]

use crate::{Error, ErrorKind, Result};
use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
use std::ffi::{c_char, c_int};
use std::sync::OnceLock;

/// The longest namespace, without its NUL.
pub(crate) const PMIX_MAX_NSLEN: usize = 255;
/// The longest key, without its NUL.
pub(crate) const PMIX_MAX_KEYLEN: usize = 511;

/// `pmix_status_t`.
pub(crate) type pmix_status_t = c_int;
/// `PMIX_SUCCESS`.
pub(crate) const PMIX_SUCCESS: pmix_status_t = 0;
/// `PMIX_ERR_TIMEOUT`.
pub(crate) const PMIX_ERR_TIMEOUT: pmix_status_t = -24;
/// `PMIX_ERR_NOT_FOUND`.
pub(crate) const PMIX_ERR_NOT_FOUND: pmix_status_t = -46;

/// `PMIX_RANK_WILDCARD`: the job as a whole, in a `pmix_proc_t`.
pub(crate) const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
/// `PMIX_GLOBAL`: a put every process of the job may read.
pub(crate) const PMIX_GLOBAL: u8 = 3;

/// `pmix_data_type_t` values psmrail writes or reads.
pub(crate) const PMIX_BOOL: u16 = 1;
pub(crate) const PMIX_STRING: u16 = 3;
pub(crate) const PMIX_SIZE: u16 = 4;
pub(crate) const PMIX_INT: u16 = 6;
pub(crate) const PMIX_UINT16: u16 = 13;
pub(crate) const PMIX_UINT32: u16 = 14;
pub(crate) const PMIX_PROC_RANK: u16 = 40;

/// Attribute keys (`pmix_common.h`).
pub(crate) const PMIX_JOB_SIZE: &str = "pmix.job.size";
pub(crate) const PMIX_LOCAL_RANK: &str = "pmix.lrank";
pub(crate) const PMIX_LOCAL_SIZE: &str = "pmix.local.size";
pub(crate) const PMIX_NODEID: &str = "pmix.nodeid";
pub(crate) const PMIX_HOSTNAME: &str = "pmix.hname";
pub(crate) const PMIX_COLLECT_DATA: &str = "pmix.collect";
pub(crate) const PMIX_TIMEOUT: &str = "pmix.timeout";
pub(crate) const PMIX_OPTIONAL: &str = "pmix.optional";

/// `pmix_proc_t`: a namespace and a rank in it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct pmix_proc_t {
    pub(crate) nspace: [c_char; PMIX_MAX_NSLEN + 1],
    pub(crate) rank: u32,
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct pmix_byte_object_t {
    pub(crate) bytes: *mut c_char,
    pub(crate) size: usize,
}

/// `pmix_value_t`'s union, the members psmrail uses.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union pmix_value_data {
    pub(crate) flag: bool,
    pub(crate) string: *mut c_char,
    pub(crate) size: usize,
    pub(crate) integer: c_int,
    pub(crate) uint16: u16,
    pub(crate) uint32: u32,
    pub(crate) rank: u32,
    pub(crate) bo: pmix_byte_object_t,
    /// The largest member (`pmix_envar_t`: two pointers and a char).
    _whole: [u64; 3],
}

/// `pmix_value_t`: a type tag and the union.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct pmix_value_t {
    pub(crate) type_: u16,
    pub(crate) data: pmix_value_data,
}

impl std::fmt::Debug for pmix_value_t {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pmix_value_t {{ type: {} }}", self.type_)
    }
}

/// `pmix_info_t`: a key, directive flags and a value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct pmix_info_t {
    pub(crate) key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub(crate) flags: u32,
    pub(crate) value: pmix_value_t,
}

/// C text of at most `N - 1` bytes in a fixed array, NUL-terminated;
/// `None` when it does not fit or holds a NUL.
pub(crate) fn c_array<const N: usize>(text: &str) -> Option<[c_char; N]> {
    if text.len() >= N || text.bytes().any(|b| b == 0) {
        return None;
    }
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(text.bytes()) {
        *o = b as c_char;
    }
    Some(out)
}

/// The text before the first NUL of a fixed array (lossy UTF-8).
pub(crate) fn from_c_array(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl pmix_info_t {
    /// An info entry with `key` and `value`; `key` must fit (the keys are
    /// this module's constants).
    pub(crate) fn new(key: &str, type_: u16, data: pmix_value_data) -> pmix_info_t {
        pmix_info_t {
            key: c_array(key).expect("a PMIx attribute key fits"),
            flags: 0,
            value: pmix_value_t { type_, data },
        }
    }

    /// A boolean attribute.
    pub(crate) fn flag(key: &str, on: bool) -> pmix_info_t {
        Self::new(key, PMIX_BOOL, pmix_value_data { flag: on })
    }

    /// An `int` attribute.
    pub(crate) fn int(key: &str, v: c_int) -> pmix_info_t {
        Self::new(key, PMIX_INT, pmix_value_data { integer: v })
    }
}

pub(crate) type PMIx_Init_fn =
    unsafe extern "C" fn(*mut pmix_proc_t, *mut pmix_info_t, usize) -> pmix_status_t;
pub(crate) type PMIx_Finalize_fn = unsafe extern "C" fn(*const pmix_info_t, usize) -> pmix_status_t;
pub(crate) type PMIx_Put_fn =
    unsafe extern "C" fn(u8, *const c_char, *mut pmix_value_t) -> pmix_status_t;
pub(crate) type PMIx_Commit_fn = unsafe extern "C" fn() -> pmix_status_t;
pub(crate) type PMIx_Fence_fn =
    unsafe extern "C" fn(*const pmix_proc_t, usize, *const pmix_info_t, usize) -> pmix_status_t;
pub(crate) type PMIx_Get_fn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const c_char,
    *const pmix_info_t,
    usize,
    *mut *mut pmix_value_t,
) -> pmix_status_t;
pub(crate) type PMIx_Value_destruct_fn = unsafe extern "C" fn(*mut pmix_value_t);
pub(crate) type PMIx_Error_string_fn = unsafe extern "C" fn(pmix_status_t) -> *const c_char;

/// The resolved functions; every call is `unsafe` and follows the C
/// contract of the function of the same name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PmixApi {
    pub(crate) init: PMIx_Init_fn,
    pub(crate) finalize: PMIx_Finalize_fn,
    pub(crate) put: PMIx_Put_fn,
    pub(crate) commit: PMIx_Commit_fn,
    pub(crate) fence: PMIx_Fence_fn,
    pub(crate) get: PMIx_Get_fn,
    pub(crate) value_destruct: PMIx_Value_destruct_fn,
    pub(crate) error_string: PMIx_Error_string_fn,
}

/// The variable naming the PMIx library to load instead of the defaults.
pub(crate) use super::settings::ENV_PMIX_LIB;
/// The soname, then where Debian's libpmix2 keeps it.
const CANDIDATES: [&str; 2] = [
    "libpmix.so.2",
    "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2",
];

struct Loaded {
    /// Kept for the life of the process (never unloaded).
    _lib: Library,
    api: PmixApi,
}

static LOADED: OnceLock<std::result::Result<Loaded, String>> = OnceLock::new();

/// The PMIx functions, loading the library at the first call:
/// `PSMRAIL_PMIX_LIB` if set (and nothing else), else `libpmix.so.2`.
/// `FI_ENODATA` naming what was tried when no library loads or one lacks
/// a function.
pub(crate) fn api() -> Result<&'static PmixApi> {
    let loaded = LOADED.get_or_init(|| {
        let names: Vec<String> = match super::settings::pmix_lib(&crate::config::ProcessEnv) {
            Err(e) => return Err(e.to_string()),
            Ok(Some(path)) => vec![path],
            Ok(None) => CANDIDATES.iter().map(|s| s.to_string()).collect(),
        };
        let mut tried = Vec::new();
        for name in &names {
            // SAFETY: loading libpmix runs its initialisers, which only set
            // up the library's own state; no other code runs.
            match unsafe { Library::open(Some(name), RTLD_NOW | RTLD_GLOBAL) } {
                Ok(lib) => {
                    // SAFETY: the symbols are PMIx's, with the types
                    // declared above (`pmix.h`).
                    return unsafe { resolve(&lib) }
                        .map(|api| Loaded { _lib: lib, api })
                        .map_err(|missing| format!("{name} lacks {missing}"));
                }
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        Err(tried.join("; "))
    });
    loaded.as_ref().map(|l| &l.api).map_err(|why| {
        Error::new(
            ErrorKind::NoData,
            format!(
                "PMIx: cannot load the PMIx client library ({why}); install libpmix2, \
                 or name the library in {ENV_PMIX_LIB}"
            ),
        )
    })
}

/// Resolves every function, or names the first one missing.
///
/// # Safety
/// `lib` must be a PMIx client library whose symbols have the declared
/// types.
unsafe fn resolve(lib: &Library) -> std::result::Result<PmixApi, &'static str> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the caller guarantees the type; the pointer is copied
            // out and the library stays loaded.
            unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map(|s| *s)
                .map_err(|_| $name)?
        };
    }
    Ok(PmixApi {
        init: sym!("PMIx_Init"),
        finalize: sym!("PMIx_Finalize"),
        put: sym!("PMIx_Put"),
        commit: sym!("PMIx_Commit"),
        fence: sym!("PMIx_Fence"),
        get: sym!("PMIx_Get"),
        value_destruct: sym!("PMIx_Value_destruct"),
        error_string: sym!("PMIx_Error_string"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};
    use std::path::Path;
    use std::process::Command;

    const INCLUDE: &str = "/usr/lib/x86_64-linux-gnu/pmix2/include";

    const PROBE: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <pmix.h>
#define SIZE(t) printf("size %s %zu\n", #t, sizeof(t)); printf("align %s %zu\n", #t, _Alignof(t))
#define OFF(t, f) printf("offset %s.%s %zu\n", #t, #f, offsetof(t, f))
#define VAL(n) printf("value %s %lld\n", #n, (long long)(n))
int main(void) {
    SIZE(pmix_proc_t); OFF(pmix_proc_t, nspace); OFF(pmix_proc_t, rank);
    SIZE(pmix_byte_object_t); OFF(pmix_byte_object_t, bytes); OFF(pmix_byte_object_t, size);
    SIZE(pmix_value_t); OFF(pmix_value_t, type); OFF(pmix_value_t, data);
    SIZE(pmix_info_t); OFF(pmix_info_t, key); OFF(pmix_info_t, flags); OFF(pmix_info_t, value);
    VAL(PMIX_MAX_NSLEN); VAL(PMIX_MAX_KEYLEN); VAL(PMIX_SUCCESS); VAL(PMIX_ERR_TIMEOUT);
    VAL(PMIX_ERR_NOT_FOUND); VAL(PMIX_RANK_WILDCARD); VAL(PMIX_GLOBAL);
    VAL(PMIX_BOOL); VAL(PMIX_STRING); VAL(PMIX_SIZE); VAL(PMIX_INT); VAL(PMIX_UINT16);
    VAL(PMIX_UINT32); VAL(PMIX_PROC_RANK);
    printf("key PMIX_JOB_SIZE %s\n", PMIX_JOB_SIZE);
    printf("key PMIX_LOCAL_RANK %s\n", PMIX_LOCAL_RANK);
    printf("key PMIX_LOCAL_SIZE %s\n", PMIX_LOCAL_SIZE);
    printf("key PMIX_NODEID %s\n", PMIX_NODEID);
    printf("key PMIX_HOSTNAME %s\n", PMIX_HOSTNAME);
    printf("key PMIX_COLLECT_DATA %s\n", PMIX_COLLECT_DATA);
    printf("key PMIX_TIMEOUT %s\n", PMIX_TIMEOUT);
    printf("key PMIX_OPTIONAL %s\n", PMIX_OPTIONAL);
    return 0;
}
"#;

    /// The C compiler's view of the structures and constants, or why
    /// there is none (no header, no compiler).
    fn probe() -> std::result::Result<Vec<(String, String, String)>, String> {
        if !Path::new(INCLUDE).join("pmix.h").exists() {
            return Err(format!(
                "{INCLUDE}/pmix.h is missing (apt-get install libpmix-dev)"
            ));
        }
        let dir = std::env::temp_dir().join(format!("psmrail-pmix-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let (src, exe) = (dir.join("probe.c"), dir.join("probe"));
        std::fs::write(&src, PROBE).map_err(|e| e.to_string())?;
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = Command::new(&cc)
            .arg(format!("-I{INCLUDE}"))
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .status()
            .map_err(|e| format!("cannot run {cc}: {e}"))?;
        assert!(built.success(), "the PMIx layout probe did not compile");
        let out = Command::new(&exe).output().expect("the probe runs");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let mut w = l.splitn(3, ' ').map(str::to_string);
                (w.next().unwrap(), w.next().unwrap(), w.next().unwrap())
            })
            .collect())
    }

    #[test]
    fn the_mirrors_match_the_installed_pmix_headers() {
        let facts = match probe() {
            Ok(f) => f,
            Err(why) => {
                assert!(
                    std::env::var("PSMRAIL_REQUIRE_LAUNCHERS").as_deref() != Ok("1"),
                    "PMIx layout check impossible and PSMRAIL_REQUIRE_LAUNCHERS=1: {why}"
                );
                eprintln!("skipped: {why}");
                return;
            }
        };
        let ours: Vec<(&str, &str, String)> = vec![
            ("size", "pmix_proc_t", size_of::<pmix_proc_t>().to_string()),
            (
                "align",
                "pmix_proc_t",
                align_of::<pmix_proc_t>().to_string(),
            ),
            (
                "offset",
                "pmix_proc_t.nspace",
                offset_of!(pmix_proc_t, nspace).to_string(),
            ),
            (
                "offset",
                "pmix_proc_t.rank",
                offset_of!(pmix_proc_t, rank).to_string(),
            ),
            (
                "size",
                "pmix_byte_object_t",
                size_of::<pmix_byte_object_t>().to_string(),
            ),
            (
                "align",
                "pmix_byte_object_t",
                align_of::<pmix_byte_object_t>().to_string(),
            ),
            (
                "offset",
                "pmix_byte_object_t.bytes",
                offset_of!(pmix_byte_object_t, bytes).to_string(),
            ),
            (
                "offset",
                "pmix_byte_object_t.size",
                offset_of!(pmix_byte_object_t, size).to_string(),
            ),
            (
                "size",
                "pmix_value_t",
                size_of::<pmix_value_t>().to_string(),
            ),
            (
                "align",
                "pmix_value_t",
                align_of::<pmix_value_t>().to_string(),
            ),
            (
                "offset",
                "pmix_value_t.type",
                offset_of!(pmix_value_t, type_).to_string(),
            ),
            (
                "offset",
                "pmix_value_t.data",
                offset_of!(pmix_value_t, data).to_string(),
            ),
            ("size", "pmix_info_t", size_of::<pmix_info_t>().to_string()),
            (
                "align",
                "pmix_info_t",
                align_of::<pmix_info_t>().to_string(),
            ),
            (
                "offset",
                "pmix_info_t.key",
                offset_of!(pmix_info_t, key).to_string(),
            ),
            (
                "offset",
                "pmix_info_t.flags",
                offset_of!(pmix_info_t, flags).to_string(),
            ),
            (
                "offset",
                "pmix_info_t.value",
                offset_of!(pmix_info_t, value).to_string(),
            ),
            ("value", "PMIX_MAX_NSLEN", PMIX_MAX_NSLEN.to_string()),
            ("value", "PMIX_MAX_KEYLEN", PMIX_MAX_KEYLEN.to_string()),
            ("value", "PMIX_SUCCESS", PMIX_SUCCESS.to_string()),
            ("value", "PMIX_ERR_TIMEOUT", PMIX_ERR_TIMEOUT.to_string()),
            (
                "value",
                "PMIX_ERR_NOT_FOUND",
                PMIX_ERR_NOT_FOUND.to_string(),
            ),
            (
                "value",
                "PMIX_RANK_WILDCARD",
                PMIX_RANK_WILDCARD.to_string(),
            ),
            ("value", "PMIX_GLOBAL", PMIX_GLOBAL.to_string()),
            ("value", "PMIX_BOOL", PMIX_BOOL.to_string()),
            ("value", "PMIX_STRING", PMIX_STRING.to_string()),
            ("value", "PMIX_SIZE", PMIX_SIZE.to_string()),
            ("value", "PMIX_INT", PMIX_INT.to_string()),
            ("value", "PMIX_UINT16", PMIX_UINT16.to_string()),
            ("value", "PMIX_UINT32", PMIX_UINT32.to_string()),
            ("value", "PMIX_PROC_RANK", PMIX_PROC_RANK.to_string()),
            ("key", "PMIX_JOB_SIZE", PMIX_JOB_SIZE.into()),
            ("key", "PMIX_LOCAL_RANK", PMIX_LOCAL_RANK.into()),
            ("key", "PMIX_LOCAL_SIZE", PMIX_LOCAL_SIZE.into()),
            ("key", "PMIX_NODEID", PMIX_NODEID.into()),
            ("key", "PMIX_HOSTNAME", PMIX_HOSTNAME.into()),
            ("key", "PMIX_COLLECT_DATA", PMIX_COLLECT_DATA.into()),
            ("key", "PMIX_TIMEOUT", PMIX_TIMEOUT.into()),
            ("key", "PMIX_OPTIONAL", PMIX_OPTIONAL.into()),
        ];
        assert_eq!(facts.len(), ours.len(), "{facts:?}");
        for (kind, name, value) in &ours {
            let c = facts
                .iter()
                .find(|(k, n, _)| k == kind && n == name)
                .unwrap_or_else(|| panic!("the probe did not report {kind} {name}"));
            assert_eq!(&c.2, value, "{kind} {name}: C says {}, Rust {value}", c.2);
        }
    }

    #[test]
    fn fixed_c_text_round_trips_and_refuses_what_does_not_fit() {
        let a: [c_char; 8] = c_array("abc").unwrap();
        assert_eq!(from_c_array(&a), "abc");
        assert!(c_array::<4>("abcd").is_none());
        assert!(c_array::<8>("a\0b").is_none());
    }
}
