//! `PsmConfig`: defaults, every variable, MPI detection, builders, and one
//! test per class of malformed value showing its error message.
//!
//! No test touches the process environment: values come from slices.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use psmrail::config::{ConfigError, JobUuid, PsmConfig, PsmParam, Source, MPI_LAUNCHER_VARS};
use psmrail::reactor::CpuTopology;

fn topo8() -> CpuTopology {
    CpuTopology {
        online: 8,
        allowed: (0..8).collect(),
    }
}

fn psm(vars: &[(&str, &str)]) -> Result<PsmConfig, ConfigError> {
    PsmConfig::builder_from_vars(vars)?
        .topology(topo8())
        .build()
}

fn err(vars: &[(&str, &str)]) -> ConfigError {
    match psm(vars) {
        Ok(cfg) => panic!("{vars:?} was accepted:\n{cfg}"),
        Err(e) => e,
    }
}

const NONE: &[(&str, &str)] = &[];

#[test]
fn defaults_without_any_variable() {
    let cfg = psm(NONE).unwrap();
    assert_eq!(cfg.uuid(), JobUuid::DEFAULT);
    assert_eq!(
        cfg.uuid().to_string(),
        "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF"
    );
    assert!(cfg.name_server());
    assert!(cfg.tagged_rma());
    assert!(!cfg.am_msg());
    assert_eq!(cfg.delay(), Duration::from_secs(1));
    assert_eq!(cfg.timeout(), Duration::from_secs(5));
    assert!(cfg.graceful_close());
    assert!(cfg.prog_thread());
    assert_eq!(cfg.prog_interval(), Duration::from_micros(1000));
    assert_eq!(cfg.prog_interval_setting(), None);
    assert_eq!(cfg.prog_affinity(), None);
    assert_eq!(cfg.prog_affinity_spec(), None);
    assert_eq!(cfg.mpi_launcher(), None);
    assert!(cfg.warnings().is_empty());
    for p in PsmParam::ALL {
        assert_eq!(cfg.source(p), Source::Default, "{p:?}");
    }
    assert_eq!(cfg, PsmConfig::default());
    assert_eq!(cfg, PsmConfig::builder().build().unwrap());
}

#[test]
fn every_variable_is_read() {
    let cfg = psm(&[
        ("FI_PSM_UUID", "01234567-89ab-cdef-0123-456789ABCDEF"),
        ("FI_PSM_NAME_SERVER", "off"),
        ("FI_PSM_TAGGED_RMA", "0"),
        ("FI_PSM_AM_MSG", "yes"),
        ("FI_PSM_DELAY", "3"),
        ("FI_PSM_TIMEOUT", "10"),
        ("FI_PSM_PROG_THREAD", "FALSE"),
        ("FI_PSM_PROG_INTERVAL", "250"),
        ("FI_PSM_PROG_AFFINITY", "1:2"),
    ])
    .unwrap();
    assert_eq!(
        cfg.uuid().as_bytes(),
        &[
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef
        ]
    );
    assert!(!cfg.name_server());
    assert!(!cfg.tagged_rma());
    assert!(cfg.am_msg());
    assert_eq!(cfg.delay(), Duration::from_secs(3));
    assert_eq!(cfg.timeout(), Duration::from_secs(10));
    assert!(!cfg.prog_thread());
    assert_eq!(cfg.prog_interval(), Duration::from_micros(250));
    assert_eq!(cfg.prog_affinity().unwrap().to_string(), "1:2");
    for p in PsmParam::ALL {
        assert_eq!(cfg.source(p), Source::Env(p.env_name()), "{p:?}");
    }
}

#[test]
fn booleans_accept_the_libfabric_spellings() {
    for var in [
        "FI_PSM_NAME_SERVER",
        "FI_PSM_TAGGED_RMA",
        "FI_PSM_AM_MSG",
        "FI_PSM_PROG_THREAD",
    ] {
        for (text, want) in [
            ("1", true),
            ("0", false),
            ("yes", true),
            ("No", false),
            ("TRUE", true),
            ("false", false),
            ("On", true),
            ("OFF", false),
        ] {
            let cfg = psm(&[(var, text)]).unwrap();
            let got = match var {
                "FI_PSM_NAME_SERVER" => cfg.name_server(),
                "FI_PSM_TAGGED_RMA" => cfg.tagged_rma(),
                "FI_PSM_AM_MSG" => cfg.am_msg(),
                _ => cfg.prog_thread(),
            };
            assert_eq!(got, want, "{var}={text}");
        }
    }
}

