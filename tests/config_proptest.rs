//! Property tests: `Display` of a parsed value parses back to the same
//! value, and no parser panics on arbitrary input.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::ffi::OsStringExt;

use proptest::prelude::*;
use psmrail::config::{
    AddrStr, AffinityItem, AffinitySpec, JobUuid, MaxSize, MrailConfig, PsmConfig, PsmParam,
    RailAddr, RailPolicy, RailPolicyTable, MAX_CORE_ID, MIN_CORE_ID,
};
use psmrail::hooks::config::{check_mrail_config, check_prog_affinity};
use psmrail::reactor::{CpuSet, CpuTopology, MAX_CPUS};

fn full_topology() -> CpuTopology {
    CpuTopology {
        online: MAX_CPUS,
        allowed: (0..MAX_CPUS).collect(),
    }
}

fn core_id() -> impl Strategy<Value = i64> {
    prop_oneof![MIN_CORE_ID..=MAX_CORE_ID, -8i64..8]
}

fn affinity_item() -> impl Strategy<Value = AffinityItem> {
    prop_oneof![
        core_id().prop_map(AffinityItem::Core),
        (core_id(), core_id()).prop_map(|(a, b)| AffinityItem::Range { start: a, end: b }),
        (core_id(), core_id(), prop_oneof![1u64..4, 1u64..=u64::MAX]).prop_map(|(a, b, stride)| {
            AffinityItem::Strided {
                start: a,
                end: b,
                stride,
            }
        }),
    ]
}

fn policy() -> impl Strategy<Value = RailPolicy> {
    prop_oneof![
        Just(RailPolicy::Fixed),
        Just(RailPolicy::RoundRobin),
        Just(RailPolicy::Striping)
    ]
}

/// Spellings of a policy name C and psmrail accept.
fn policy_spelling(p: RailPolicy, upper: bool) -> String {
    if upper {
        p.as_str().to_ascii_uppercase()
    } else {
        p.as_str().to_owned()
    }
}

