//! `MrailConfig`: defaults, `FI_OFI_MRAIL_ADDR` (and the deprecated
//! `_STRC`), `FI_OFI_MRAIL_CONFIG`, one test per class of malformed value
//! showing its error message, and discovery's errors about rails naming
//! the variable the rails came from.

use std::net::{IpAddr, Ipv4Addr};

use psmrail::config::{
    AddrStr, ConfigError, MaxSize, MrailConfig, MrailParam, RailAddr, RailPolicy, RailPolicyTable,
    Source,
};
use psmrail::fabric::{getinfo, EngineChoice, Hints, Provider};

const NONE: &[(&str, &str)] = &[];

fn mrail(vars: &[(&str, &str)]) -> Result<MrailConfig, ConfigError> {
    MrailConfig::from_vars(vars)
}

fn config_err(value: &str) -> ConfigError {
    match mrail(&[("FI_OFI_MRAIL_CONFIG", value)]) {
        Ok(cfg) => panic!("{value:?} was accepted as {}", cfg.policy_table()),
        Err(e) => e,
    }
}

fn addr_err(value: &str) -> ConfigError {
    match mrail(&[("FI_OFI_MRAIL_ADDR", value)]) {
        Ok(cfg) => panic!("{value:?} was accepted as {:?}", cfg.rails()),
        Err(e) => e,
    }
}

#[test]
fn defaults() {
    let cfg = mrail(NONE).unwrap();
    assert!(cfg.rails().is_empty());
    assert_eq!(cfg.policy_table(), &RailPolicyTable::default());
    assert_eq!(
        cfg.policy_table().to_string(),
        "16384:fixed,ULONG_MAX:striping"
    );
    assert_eq!(cfg.policy_for(0), RailPolicy::Fixed);
    assert_eq!(cfg.policy_for(16384), RailPolicy::Fixed);
    assert_eq!(cfg.policy_for(16385), RailPolicy::Striping);
    assert_eq!(cfg.policy_for(u64::MAX), RailPolicy::Striping);
    assert_eq!(cfg.source(MrailParam::Addr), Source::Default);
    assert_eq!(cfg.source(MrailParam::Config), Source::Default);
    assert!(cfg.warnings().is_empty());
    assert_eq!(cfg, MrailConfig::default());
}

#[test]
fn addr_list_is_parsed_in_rail_order() {
    let cfg = mrail(&[(
        "FI_OFI_MRAIL_ADDR",
        "ib0,192.168.1.7,fi_sockaddr_in://10.0.0.1:4000,fe80::1,login-node.cluster.example",
    )])
    .unwrap();
    assert_eq!(
        cfg.rails(),
        [
            RailAddr::InterfaceOrHost("ib0".into()),
            RailAddr::Ip(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 7))),
            RailAddr::AddrStr(AddrStr::SockaddrIn {
                ip: Some(Ipv4Addr::new(10, 0, 0, 1)),
                port: Some(4000)
            }),
            RailAddr::Ip("fe80::1".parse().unwrap()),
            RailAddr::Host("login-node.cluster.example".into()),
        ]
    );
    assert_eq!(
        cfg.source(MrailParam::Addr),
        Source::Env("FI_OFI_MRAIL_ADDR")
    );
    assert!(cfg.warnings().is_empty());
}

#[test]
fn strc_is_used_when_addr_is_unset_with_a_deprecation_warning() {
    let cfg = mrail(&[("FI_OFI_MRAIL_ADDR_STRC", "eth0,eth1")]).unwrap();
    assert_eq!(cfg.rails().len(), 2);
    assert_eq!(
        cfg.source(MrailParam::Addr),
        Source::Env("FI_OFI_MRAIL_ADDR_STRC")
    );
    let warnings: Vec<String> = cfg.warnings().iter().map(|w| w.to_string()).collect();
    assert_eq!(
        warnings,
        ["FI_OFI_MRAIL_ADDR_STRC: is deprecated; use FI_OFI_MRAIL_ADDR instead"]
    );
    assert!(cfg
        .to_string()
        .contains("warning: FI_OFI_MRAIL_ADDR_STRC: is deprecated"));
}

