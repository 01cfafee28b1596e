//! Every variable the crate reads (`FI_PSM_*`, `FI_OFI_MRAIL_*`,
//! `PSMRAIL_*`, in the library, psm-sys and the reactor), fed malformed
//! values: each value is refused, and the error names the variable it
//! came from, what was expected and (where the value is not a secret) the
//! offending item. A few valid values of each variable are accepted, and
//! the table is checked against the variables the sources name.
//!
//! No test modifies this process's environment: values come from slices
//! of `(name, OsString)` pairs, so values that are not UTF-8 are fed too;
//! the variables read only from the process environment are also tried in
//! child processes.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use psmrail::bootstrap::settings::{pmi_version, pmix_lib};
use psmrail::config::{ConfigError, MrailConfig, PsmConfig};
use psmrail::engine::soft::JobSecret;
use psmrail::fabric::{getinfo, Hints};
use psmrail::hooks::config::watch_host;
use psmrail::reactor::CpuTopology;

type Vars = Vec<(&'static str, OsString)>;

/// Why a value was refused.
#[derive(Debug)]
struct Refused {
    /// The variable a [`ConfigError`] names (`None` for other errors).
    var: Option<String>,
    /// The item a [`ConfigError`] points at, and what it expected.
    item: Option<(String, String)>,
    message: String,
}

impl From<ConfigError> for Refused {
    fn from(e: ConfigError) -> Self {
        Refused {
            var: Some(e.var().to_owned()),
            item: Some((e.item().to_owned(), e.expected().to_owned())),
            message: e.to_string(),
        }
    }
}

impl From<psmrail::Error> for Refused {
    fn from(e: psmrail::Error) -> Self {
        let config = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<ConfigError>())
            .cloned();
        match config {
            Some(c) => c.into(),
            None => Refused {
                var: None,
                item: None,
                message: e.to_string(),
            },
        }
    }
}

impl From<psm_sys::EnvError> for Refused {
    fn from(e: psm_sys::EnvError) -> Self {
        Refused {
            var: Some(e.variable.to_owned()),
            item: Some((e.value.clone(), e.expected.to_owned())),
            message: e.to_string(),
        }
    }
}

/// Reads one variable the way the crate does: `Ok` when it was accepted.
type Reader = fn(&Vars) -> Result<(), Refused>;

fn topo8() -> CpuTopology {
    CpuTopology {
        online: 8,
        allowed: (0..8).collect(),
    }
}

fn read_psm(vars: &Vars) -> Result<(), Refused> {
    PsmConfig::builder_from_vars(vars)?
        .topology(topo8())
        .build()?;
    Ok(())
}

fn read_mrail(vars: &Vars) -> Result<(), Refused> {
    MrailConfig::from_vars(vars)?;
    Ok(())
}

fn read_engine(vars: &Vars) -> Result<(), Refused> {
    let owned = vars.clone();
    getinfo(Some(&Hints::new().vars(owned)))?;
    Ok(())
}

fn read_job_secret(vars: &Vars) -> Result<(), Refused> {
    JobSecret::from_vars(vars)?;
    Ok(())
}

fn read_watch_host(vars: &Vars) -> Result<(), Refused> {
    watch_host(vars)?;
    Ok(())
}

/// The value of the one variable in `vars`.
fn only_value(vars: &Vars) -> Option<&OsStr> {
    vars.first().map(|(_, v)| v.as_os_str())
}

fn read_psm_lib(vars: &Vars) -> Result<(), Refused> {
    psm_sys::env::psm_lib(only_value(vars))?;
    Ok(())
}

fn read_pmi_version(vars: &Vars) -> Result<(), Refused> {
    pmi_version(vars)?;
    Ok(())
}

fn read_pmix_lib(vars: &Vars) -> Result<(), Refused> {
    pmix_lib(vars)?;
    Ok(())
}

fn read_truescale_shm(vars: &Vars) -> Result<(), Refused> {
    psm_sys::env::truescale_shm(only_value(vars))?;
    Ok(())
}