fn fi_addr() -> impl Strategy<Value = AddrStr> {
    let v4 = any::<[u8; 4]>().prop_map(Ipv4Addr::from);
    let v6 = any::<[u8; 16]>().prop_map(Ipv6Addr::from);
    prop_oneof![
        (
            proptest::option::of(v4.clone()),
            proptest::option::of(any::<u16>())
        )
            .prop_filter("one of ip/port", |(i, p)| i.is_some() || p.is_some())
            .prop_map(|(ip, port)| AddrStr::SockaddrIn { ip, port }),
        (
            proptest::option::of(v6.clone()),
            proptest::option::of(any::<u16>())
        )
            .prop_filter("one of ip/port", |(i, p)| i.is_some() || p.is_some())
            .prop_map(|(ip, port)| AddrStr::SockaddrIn6 { ip, port }),
        (
            v6.clone(),
            any::<u16>(),
            any::<u16>(),
            any::<u64>(),
            proptest::option::of(any::<u16>())
        )
            .prop_map(
                |(gid, pkey, port_space, scope_id, port)| AddrStr::SockaddrIb {
                    gid,
                    pkey,
                    port_space,
                    scope_id,
                    port
                }
            ),
        any::<u64>().prop_map(AddrStr::Psmx),
        any::<[u64; 2]>().prop_map(AddrStr::Psmx2),
        any::<[u64; 4]>().prop_map(AddrStr::Psmx3),
        any::<u64>().prop_map(AddrStr::Opx),
        (
            v6.clone(),
            proptest::option::of((any::<u16>(), proptest::option::of(any::<u32>())))
        )
            .prop_map(|(gid, q)| AddrStr::Efa {
                gid,
                qpn: q.map(|q| q.0),
                qkey: q.and_then(|q| q.1)
            }),
        (v6, any::<u32>(), any::<u16>(), any::<u16>(), any::<u8>()).prop_map(
            |(gid, qpn, lid, pkey, sl)| AddrStr::IbUd {
                gid,
                qpn,
                lid,
                pkey,
                sl
            }
        ),
    ]
}

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9]{0,6}",
        "[a-z][a-z0-9_.@+-]{0,20}",
        "[a-z0-9]{1,10}(\\.[a-z0-9-]{1,10}){1,4}",
        "[ -~]{1,20}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn uuid_round_trips(bytes in any::<[u8; 16]>()) {
        let u = JobUuid::from_bytes(bytes);
        let shown = u.to_string();
        prop_assert_eq!(shown.parse::<JobUuid>().unwrap(), u);
        prop_assert_eq!(shown.to_ascii_lowercase().parse::<JobUuid>().unwrap(), u);
        prop_assert_eq!(&shown, &shown.to_ascii_uppercase());
    }

    #[test]
    fn uuid_parse_never_panics(s in "\\PC{0,40}|[0-9a-fA-F-]{30,40}") {
        if let Ok(u) = s.parse::<JobUuid>() {
            prop_assert_eq!(u.to_string(), s.to_ascii_uppercase());
        }
    }

    #[test]
    fn affinity_spec_round_trips(items in proptest::collection::vec(affinity_item(), 1..6)) {
        // Same-sign items with start > end are rejected; the rest must round-trip.
        if let Ok(spec) = AffinitySpec::new(items.clone()) {
            prop_assert_eq!(spec.items(), &items[..]);
            let again: AffinitySpec = spec.to_string().parse().unwrap();
            prop_assert_eq!(again, spec);
        } else {
            let reversed = items
                .iter()
                .any(|i| (i.start() < 0) == (i.end() < 0) && i.start() > i.end());
            prop_assert!(reversed, "rejected without a same-sign start > end item");
        }
    }

    #[test]
    fn cpu_set_round_trips(ids in proptest::collection::btree_set(0usize..MAX_CPUS, 1..80)) {
        let set: CpuSet = ids.into_iter().collect();
        let spec: AffinitySpec = set.to_string().parse().unwrap();
        prop_assert_eq!(spec.resolve(&full_topology()).unwrap(), set);
        prop_assert_eq!(AffinitySpec::from_cpu_set(&set).unwrap(), spec);
    }

    #[test]
    fn resolved_sets_stay_in_the_allowed_set(
        items in proptest::collection::vec(affinity_item(), 1..4),
        online in 1usize..64,
        allowed in proptest::collection::btree_set(0usize..64, 1..64),
    ) {
        let topo = CpuTopology { online, allowed: allowed.into_iter().collect() };
        if let Ok(spec) = AffinitySpec::new(items) {
            if let Ok(set) = spec.resolve(&topo) {
                prop_assert!(!set.is_empty());
                prop_assert!(set.is_subset(&topo.allowed));
            }
        }
    }

    #[test]
    fn policy_table_round_trips(
        sizes in proptest::collection::btree_set(0u64..u64::MAX, 1..=8),
        policies in proptest::collection::vec(policy(), 8),
        unbounded_last in any::<bool>(),
        spelling in 0usize..3,
        upper in any::<bool>(),
    ) {
        let mut entries: Vec<(MaxSize, RailPolicy)> = sizes
            .into_iter()
            .zip(policies)
            .map(|(s, p)| (MaxSize::new(s), p))
            .collect();
        if unbounded_last {
            let last = entries.len() - 1;
            entries[last].0 = MaxSize::UNBOUNDED;
        }
        let table = RailPolicyTable::new(entries.clone()).unwrap();
        prop_assert_eq!(table.entries(), &entries[..]);
        prop_assert_eq!(table.to_string().parse::<RailPolicyTable>().unwrap(), table.clone());
        // Other spellings of the same table parse to the same value.
        let unbounded = ["-1", "ULONG_MAX", "18446744073709551615"][spelling];
        let text = entries
            .iter()
            .map(|(m, p)| {
                let size = if m.is_unbounded() { unbounded.to_owned() } else { m.to_string() };
                format!("{size}:{}", policy_spelling(*p, upper))
            })
            .collect::<Vec<_>>()
            .join(",");
        prop_assert_eq!(text.parse::<RailPolicyTable>().unwrap(), table.clone());
        // policy_for: first covering entry, else the last.
        for (m, p) in &entries {
            if let Some(b) = m.bytes() {
                prop_assert_eq!(table.policy_for(b), *p);
            }
        }
        prop_assert_eq!(table.policy_for(u64::MAX), entries[entries.len() - 1].1);
    }

    #[test]
    fn rail_addr_round_trips(addr in fi_addr()) {
        let rail = RailAddr::AddrStr(addr);
        let shown = rail.to_string();
        prop_assert_eq!(shown.parse::<RailAddr>().unwrap(), rail);
    }

    #[test]
    fn ip_rails_round_trip(v4 in any::<[u8; 4]>(), v6 in any::<[u8; 16]>()) {
        for ip in [IpAddr::from(v4), IpAddr::from(v6)] {
            let rail = RailAddr::Ip(ip);
            prop_assert_eq!(rail.to_string().parse::<RailAddr>().unwrap(), rail);
        }
    }

    #[test]
    fn named_rails_round_trip(name in names()) {
        if let Ok(rail) = name.parse::<RailAddr>() {
            prop_assert_eq!(rail.to_string(), name.clone());
            prop_assert_eq!(rail.to_string().parse::<RailAddr>().unwrap(), rail);
        }
    }

    #[test]
    fn rail_lists_round_trip(addrs in proptest::collection::vec(fi_addr(), 1..5), words in proptest::collection::vec("[a-z][a-z0-9]{0,8}", 0..3)) {
        let mut rails: Vec<RailAddr> = addrs.into_iter().map(RailAddr::AddrStr).collect();
        rails.extend(words.iter().map(|w| w.parse::<RailAddr>().unwrap()));
        let text = rails.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(",");
        prop_assert_eq!(RailAddr::parse_list(&text).unwrap(), rails);
    }

    #[test]
    fn parsers_never_panic_on_arbitrary_text(s in "\\PC{0,60}") {
        let _ = s.parse::<AffinitySpec>().map(|spec| spec.resolve(&full_topology()));
        let _ = s.parse::<RailPolicyTable>();
        let _ = s.parse::<RailAddr>();
        let _ = RailAddr::parse_list(&s);
        let _ = s.parse::<JobUuid>();
        for p in PsmParam::ALL {
            let _ = PsmConfig::from_vars(&[(p.env_name(), s.as_str())]);
        }
        for var in ["FI_OFI_MRAIL_ADDR", "FI_OFI_MRAIL_ADDR_STRC", "FI_OFI_MRAIL_CONFIG"] {
            let _ = MrailConfig::from_vars(&[(var, s.as_str())]);
        }
    }

    #[test]
    fn parsers_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        let value = OsString::from_vec(bytes);
        for p in PsmParam::ALL {
            let _ = PsmConfig::from_vars(&[(p.env_name(), value.clone())]);
        }
        for var in ["FI_OFI_MRAIL_ADDR", "FI_OFI_MRAIL_ADDR_STRC", "FI_OFI_MRAIL_CONFIG"] {
            let _ = MrailConfig::from_vars(&[(var, value.clone())]);
        }
    }

    /// The fuzz targets' checks, on grammar-shaped input.
    #[test]
    fn fuzz_checks_hold_on_grammar_like_input(
        affinity in "[0-9:,c-]{0,24}|(-?[0-9]{1,4}(:-?[0-9]{1,4}(:[0-9]{1,3})?)?,){0,3}-?[0-9]{1,4}",
        config in "[0-9:,a-z_A-Z-]{0,40}|([0-9]{1,6}:(fixed|round-robin|striping),){0,3}(-1|ULONG_MAX):striping",
    ) {
        check_prog_affinity(affinity.as_bytes());
        check_mrail_config(config.as_bytes());
    }

    #[test]
    fn fuzz_checks_hold_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
        check_prog_affinity(&bytes);
        check_mrail_config(&bytes);
    }
}