#[test]
fn addr_wins_over_strc_and_strc_is_reported_as_ignored() {
    let cfg = mrail(&[
        ("FI_OFI_MRAIL_ADDR_STRC", "eth0,eth1,eth2"),
        ("FI_OFI_MRAIL_ADDR", "ib0"),
    ])
    .unwrap();
    assert_eq!(cfg.rails(), [RailAddr::InterfaceOrHost("ib0".into())]);
    assert_eq!(
        cfg.source(MrailParam::Addr),
        Source::Env("FI_OFI_MRAIL_ADDR")
    );
    assert_eq!(cfg.warnings().len(), 1);
    assert_eq!(cfg.warnings()[0].var(), "FI_OFI_MRAIL_ADDR_STRC");
    assert!(cfg.warnings()[0]
        .message()
        .starts_with("is ignored because FI_OFI_MRAIL_ADDR is set"));
    // A malformed STRC does not matter when ADDR is set ...
    assert!(mrail(&[
        ("FI_OFI_MRAIL_ADDR", "ib0"),
        ("FI_OFI_MRAIL_ADDR_STRC", ",,")
    ])
    .is_ok());
    // ... and a set-but-empty ADDR still wins (and is an error).
    let e = mrail(&[
        ("FI_OFI_MRAIL_ADDR", ""),
        ("FI_OFI_MRAIL_ADDR_STRC", "eth0"),
    ])
    .unwrap_err();
    assert_eq!(e.var(), "FI_OFI_MRAIL_ADDR");
}