#[test]
fn bool_garbage_is_an_error() {
    let e = err(&[("FI_PSM_TAGGED_RMA", "maybe")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_TAGGED_RMA=\"maybe\": item \"maybe\" at byte 0: \"maybe\" is not a boolean; \
         expected a boolean: 1/0, yes/no, true/false or on/off (case-insensitive)"
    );
    // C kept the default on these with a warning; psmrail refuses them.
    for bad in ["", " 1", "1 ", "2", "01", "y", "enabled"] {
        let e = err(&[("FI_PSM_AM_MSG", bad)]);
        assert_eq!(
            (e.var(), e.value(), e.position()),
            ("FI_PSM_AM_MSG", bad, 0)
        );
    }
}

#[test]
fn mpi_launchers_switch_the_name_server_default_off() {
    assert_eq!(
        MPI_LAUNCHER_VARS,
        ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"]
    );
    for var in MPI_LAUNCHER_VARS {
        // Any value counts, even an empty one: C checked getenv() != NULL.
        for value in ["0", ""] {
            let cfg = psm(&[(var, value)]).unwrap();
            assert!(!cfg.name_server(), "{var}");
            assert_eq!(cfg.source(PsmParam::NameServer), Source::MpiDefault(var));
            assert_eq!(cfg.mpi_launcher(), Some(var));
        }
    }
    // The first one in the documented order is reported.
    let cfg = psm(&[("PMIX_RANK", "1"), ("OMPI_COMM_WORLD_RANK", "1")]).unwrap();
    assert_eq!(cfg.mpi_launcher(), Some("OMPI_COMM_WORLD_RANK"));
    // Other MPI-ish variables do not count.
    assert!(psm(&[("OMPI_COMM_WORLD_SIZE", "4"), ("PMI_SIZE", "4")])
        .unwrap()
        .name_server());
}

#[test]
fn explicit_name_server_wins_over_mpi_detection() {
    let cfg = psm(&[("PMI_RANK", "3"), ("FI_PSM_NAME_SERVER", "1")]).unwrap();
    assert!(cfg.name_server());
    assert_eq!(
        cfg.source(PsmParam::NameServer),
        Source::Env("FI_PSM_NAME_SERVER")
    );
    assert_eq!(cfg.mpi_launcher(), Some("PMI_RANK"));
    // And in code, over both.
    let cfg = PsmConfig::builder_from_vars(&[("PMI_RANK", "3")])
        .unwrap()
        .name_server(true)
        .build()
        .unwrap();
    assert!(cfg.name_server());
    assert_eq!(cfg.source(PsmParam::NameServer), Source::Explicit);
}

#[test]
fn uuid_accepts_the_canonical_form_in_any_case() {
    let upper = psm(&[("FI_PSM_UUID", "ABCDEF01-2345-6789-ABCD-EF0123456789")]).unwrap();
    let lower = psm(&[("FI_PSM_UUID", "abcdef01-2345-6789-abcd-ef0123456789")]).unwrap();
    assert_eq!(upper.uuid(), lower.uuid());
    assert_eq!(
        lower.uuid().to_string(),
        "ABCDEF01-2345-6789-ABCD-EF0123456789"
    );
}

#[test]
fn uuid_too_short_is_an_error() {
    let e = err(&[("FI_PSM_UUID", "0FFF0FFF-0000")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_UUID=\"0FFF0FFF-0000\": item \"0FFF0FFF-0000\" at byte 0: 13 characters is too \
         short for a UUID (36); expected a UUID in the canonical 8-4-4-4-12 hex form, e.g. \
         0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF"
    );
    assert_eq!(
        err(&[("FI_PSM_UUID", "")]).problem(),
        Some("0 characters is too short for a UUID (36)")
    );
}

#[test]
fn uuid_too_long_is_an_error() {
    let e = err(&[("FI_PSM_UUID", "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF00")]);
    assert_eq!((e.item(), e.position()), ("00", 36));
    assert!(e
        .to_string()
        .contains("2 characters of trailing text after the 36-character UUID"));
}

#[test]
fn uuid_bad_character_is_an_error() {
    let e = err(&[("FI_PSM_UUID", "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFG")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_UUID=\"0FFF0FFF-0000-0000-0000-0FFF0FFF0FFG\": item \"G\" at byte 35: 'G' is not \
         a hex digit; expected a UUID in the canonical 8-4-4-4-12 hex form, e.g. \
         0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF"
    );
    let e = err(&[("FI_PSM_UUID", "0FFF0FFF-0000-0000-0000-0FFF0FFF0FFé")]);
    assert_eq!((e.item(), e.position()), ("é", 35));
}

#[test]
fn uuid_wrong_grouping_is_an_error() {
    // 9-3-4-4-12: the dash is one place late.
    let e = err(&[("FI_PSM_UUID", "0FFF0FFF0-000-0000-0000-0FFF0FFF0FFF")]);
    assert_eq!((e.item(), e.position()), ("0", 8));
    assert!(e
        .to_string()
        .contains("found '0' where a '-' must separate the groups"));
    // 7-5-...: a dash inside the first group.
    let e = err(&[("FI_PSM_UUID", "0FFF0FF-F0000-0000-0000-0FFF0FFF0FFF")]);
    assert_eq!((e.item(), e.position()), ("-", 7));
    assert!(e.to_string().contains("a '-' inside a group"));
    // No dashes at all (32 hex digits) and braces are not the canonical form.
    assert!(psm(&[("FI_PSM_UUID", "0FFF0FFF000000000000")]).is_err());
    assert!(psm(&[("FI_PSM_UUID", "{0FFF0FFF-0000-0000-0000-0FFF0FFF0FF}")]).is_err());
}

#[test]
fn seconds_reject_junk() {
    let e = err(&[("FI_PSM_DELAY", "2c")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_DELAY=\"2c\": item \"2c\" at byte 0: \"2c\" is not a decimal integer; expected \
         a non-negative decimal number of seconds, at most 60"
    );
    for junk in ["", "+1", " 1", "1 ", "0x10", "1.5", "1s", "one"] {
        let e = err(&[("FI_PSM_TIMEOUT", junk)]);
        assert_eq!(e.var(), "FI_PSM_TIMEOUT", "{junk:?}");
    }
}

#[test]
fn seconds_reject_leading_zeros_that_c_read_as_octal() {
    let e = err(&[("FI_PSM_DELAY", "010")]);
    assert!(
        e.to_string()
            .contains("\"010\" has a leading zero (C would have read it as octal)"),
        "{e}"
    );
}

#[test]
fn seconds_reject_overflow() {
    let e = err(&[("FI_PSM_TIMEOUT", "99999999999999999999")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_TIMEOUT=\"99999999999999999999\": item \"99999999999999999999\" at byte 0: \
         \"99999999999999999999\" overflows a 64-bit integer; expected a non-negative decimal \
         number of seconds, at most 3600"
    );
}

#[test]
fn duration_maxima() {
    assert_eq!(PsmConfig::MAX_DELAY, Duration::from_secs(60));
    assert_eq!(PsmConfig::MAX_TIMEOUT, Duration::from_secs(3600));
    assert_eq!(PsmConfig::MAX_PROG_INTERVAL, Duration::from_secs(1));
    // The defaults are within them.
    assert!(psmrail::config::DEFAULT_DELAY <= PsmConfig::MAX_DELAY);
    assert!(psmrail::config::DEFAULT_TIMEOUT <= PsmConfig::MAX_TIMEOUT);
    assert!(psmrail::config::DEFAULT_PROG_INTERVAL <= PsmConfig::MAX_PROG_INTERVAL);
}

#[test]
fn delay_above_a_minute_is_an_error() {
    // The largest u64 used to be accepted, and close then slept for good.
    let e = err(&[("FI_PSM_DELAY", "18446744073709551615")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_DELAY=\"18446744073709551615\": item \"18446744073709551615\" at byte 0: \
         18446744073709551615 s is more than the maximum, 60 s; expected a non-negative decimal \
         number of seconds, at most 60"
    );
    let e = err(&[("FI_PSM_DELAY", "61")]);
    assert_eq!(
        (e.var(), e.value(), e.item(), e.position()),
        ("FI_PSM_DELAY", "61", "61", 0)
    );
    assert_eq!(e.problem(), Some("61 s is more than the maximum, 60 s"));
    assert_eq!(
        e.expected(),
        "a non-negative decimal number of seconds, at most 60"
    );
    let cfg = psm(&[("FI_PSM_DELAY", "60")]).unwrap();
    assert_eq!(cfg.delay(), PsmConfig::MAX_DELAY);
}

#[test]
fn timeout_above_an_hour_is_an_error() {
    let e = err(&[("FI_PSM_TIMEOUT", "3601")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_TIMEOUT=\"3601\": item \"3601\" at byte 0: 3601 s is more than the maximum, \
         3600 s; expected a non-negative decimal number of seconds, at most 3600"
    );
    let e = err(&[("FI_PSM_TIMEOUT", "18446744073709551615")]);
    assert_eq!(e.var(), "FI_PSM_TIMEOUT");
    assert!(
        e.problem().unwrap().contains("more than the maximum"),
        "{e}"
    );
    let cfg = psm(&[("FI_PSM_TIMEOUT", "3600")]).unwrap();
    assert_eq!(cfg.timeout(), PsmConfig::MAX_TIMEOUT);
}

#[test]
fn prog_interval_above_a_second_is_an_error() {
    let e = err(&[("FI_PSM_PROG_INTERVAL", "1000001")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_PROG_INTERVAL=\"1000001\": item \"1000001\" at byte 0: 1000001 us is more than \
         the maximum, 1000000 us (1s); expected a non-negative decimal number of \
         microseconds, at most 1000000 (unset: 1 with an affinity, else 1000)"
    );
    let e = err(&[("FI_PSM_PROG_INTERVAL", "9223372036854775807")]);
    assert_eq!(e.var(), "FI_PSM_PROG_INTERVAL");
    let cfg = psm(&[("FI_PSM_PROG_INTERVAL", "1000000")]).unwrap();
    assert_eq!(cfg.prog_interval(), PsmConfig::MAX_PROG_INTERVAL);
}

#[test]
fn builder_refuses_durations_above_the_maxima() {
    let over = |d: Duration| d + Duration::from_nanos(1);
    let cases = [
        (
            PsmConfig::builder().delay(over(PsmConfig::MAX_DELAY)),
            "FI_PSM_DELAY",
            "60.000000001s",
            "60.000000001s (set in code) is more than the maximum, 60s",
            "a delay of at most 60 s",
        ),
        (
            PsmConfig::builder().timeout(Duration::from_secs(3601)),
            "FI_PSM_TIMEOUT",
            "3601s",
            "3601s (set in code) is more than the maximum, 3600s",
            "a timeout of at most 3600 s (1 hour)",
        ),
        (
            PsmConfig::builder().prog_interval(Some(over(PsmConfig::MAX_PROG_INTERVAL))),
            "FI_PSM_PROG_INTERVAL",
            "1.000000001s",
            "1.000000001s (set in code) is more than the maximum, 1s",
            "an interval of at most 1 s, or None for the default",
        ),
    ];
    for (builder, var, value, problem, expected) in cases {
        let e = builder.build().unwrap_err();
        assert_eq!(
            (e.var(), e.value(), e.item(), e.position()),
            (var, value, value, 0)
        );
        assert_eq!(e.problem(), Some(problem));
        assert_eq!(e.expected(), expected);
        let e: psmrail::Error = e.into();
        assert_eq!(e.kind(), psmrail::ErrorKind::Inval);
    }
    // The largest durations there are, too.
    for builder in [
        PsmConfig::builder().delay(Duration::MAX),
        PsmConfig::builder().timeout(Duration::MAX),
        PsmConfig::builder().prog_interval(Some(Duration::MAX)),
    ] {
        assert!(builder.build().is_err());
    }
    // A setter overrides a variable, and is checked all the same.
    let e = PsmConfig::builder_from_vars(&[("FI_PSM_DELAY", "2")])
        .unwrap()
        .delay(Duration::from_secs(3600))
        .build()
        .unwrap_err();
    assert_eq!(e.var(), "FI_PSM_DELAY");
    // The maxima themselves are accepted.
    let cfg = PsmConfig::builder()
        .delay(PsmConfig::MAX_DELAY)
        .timeout(PsmConfig::MAX_TIMEOUT)
        .prog_interval(Some(PsmConfig::MAX_PROG_INTERVAL))
        .build()
        .unwrap();
    assert_eq!(
        (cfg.delay(), cfg.timeout(), cfg.prog_interval()),
        (
            PsmConfig::MAX_DELAY,
            PsmConfig::MAX_TIMEOUT,
            PsmConfig::MAX_PROG_INTERVAL
        )
    );
}

#[test]
fn seconds_reject_negative_values() {
    let e = err(&[("FI_PSM_DELAY", "-1")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_DELAY=\"-1\": item \"-1\" at byte 0: \"-1\" is negative; expected a \
         non-negative decimal number of seconds, at most 60"
    );
    assert_eq!(
        err(&[("FI_PSM_TIMEOUT", "-5")]).problem(),
        Some("\"-5\" is negative")
    );
}

#[test]
fn timeout_zero_skips_the_graceful_close() {
    let cfg = psm(&[("FI_PSM_TIMEOUT", "0")]).unwrap();
    assert_eq!(cfg.timeout(), Duration::ZERO);
    assert!(!cfg.graceful_close());
    assert!(cfg.to_string().contains("0 s (graceful close skipped)"));
}

#[test]
fn prog_interval_default_depends_on_the_affinity() {
    let cfg = psm(&[("FI_PSM_PROG_AFFINITY", "0")]).unwrap();
    assert_eq!(cfg.prog_interval(), Duration::from_micros(1));
    assert_eq!(cfg.prog_interval_setting(), None);
    let cfg = psm(NONE).unwrap();
    assert_eq!(cfg.prog_interval(), Duration::from_micros(1000));
}

#[test]
fn negative_prog_interval_is_refused_not_read_as_the_default() {
    let e = err(&[("FI_PSM_PROG_INTERVAL", "-1")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_PROG_INTERVAL=\"-1\": item \"-1\" at byte 0: \"-1\" is negative; leave \
         FI_PSM_PROG_INTERVAL unset for the default interval; expected a non-negative decimal \
         number of microseconds, at most 1000000 (unset: 1 with an affinity, else 1000)"
    );
    for v in ["-1000", "-9223372036854775808"] {
        let e = err(&[("FI_PSM_PROG_INTERVAL", v), ("FI_PSM_PROG_AFFINITY", "3")]);
        assert_eq!((e.var(), e.item()), ("FI_PSM_PROG_INTERVAL", v));
        assert!(e.problem().unwrap().contains("is negative"), "{e}");
    }
}

#[test]
fn explicit_prog_interval_wins_even_with_an_affinity() {
    let cfg = psm(&[("FI_PSM_PROG_INTERVAL", "0"), ("FI_PSM_PROG_AFFINITY", "3")]).unwrap();
    assert_eq!(cfg.prog_interval(), Duration::ZERO);
    let cfg = psm(&[("FI_PSM_PROG_INTERVAL", "2000")]).unwrap();
    assert_eq!(cfg.prog_interval(), Duration::from_millis(2));
}

#[test]
fn prog_interval_rejects_junk_and_overflow() {
    let e = err(&[("FI_PSM_PROG_INTERVAL", "1ms")]);
    assert_eq!(
        e.to_string(),
        "FI_PSM_PROG_INTERVAL=\"1ms\": item \"1ms\" at byte 0: \"1ms\" is not a decimal integer; \
         expected a non-negative decimal number of microseconds, at most 1000000 (unset: 1 \
         with an affinity, else 1000)"
    );
    let e = err(&[("FI_PSM_PROG_INTERVAL", "-99999999999999999999")]);
    assert_eq!(
        e.problem(),
        Some("\"-99999999999999999999\" overflows a 64-bit integer")
    );
    let e = err(&[("FI_PSM_PROG_INTERVAL", "18446744073709551616")]);
    assert!(e.to_string().contains("overflows"), "{e}");
    let e = err(&[("FI_PSM_PROG_INTERVAL", "18446744073709551615")]);
    assert!(e.to_string().contains("more than the maximum"), "{e}");
    assert!(psm(&[("FI_PSM_PROG_INTERVAL", "-0")]).is_err());
}

#[test]
fn values_that_are_not_utf8_are_errors() {
    let vars = [("FI_PSM_AM_MSG", OsString::from_vec(b"o\xffn".to_vec()))];
    let e = PsmConfig::from_vars(&vars).unwrap_err();
    assert_eq!(
        e.to_string(),
        "FI_PSM_AM_MSG=\"o\u{fffd}n\": item \"\u{fffd}\" at byte 1: the value is not valid UTF-8; \
         expected UTF-8 text"
    );
}

#[test]
fn builder_overrides_variables_and_marks_them_explicit() {
    let cfg = PsmConfig::builder_from_vars(&[("FI_PSM_DELAY", "7"), ("FI_PSM_AM_MSG", "1")])
        .unwrap()
        .delay(Duration::from_secs(2))
        .uuid(JobUuid::from_bytes([7; 16]))
        .prog_interval(Some(Duration::from_micros(5)))
        .build()
        .unwrap();
    assert_eq!(cfg.delay(), Duration::from_secs(2));
    assert_eq!(cfg.source(PsmParam::Delay), Source::Explicit);
    assert_eq!(cfg.uuid(), JobUuid::from_bytes([7; 16]));
    assert!(cfg.am_msg());
    assert_eq!(cfg.source(PsmParam::AmMsg), Source::Env("FI_PSM_AM_MSG"));
    assert_eq!(cfg.prog_interval(), Duration::from_micros(5));
}

#[test]
fn affinity_without_progress_thread_warns() {
    let cfg = psm(&[
        ("FI_PSM_PROG_THREAD", "0"),
        ("FI_PSM_PROG_AFFINITY", "1"),
        ("FI_PSM_PROG_INTERVAL", "10"),
    ])
    .unwrap();
    let w: Vec<String> = cfg.warnings().iter().map(|w| w.to_string()).collect();
    assert_eq!(
        w,
        [
            "FI_PSM_PROG_AFFINITY: has no effect: FI_PSM_PROG_THREAD is off, so no progress thread runs",
            "FI_PSM_PROG_INTERVAL: has no effect: FI_PSM_PROG_THREAD is off, so no progress thread runs",
        ]
    );
    assert!(cfg
        .to_string()
        .contains("warning: FI_PSM_PROG_AFFINITY: has no effect"));
}

#[test]
fn summary_shows_every_value_and_its_source() {
    let cfg = psm(&[("PMIX_RANK", "0"), ("FI_PSM_PROG_AFFINITY", "0:1,-1")]).unwrap();
    let text = cfg.to_string();
    assert!(text.starts_with("psm configuration:\n"), "{text}");
    for p in PsmParam::ALL {
        assert!(text.contains(p.env_name()), "{p:?} missing:\n{text}");
    }
    let line = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        line("FI_PSM_UUID"),
        "FI_PSM_UUID 0FFF0FFF-0000-0000-0000-0FFF0FFF0FFF [default]"
    );
    assert_eq!(
        line("FI_PSM_NAME_SERVER"),
        "FI_PSM_NAME_SERVER off [MPI default: PMIX_RANK is set]"
    );
    assert_eq!(
        line("FI_PSM_PROG_AFFINITY"),
        "FI_PSM_PROG_AFFINITY 0:1,-1 -> CPUs 0:1,7 [env FI_PSM_PROG_AFFINITY]"
    );
    assert_eq!(
        line("FI_PSM_PROG_INTERVAL"),
        "FI_PSM_PROG_INTERVAL 1 us (affinity set) [default]"
    );
    assert_eq!(line("FI_PSM_DELAY"), "FI_PSM_DELAY 1 s [default]");
}

#[test]
fn the_first_malformed_variable_is_reported_and_converts_to_inval() {
    let e = err(&[("FI_PSM_UUID", "x"), ("FI_PSM_DELAY", "x")]);
    assert_eq!(e.var(), "FI_PSM_UUID");
    let e: psmrail::Error = e.into();
    assert_eq!(e.kind(), psmrail::ErrorKind::Inval);
    assert!(
        e.to_string().starts_with("FI_EINVAL: FI_PSM_UUID=\"x\""),
        "{e}"
    );
}

#[test]
fn from_env_reads_the_process_environment_without_changing_it() {
    let before: Vec<_> = std::env::vars_os().collect();
    let a = PsmConfig::from_env();
    let b = PsmConfig::from_vars(&psmrail::config::ProcessEnv);
    assert_eq!(a, b);
    let after: Vec<_> = std::env::vars_os().collect();
    assert_eq!(before, after);
}