/// One variable: how it is read, values it accepts, values it refuses,
/// and whether its value is a secret (never shown in an error).
struct Case {
    var: &'static str,
    read: Reader,
    valid: Vec<OsString>,
    malformed: Vec<OsString>,
    secret: bool,
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

fn bytes(b: &[u8]) -> OsString {
    OsString::from_vec(b.to_vec())
}

/// Malformed in every variable: empty, blank, whitespace around a valid
/// value, control characters, and bytes that are not UTF-8.
fn text_junk(valid: &str) -> Vec<OsString> {
    let mut out: Vec<OsString> = [
        String::new(),
        " ".into(),
        "\t".into(),
        " ".repeat(24),
        format!(" {valid}"),
        format!("{valid} "),
        format!("{valid}\n"),
        format!("\u{1}{valid}"),
        format!("{valid}\u{7f}"),
        format!("{valid}\u{1b}[0m"),
        format!("{valid}\u{85}"),
    ]
    .iter()
    .map(|s| os(s))
    .collect();
    let mut raw = valid.as_bytes().to_vec();
    raw.push(0xff);
    out.push(bytes(&raw));
    out.push(bytes(b"\xff"));
    out.push(bytes(b"\xc3\x28"));
    out
}

/// Malformed for a non-negative decimal number (of which the largest
/// valid one is far below `u64::MAX`).
fn number_junk() -> Vec<OsString> {
    [
        "-1",
        "-0",
        "-9223372036854775808",
        "-99999999999999999999",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999",
        "0x10",
        "0X10",
        "010",
        "00",
        "0b1",
        "1.5",
        "1.",
        ".5",
        "1e3",
        "+1",
        "2c",
        "1 2",
        "1_000",
        "\u{661}",
        "inf",
        "NaN",
    ]
    .iter()
    .map(|s| os(s))
    .collect()
}

fn bool_junk() -> Vec<OsString> {
    [
        "2", "-1", "01", "0x1", "1.0", "truee", "y", "n", "enable", "on off", "+1",
    ]
    .iter()
    .map(|s| os(s))
    .collect()
}

/// Malformed rail addresses: numbers in every form a C resolver reads as
/// an IPv4 address (hex, octal, short dotted forms, a plain integer) or
/// that are not addresses at all, broken dotted quads, broken lists.
fn addr_junk() -> Vec<OsString> {
    [
        "0x10",
        "0X10",
        "0x",
        "010",
        "0177.0.0.1",
        "127.1",
        "127.0.1",
        "0x7f.0.0.1",
        "0x7f000001",
        "2130706433",
        "16",
        "0",
        "1.5",
        "1.",
        ".5",
        "1e3",
        "1.5e2",
        "-1",
        "+1",
        "-1.5",
        "-9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "1.2.3.4.5",
        "256.0.0.1",
        "1.2.3.04",
        "1.2.3.-4",
        "eth0,",
        ",eth0",
        "eth0,,eth1",
        "eth0, eth1",
        "a b",
        "eth0/1",
        "fi_sockaddr_in://0x10",
        "fi_sockaddr_in://010.0.0.1",
        "fi_sockaddr_in://127.1",
        "fi_sockaddr_in://127.0.0.1:0x50",
        "fi_sockaddr_in://127.0.0.1:-1",
        "fi_sockaddr_in://127.0.0.1:65536",
        "eth0,0x10",
    ]
    .iter()
    .map(|s| os(s))
    .collect()
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let psm_bool = |var| Case {
        var,
        read: read_psm,
        valid: ["1", "0", "yes", "OFF", "True"].map(os).to_vec(),
        malformed: [text_junk("1"), bool_junk()].concat(),
        secret: false,
    };
    for var in [
        "FI_PSM_NAME_SERVER",
        "FI_PSM_TAGGED_RMA",
        "FI_PSM_AM_MSG",
        "FI_PSM_PROG_THREAD",
    ] {
        cases.push(psm_bool(var));
    }
    cases.push(Case {
        var: "FI_PSM_UUID",
        read: read_psm,
        valid: [
            "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF",
            "0fff0fff-0000-0000-0000-0fff0fff0fff",
        ]
        .map(os)
        .to_vec(),
        malformed: [
            text_junk("0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF"),
            [
                "0FFF0FFF-0000-0000-0000-0FFF0FFF0FF",
                "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF0",
                "{0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF}",
                "0x0FFF0FFF-0000-0000-0000-0FFF0FFF0F",
                "0FFF0FFF00000000000000FFF0FFF0FFF",
                "-1",
                "0",
            ]
            .map(os)
            .to_vec(),
        ]
        .concat(),
        secret: false,
    });
    for (var, valid) in [
        ("FI_PSM_DELAY", ["0", "1", "60"]),
        ("FI_PSM_TIMEOUT", ["0", "5", "3600"]),
        ("FI_PSM_PROG_INTERVAL", ["0", "1", "1000000"]),
    ] {
        let max_plus_one = match var {
            "FI_PSM_DELAY" => "61",
            "FI_PSM_TIMEOUT" => "3601",
            _ => "1000001",
        };
        cases.push(Case {
            var,
            read: read_psm,
            valid: valid.map(os).to_vec(),
            malformed: [text_junk("1"), number_junk(), vec![os(max_plus_one)]].concat(),
            secret: false,
        });
    }
    cases.push(Case {
        var: "FI_PSM_PROG_AFFINITY",
        read: read_psm,
        valid: ["0", "0:3", "0:7:2", "-1", "0,2,-1"].map(os).to_vec(),
        malformed: [
            text_junk("0:3"),
            [
                "x",
                "0:3,x",
                "0x1",
                "010",
                "1.5",
                "1e3",
                "+1",
                "-0",
                "-1025",
                "1024",
                "-9223372036854775808",
                "18446744073709551615",
                "18446744073709551616",
                "0:3:0",
                "0:3:-1",
                "3:1",
                ",",
                "0,",
                ",0",
                "0,,1",
                "0:1:2:3",
                "2c",
                "0:3 ",
            ]
            .map(os)
            .to_vec(),
        ]
        .concat(),
        secret: false,
    });
    for var in ["FI_OFI_MRAIL_ADDR", "FI_OFI_MRAIL_ADDR_STRC"] {
        cases.push(Case {
            var,
            read: read_mrail,
            valid: [
                "eth0",
                "127.0.0.1",
                "198.18.0.1,198.18.1.1",
                "fi_sockaddr_in://127.0.0.1:7000",
                "localhost",
                "node-7.example.org",
                "fe80::1",
                "veth@if3",
            ]
            .map(os)
            .to_vec(),
            malformed: [text_junk("eth0"), addr_junk()].concat(),
            secret: false,
        });
    }
    cases.push(Case {
        var: "FI_OFI_MRAIL_CONFIG",
        read: read_mrail,
        valid: [
            "16384:fixed,ULONG_MAX:striping",
            "4096:fixed,65536:round-robin,-1:striping",
            "18446744073709551615:striping",
        ]
        .map(os)
        .to_vec(),
        malformed: [
            text_junk("16384:fixed"),
            [
                "16384",
                "0x10:fixed",
                "010:fixed",
                "1.5:fixed",
                "1e3:fixed",
                "+1:fixed",
                "-2:fixed",
                "-9223372036854775808:fixed",
                "18446744073709551616:fixed",
                "1:bogus",
                "1:fixed ",
                "2:fixed,1:striping",
                "1:fixed,1:striping",
                "1:fixed,",
                ":fixed",
                "1:",
            ]
            .map(os)
            .to_vec(),
        ]
        .concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_MRAIL_RATES",
        read: read_mrail,
        valid: ["1000", "1000,2500", "1", "10000000"].map(os).to_vec(),
        malformed: [
            text_junk("1000"),
            number_junk(),
            ["0", "1000,", ",1000", "1000,,2500", "10000001", "1000,0"]
                .map(os)
                .to_vec(),
        ]
        .concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_ENGINE",
        read: read_engine,
        valid: ["soft", "SOFT", "Soft"].map(os).to_vec(),
        malformed: [
            text_junk("soft"),
            ["psm", "auto,soft", "0", "1", "-1", "softx"]
                .map(os)
                .to_vec(),
        ]
        .concat(),
        secret: false,
    });
    let secret = "a secret of the whole job";
    cases.push(Case {
        var: "PSMRAIL_JOB_SECRET",
        read: read_job_secret,
        valid: [secret, "sixteen bytes!!!", "18446744073709551615"]
            .map(os)
            .to_vec(),
        malformed: [
            text_junk(secret),
            [
                "s3cr3t",
                "fifteen bytes!!",
                "\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}\u{1}",
            ]
            .map(os)
            .to_vec(),
        ]
        .concat(),
        secret: true,
    });
    cases.push(Case {
        var: "PSMRAIL_JOB_SECRET_FILE",
        read: read_job_secret,
        // A private file is accepted: tests/job_secret.rs.
        valid: Vec::new(),
        malformed: [
            text_junk("/etc/passwd"),
            [
                // Open to others (mode 644), not a regular file, missing.
                "/etc/passwd",
                "/dev/null",
                "/",
                "/nonexistent/psmrail-secret",
            ]
            .map(os)
            .to_vec(),
        ]
        .concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_SOFT_SHM",
        read: read_engine,
        valid: ["0", "1", "off", "ON", "yes", "false"].map(os).to_vec(),
        malformed: [text_junk("1"), bool_junk()].concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_SOFT_SHM_SINGLE_COPY",
        read: read_engine,
        valid: ["0", "1", "off", "ON"].map(os).to_vec(),
        malformed: [text_junk("1"), bool_junk()].concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_SOFT_SHM_RING",
        read: read_engine,
        valid: ["4096", "65536", "1048576", "1073741824"].map(os).to_vec(),
        malformed: [
            text_junk("65536"),
            number_junk(),
            [
                "0",
                "4095",
                "2048",
                "65535",
                "1m",
                "64k",
                "0x10000",
                "-65536",
                "2147483648",
                "18446744073709551616",
            ]
            .map(os)
            .to_vec(),
        ]
        .concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_SOFT_ADDR",
        read: read_engine,
        valid: [
            "127.0.0.1",
            "lo",
            "localhost",
            "fi_sockaddr_in://127.0.0.1:0",
        ]
        .map(os)
        .to_vec(),
        malformed: [
            text_junk("127.0.0.1"),
            addr_junk(),
            [
                "::1",
                "0.0.0.0",
                "255.255.255.255",
                "127.0.0.1,lo",
                "psmrail-no-such-if0",
                "fi_addr_psmx://1234",
            ]
            .map(os)
            .to_vec(),
        ]
        .concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_NAME_SERVER_ADDR",
        read: read_engine,
        valid: ["*", "lo", "127.0.0.1,lo"].map(os).to_vec(),
        malformed: [
            text_junk("lo"),
            addr_junk(),
            ["*,lo", "**", "::1", "psmrail-no-such-if0"]
                .map(os)
                .to_vec(),
        ]
        .concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_WATCH_HOST",
        read: read_watch_host,
        valid: ["elsewhere", "node 7", "host-b.example"].map(os).to_vec(),
        malformed: [text_junk("elsewhere"), vec![os(&"h".repeat(256))]].concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_PMI_VERSION",
        read: read_pmi_version,
        valid: ["1", "2"].map(os).to_vec(),
        malformed: [
            text_junk("2"),
            ["0", "3", "-1", "02", "2.0", "two", "0x2"].map(os).to_vec(),
        ]
        .concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_PMIX_LIB",
        read: read_pmix_lib,
        valid: [
            "libpmix.so.2",
            "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2",
        ]
        .map(os)
        .to_vec(),
        malformed: [text_junk("libpmix.so.2"), vec![os(&"l".repeat(4096))]].concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_PSM_LIB",
        read: read_psm_lib,
        valid: [
            "libpsm_infinipath.so.1",
            "/usr/lib/libpsm2-2/libpsm_infinipath.so.1",
        ]
        .map(os)
        .to_vec(),
        malformed: [
            text_junk("libpsm_infinipath.so.1"),
            vec![os(&"l".repeat(4096))],
        ]
        .concat(),
        secret: false,
    });
    cases.push(Case {
        var: "PSMRAIL_TRUESCALE_SHM",
        read: read_truescale_shm,
        valid: ["1", "0"].map(os).to_vec(),
        malformed: [
            text_junk("1"),
            bool_junk(),
            ["yes", "true", "on"].map(os).to_vec(),
        ]
        .concat(),
        secret: false,
    });
    cases
}

/// The variables the sources name that only tests read (children of
/// test binaries, the native tests' switch); not configuration.
const TEST_ONLY: [&str; 4] = [
    "PSMRAIL_GIVE_BACK_CHILD",
    "PSMRAIL_NATIVE_FAST_CHILD",
    "PSMRAIL_REQUIRE_LAUNCHERS",
    "PSMRAIL_REQUIRE_NATIVE",
];

/// Every `"FI_PSM_...`, `"FI_OFI_MRAIL_...` and `"PSMRAIL_...` string in
/// the sources of the library, psm-sys and the reactor.
fn variables_in_sources() -> std::collections::BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "psm-sys/src", "reactor/src"] {
        walk(&root.join(dir), &mut files);
    }
    let mut names = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for prefix in ["\"FI_PSM_", "\"FI_OFI_MRAIL_", "\"PSMRAIL_"] {
            for (at, _) in text.match_indices(prefix) {
                let name: String = text[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn the_table_has_every_variable_the_sources_read() {
    let table: std::collections::BTreeSet<String> =
        cases().iter().map(|c| c.var.to_owned()).collect();
    let read: std::collections::BTreeSet<String> = variables_in_sources()
        .into_iter()
        .filter(|v| !TEST_ONLY.contains(&v.as_str()))
        .collect();
    assert_eq!(table, read);
}

/// Shows a value for a failure message.
fn shown(value: &OsStr) -> String {
    format!("{:?}", String::from_utf8_lossy(value.as_bytes()))
}

#[test]
fn every_malformed_value_is_refused_naming_its_variable() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in cases() {
        for value in &case.malformed {
            checked += 1;
            let vars: Vars = vec![(case.var, value.clone())];
            let what = format!("{}={}", case.var, shown(value));
            let refused = match (case.read)(&vars) {
                Ok(()) => {
                    failures.push(format!("{what}: accepted"));
                    continue;
                }
                Err(r) => r,
            };
            if !refused.message.contains(case.var) {
                failures.push(format!(
                    "{what}: the error does not name the variable: {}",
                    refused.message
                ));
            }
            if let Some(var) = &refused.var {
                if var != case.var {
                    failures.push(format!("{what}: the error names {var}"));
                }
            }
            if !refused.message.contains("expected") {
                failures.push(format!(
                    "{what}: the error does not say what was expected: {}",
                    refused.message
                ));
            }
            if case.secret {
                let text = value.to_string_lossy();
                let core = text.trim();
                if core.len() >= 4 && refused.message.contains(core) {
                    failures.push(format!("{what}: the error shows the secret"));
                }
            } else if let Some((item, expected)) = &refused.item {
                let whole = value.to_string_lossy();
                if !whole.contains(item.as_str()) {
                    failures.push(format!("{what}: item {item:?} is not in the value"));
                }
                if expected.is_empty() {
                    failures.push(format!("{what}: nothing is expected"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} malformed values went wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn valid_values_are_accepted() {
    for case in cases() {
        for value in &case.valid {
            let vars: Vars = vec![(case.var, value.clone())];
            if let Err(e) = (case.read)(&vars) {
                panic!("{}={}: refused: {}", case.var, shown(value), e.message);
            }
        }
    }
}

/// Set in a child process of this test binary: the value under test is in
/// its environment (the variables below are read from the process
/// environment only, so they are tried in children, leaving the parent's
/// environment alone).
const CHILD_VAR: &str = "PSMRAIL_MALFORMED_CHILD";

/// Runs `test` in a child process with `var=value`, and returns the line
/// the child printed after `outcome: ` (`ok`, or the error).
fn in_child(test: &str, var: &str, value: &OsStr) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, "1")
        .env(var, value)
        .env("FI_PSM_NAME_SERVER", "0")
        .env("FI_PSM_DELAY", "0")
        .env_remove("PSMRAIL_ENGINE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.split_once("outcome: ").map(|(_, o)| o))
        .unwrap_or_else(|| panic!("the child said nothing: {out:?}"))
        .to_owned()
}

/// Prints what `f` gave, in the child.
fn report(f: impl FnOnce() -> psmrail::Result<()>) {
    match f() {
        Ok(()) => println!("outcome: ok"),
        Err(e) => println!("outcome: {:?}: {e}", e.kind()),
    }
}

/// `values` of `var`, each in a child that runs `test`: all must be
/// refused with `Inval` errors naming the variable.
fn refused_in_children(test: &str, var: &str, values: &[OsString]) {
    let mut failures = Vec::new();
    for value in values {
        let outcome = in_child(test, var, value);
        if !(outcome.starts_with("Inval: ") && outcome.contains(var)) {
            failures.push(format!("{var}={}: {outcome}", shown(value)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} values went wrong:\n{}",
        failures.len(),
        values.len(),
        failures.join("\n")
    );
}

#[test]
fn a_malformed_watch_host_keeps_a_domain_from_opening() {
    if std::env::var_os(CHILD_VAR).is_some() {
        return report(|| {
            let hints = Hints::new().engine(psmrail::fabric::EngineChoice::Soft);
            let info = getinfo(Some(&hints))?.remove(0);
            let fabric = psmrail::fabric::Fabric::open(&info)?;
            fabric.domain(&info)?;
            Ok(())
        });
    }
    let test = "a_malformed_watch_host_keeps_a_domain_from_opening";
    let var = "PSMRAIL_WATCH_HOST";
    assert_eq!(in_child(test, var, OsStr::new("elsewhere")), "ok");
    let long = "h".repeat(256);
    let values = [text_junk("elsewhere"), vec![os(&long)]].concat();
    refused_in_children(test, var, &values);
}

#[test]
fn a_malformed_psm_library_is_an_error_even_when_the_engine_is_auto() {
    if std::env::var_os(CHILD_VAR).is_some() {
        return report(|| getinfo(None).map(|_| ()));
    }
    let test = "a_malformed_psm_library_is_an_error_even_when_the_engine_is_auto";
    let values = text_junk("libpsm_infinipath.so.1");
    refused_in_children(test, "PSMRAIL_PSM_LIB", &values);
}