#[test]
fn strc_errors_name_strc() {
    let e = mrail(&[("FI_OFI_MRAIL_ADDR_STRC", "eth0,")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "FI_OFI_MRAIL_ADDR_STRC=\"eth0,\": item \"\" at byte 5: empty item; expected an \
         FI_ADDR_STR address (<fmt>://...), an IPv4 address as four decimal octets 0-255 \
         without leading zeros, an IPv6 address, a host name or a network interface name"
    );
}

#[test]
fn addr_empty_item_is_an_error() {
    assert_eq!(
        addr_err("eth0,,eth1").to_string(),
        "FI_OFI_MRAIL_ADDR=\"eth0,,eth1\": item \"\" at byte 5: empty item; expected an \
         FI_ADDR_STR address (<fmt>://...), an IPv4 address as four decimal octets 0-255 \
         without leading zeros, an IPv6 address, a host name or a network interface name"
    );
    assert_eq!(addr_err("").position(), 0);
    assert_eq!(addr_err(",eth0").position(), 0);
    assert_eq!(addr_err("eth0,").position(), 5);
}

#[test]
fn addr_malformed_fi_addr_str_is_an_error() {
    assert_eq!(
        addr_err("eth0,fi_sockaddr_in://10.0.0.300:80").to_string(),
        "FI_OFI_MRAIL_ADDR=\"eth0,fi_sockaddr_in://10.0.0.300:80\": item \
         \"fi_sockaddr_in://10.0.0.300:80\" at byte 5: \"10.0.0.300\" is not an IPv4 address; \
         expected fi_sockaddr_in://<ipv4>[:<port>] or fi_sockaddr_in://:<port>"
    );
    assert_eq!(
        addr_err("fi_sockaddr_in://10.0.0.1:99999").problem(),
        Some("port 99999 is out of range")
    );
    assert_eq!(
        addr_err("fi_sockaddr_in6://fe80::1").problem(),
        Some("expected '[' before the address")
    );
    assert_eq!(
        addr_err("fi_addr_psmx2://12").problem(),
        Some("1 ':'-separated hex numbers, expected 2")
    );
}

#[test]
fn addr_unknown_or_unsupported_format_is_an_error() {
    assert_eq!(
        addr_err("tcp://10.0.0.1").to_string(),
        "FI_OFI_MRAIL_ADDR=\"tcp://10.0.0.1\": item \"tcp://10.0.0.1\" at byte 0: unknown \
         FI_ADDR_STR format \"tcp\"; expected an FI_ADDR_STR format: fi_sockaddr_in, \
         fi_sockaddr_in6, fi_sockaddr_ib, fi_addr_psmx, fi_addr_psmx2, fi_addr_psmx3, \
         fi_addr_opx, fi_addr_efa or fi_addr_ib_ud"
    );
    assert_eq!(
        addr_err("FI_ADDR_MLX://1").problem(),
        Some("fi_addr_mlx addresses cannot be converted (libfabric returns FI_ENOSYS)")
    );
}

#[test]
fn addr_word_that_is_no_name_is_an_error() {
    assert_eq!(
        addr_err("eth0,my nic").to_string(),
        "FI_OFI_MRAIL_ADDR=\"eth0,my nic\": item \"my nic\" at byte 5: \"my nic\" is neither an \
         IP address, a host name nor an interface name; expected an FI_ADDR_STR address \
         (<fmt>://...), an IPv4 address as four decimal octets 0-255 without leading zeros, an \
         IPv6 address, a host name or a network interface name"
    );
    for bad in [" eth0", "eth0 ", "a/b", "-bad-.example.org-x", "ü"] {
        addr_err(bad);
    }
}

#[test]
fn addr_word_that_reads_as_a_number_is_an_error() {
    // C's resolver would read these as IPv4 addresses (0.0.0.16,
    // 0.0.0.8, 127.0.0.1, 1.0.0.5) and fail only when the rail opens.
    let e = addr_err("eth0,0x10");
    assert_eq!((e.item(), e.position()), ("0x10", 5));
    assert_eq!(
        e.problem(),
        Some(
            "\"0x10\" reads as a number, not a name (a resolver would take it for an IPv4 \
             address in inet_aton's hex, octal or short form)"
        )
    );
    for bad in [
        "010",
        "0177.0.0.1",
        "1.5",
        "127.1",
        "2130706433",
        "-1",
        "1e3",
    ] {
        assert_eq!(addr_err(bad).item(), bad);
    }
    let e = mrail(&[("FI_OFI_MRAIL_ADDR_STRC", "0x10")]).unwrap_err();
    assert_eq!(e.var(), "FI_OFI_MRAIL_ADDR_STRC");
}

#[test]
fn config_accepts_the_documented_forms() {
    let cfg = mrail(&[(
        "FI_OFI_MRAIL_CONFIG",
        "0:fixed,4096:Round-Robin,ULONG_MAX:STRIPING",
    )])
    .unwrap();
    let table = cfg.policy_table();
    assert_eq!(
        table.entries(),
        [
            (MaxSize::new(0), RailPolicy::Fixed),
            (MaxSize::new(4096), RailPolicy::RoundRobin),
            (MaxSize::UNBOUNDED, RailPolicy::Striping),
        ]
    );
    assert_eq!(
        table.to_string(),
        "0:fixed,4096:round-robin,ULONG_MAX:striping"
    );
    assert_eq!(cfg.policy_for(0), RailPolicy::Fixed);
    assert_eq!(cfg.policy_for(1), RailPolicy::RoundRobin);
    assert_eq!(cfg.policy_for(4097), RailPolicy::Striping);
    assert_eq!(
        cfg.source(MrailParam::Config),
        Source::Env("FI_OFI_MRAIL_CONFIG")
    );
}

#[test]
fn config_unbounded_spellings_are_equal() {
    let tables: Vec<RailPolicyTable> = ["-1", "ULONG_MAX", "18446744073709551615"]
        .iter()
        .map(|s| format!("100:fixed,{s}:striping").parse().unwrap())
        .collect();
    assert_eq!(tables[0], tables[1]);
    assert_eq!(tables[1], tables[2]);
    assert!(tables[0].is_last_unbounded());
    // Other negative numbers and other words are not "unbounded".
    assert_eq!(
        config_err("-2:fixed").to_string(),
        "FI_OFI_MRAIL_CONFIG=\"-2:fixed\": item \"-2:fixed\" at byte 0: \"-2\" is negative (only \
         -1 means unbounded); expected <max_size> as a decimal byte count, ULONG_MAX, -1 or \
         18446744073709551615 (unbounded)"
    );
    assert!(config_err("ulong_max:fixed")
        .problem()
        .unwrap()
        .contains("not a decimal size"));
}

#[test]
fn config_unsorted_is_an_error() {
    assert_eq!(
        config_err("65536:fixed,4096:striping").to_string(),
        "FI_OFI_MRAIL_CONFIG=\"65536:fixed,4096:striping\": item \"4096:striping\" at byte 12: \
         unsorted: max_size 4096 after 65536; expected strictly ascending <max_size> values"
    );
    assert_eq!(
        config_err("-1:striping,16384:fixed").problem(),
        Some("unsorted: max_size 16384 after ULONG_MAX")
    );
}

#[test]
fn config_duplicate_is_an_error() {
    assert_eq!(
        config_err("16384:fixed,16384:striping").to_string(),
        "FI_OFI_MRAIL_CONFIG=\"16384:fixed,16384:striping\": item \"16384:striping\" at byte 12: \
         duplicate max_size 16384; expected strictly ascending <max_size> values"
    );
    assert_eq!(
        config_err("-1:fixed,ULONG_MAX:striping").problem(),
        Some("duplicate max_size ULONG_MAX")
    );
}

#[test]
fn config_empty_items_are_errors() {
    assert_eq!(
        config_err("").to_string(),
        "FI_OFI_MRAIL_CONFIG=\"\": item \"\" at byte 0: empty item; expected <max_size>:<policy>"
    );
    assert_eq!(config_err("1:fixed,,2:striping").position(), 8);
    assert_eq!(config_err("1:fixed,").position(), 8);
    assert_eq!(config_err(",1:fixed").position(), 0);
}

#[test]
fn config_unknown_policy_is_an_error() {
    assert_eq!(
        config_err("16384:fixed,-1:stripe").to_string(),
        "FI_OFI_MRAIL_CONFIG=\"16384:fixed,-1:stripe\": item \"-1:stripe\" at byte 12: unknown \
         policy \"stripe\"; expected <policy> fixed, round-robin or striping"
    );
    // C defaulted a missing policy to fixed.
    assert_eq!(
        config_err("16384:").problem(),
        Some("the policy is missing")
    );
    assert_eq!(
        config_err("16384").problem(),
        Some("no ':<policy>' after the size")
    );
    assert!(config_err("1:fixed:x")
        .problem()
        .unwrap()
        .contains("unknown policy \"fixed:x\""));
    assert!(config_err("1: fixed")
        .problem()
        .unwrap()
        .contains("unknown policy"));
}

#[test]
fn config_non_numeric_size_is_an_error() {
    // C read any non-number as ULONG_MAX.
    assert_eq!(
        config_err("abc:fixed").to_string(),
        "FI_OFI_MRAIL_CONFIG=\"abc:fixed\": item \"abc:fixed\" at byte 0: \"abc\" is not a \
         decimal size; expected <max_size> as a decimal byte count, ULONG_MAX, -1 or \
         18446744073709551615 (unbounded)"
    );
    assert_eq!(config_err(":fixed").problem(), Some("the size is missing"));
    // C took these as hex and octal.
    assert!(config_err("0x4000:fixed")
        .problem()
        .unwrap()
        .contains("not a decimal size"));
    assert!(config_err("040000:fixed")
        .problem()
        .unwrap()
        .contains("leading zero"));
    assert!(config_err("16k:fixed")
        .problem()
        .unwrap()
        .contains("not a decimal size"));
}

#[test]
fn config_overflow_is_an_error() {
    assert_eq!(
        config_err("18446744073709551616:fixed").problem(),
        Some("\"18446744073709551616\" overflows a 64-bit integer")
    );
}

#[test]
fn config_more_than_eight_entries_is_an_error() {
    let eight = (1..=8)
        .map(|i| format!("{i}:fixed"))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        mrail(&[("FI_OFI_MRAIL_CONFIG", &eight)])
            .unwrap()
            .policy_table()
            .entries()
            .len(),
        8
    );
    let nine = format!("{eight},9:striping");
    assert_eq!(
        config_err(&nine).to_string(),
        format!(
            "FI_OFI_MRAIL_CONFIG=\"{nine}\": item \"9:striping\" at byte {}: entry 9 is one too \
             many; expected at most 8 <max_size>:<policy> entries",
            eight.len() + 1
        )
    );
}

#[test]
fn config_bounded_last_entry_is_the_catch_all_with_a_warning() {
    let cfg = mrail(&[("FI_OFI_MRAIL_CONFIG", "1024:fixed,65536:round-robin")]).unwrap();
    assert_eq!(cfg.policy_for(1 << 30), RailPolicy::RoundRobin);
    let w: Vec<String> = cfg.warnings().iter().map(|w| w.to_string()).collect();
    assert_eq!(
        w,
        ["FI_OFI_MRAIL_CONFIG: the last entry 65536:round-robin is bounded; messages larger than \
          65536 bytes also use round-robin (write ULONG_MAX to make it explicit)"]
    );
    assert!(cfg
        .to_string()
        .contains("messages 65537 bytes and up: round-robin (last entry)"));
}

#[test]
fn builder_overrides_and_drops_stale_address_warnings() {
    let cfg = MrailConfig::builder_from_vars(&[("FI_OFI_MRAIL_ADDR_STRC", "eth0")])
        .unwrap()
        .rails(["ib0".parse().unwrap(), "ib1".parse().unwrap()])
        .policy_table("-1:round-robin".parse().unwrap())
        .build();
    assert_eq!(cfg.rails().len(), 2);
    assert_eq!(cfg.source(MrailParam::Addr), Source::Explicit);
    assert_eq!(cfg.source(MrailParam::Config), Source::Explicit);
    assert!(cfg.warnings().is_empty());
    assert_eq!(cfg.policy_for(1), RailPolicy::RoundRobin);
}

#[test]
fn summary_shows_every_value_and_its_source() {
    let cfg = mrail(&[(
        "FI_OFI_MRAIL_ADDR",
        "eth0,fi_sockaddr_in://10.0.0.1:7,node-17.example.org",
    )])
    .unwrap();
    let text = cfg.to_string();
    let lines: Vec<String> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        lines,
        [
            "mrail configuration:",
            "FI_OFI_MRAIL_ADDR eth0,fi_sockaddr_in://10.0.0.1:7,node-17.example.org [env FI_OFI_MRAIL_ADDR]",
            "FI_OFI_MRAIL_CONFIG 16384:fixed,ULONG_MAX:striping [default]",
            "rail 0: eth0 (interface name, else host name)",
            "rail 1: fi_sockaddr_in://10.0.0.1:7 (fi_sockaddr_in address)",
            "rail 2: node-17.example.org (host name)",
            "messages 0..=16384 bytes: fixed",
            "messages 16385 bytes and up: striping",
        ]
    );
    assert!(MrailConfig::default()
        .to_string()
        .contains("unset (no rails)"));
}

#[test]
fn from_env_reads_the_process_environment_without_changing_it() {
    let before: Vec<_> = std::env::vars_os().collect();
    assert_eq!(
        MrailConfig::from_env(),
        MrailConfig::from_vars(&psmrail::config::ProcessEnv)
    );
    assert_eq!(before, std::env::vars_os().collect::<Vec<_>>());
}

/// Discovery over the soft engine for the multi-rail provider, with `vars`.
fn mrail_getinfo(vars: &[(&'static str, &'static str)]) -> psmrail::Result<()> {
    let hints = Hints::new()
        .engine(EngineChoice::Soft)
        .provider(Provider::Mrail)
        .vars(vars.to_vec());
    getinfo(Some(&hints)).map(|_| ())
}

#[test]
fn errors_about_the_deprecated_address_variable_name_it() {
    let strc = "FI_OFI_MRAIL_ADDR_STRC";
    let cases: [(&[(&str, &str)], &str); 5] = [
        // Parsing.
        (&[(strc, "lo,,lo")], strc),
        (&[(strc, "0x10")], strc),
        // Resolving: an IPv6 rail, a name that resolves to nothing.
        (&[(strc, "lo,fe80::1")], strc),
        (&[(strc, "psmrailnope0")], strc),
        // Counting rates against the rails.
        (&[(strc, "lo,lo"), ("PSMRAIL_MRAIL_RATES", "1000")], strc),
    ];
    for (vars, named) in cases {
        let e = mrail_getinfo(vars).expect_err(&format!("{vars:?}"));
        let text = e.to_string();
        assert!(text.contains(named), "{vars:?}: {text}");
        assert!(
            !text.replace(strc, "").contains("FI_OFI_MRAIL_ADDR"),
            "{vars:?} names FI_OFI_MRAIL_ADDR: {text}"
        );
    }
    // The same through the current variable names that one.
    let e = mrail_getinfo(&[("FI_OFI_MRAIL_ADDR", "lo,fe80::1")]).unwrap_err();
    assert!(e.to_string().contains("FI_OFI_MRAIL_ADDR item"), "{e}");
    assert!(!e.to_string().contains(strc), "{e}");
}

#[test]
fn rail_rates_set_in_code_are_checked_at_discovery() {
    for bad in [0, psmrail::config::MAX_RAIL_RATE + 1, u64::MAX] {
        let cfg = MrailConfig::builder()
            .rails(RailAddr::parse_list("127.0.0.1,127.0.0.1").unwrap())
            .rail_rates([1000, bad])
            .build();
        let hints = Hints::new()
            .engine(EngineChoice::Soft)
            .provider(Provider::Mrail)
            .mrail_config(cfg);
        let e = getinfo(Some(&hints)).unwrap_err();
        assert_eq!(e.kind(), psmrail::ErrorKind::Inval, "{e}");
        assert_eq!(
            e.message(),
            format!(
                "ofi_mrail: PSMRAIL_MRAIL_RATES (set in code) includes {bad} Mbit/s; expected \
                 rates from 1 to 10000000 Mbit/s"
            )
        );
    }
}
