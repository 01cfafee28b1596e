//! `FI_PSM_PROG_AFFINITY`: the grammar, resolution against a topology, and
//! one test per class of malformed value showing its error message —
//! including the values that hung the C provider (`abc`, `2c`).

use psmrail::config::{AffinityItem, AffinitySpec, ConfigError, PsmConfig};
use psmrail::reactor::{CpuSet, CpuTopology};

/// 8 online CPUs, all allowed.
fn topo8() -> CpuTopology {
    CpuTopology {
        online: 8,
        allowed: (0..8).collect(),
    }
}

fn resolve(text: &str) -> Result<CpuSet, ConfigError> {
    PsmConfig::builder_from_vars(&[("FI_PSM_PROG_AFFINITY", text)])?
        .topology(topo8())
        .build()
        .map(|cfg| *cfg.prog_affinity().unwrap())
}

fn set(text: &str) -> String {
    resolve(text)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .to_string()
}

fn err(text: &str) -> ConfigError {
    match resolve(text) {
        Ok(s) => panic!("{text:?} was accepted as {s}"),
        Err(e) => e,
    }
}

#[test]
fn every_item_applies() {
    // C applied only the first item ("0:3" here).
    assert_eq!(set("0:3,6"), "0:3,6");
    assert_eq!(set("1,3,5"), "1,3,5");
    assert_eq!(set("0:1,1:2"), "0:2");
}

#[test]
fn single_range_and_stride() {
    assert_eq!(set("5"), "5");
    assert_eq!(set("2:4"), "2:4");
    assert_eq!(set("0:7:2"), "0,2,4,6");
    assert_eq!(set("1:7:3"), "1,4,7");
    assert_eq!(set("3:3:100"), "3");
}

#[test]
fn negative_ids_count_back_from_the_online_cpus() {
    assert_eq!(set("-1"), "7");
    assert_eq!(set("-8"), "0");
    assert_eq!(set("-4:-1"), "4:7");
    assert_eq!(set("2:-1:2"), "2,4,6");
    assert_eq!(set("-3:6"), "5:6");
}

#[test]
fn items_keep_their_written_form() {
    let spec: AffinitySpec = "3,3:3,3:3:1,-1:7".parse().unwrap();
    assert_eq!(
        spec.items(),
        [
            AffinityItem::Core(3),
            AffinityItem::Range { start: 3, end: 3 },
            AffinityItem::Strided {
                start: 3,
                end: 3,
                stride: 1
            },
            AffinityItem::Range { start: -1, end: 7 },
        ]
    );
    assert_eq!(spec.to_string(), "3,3:3,3:3:1,-1:7");
    assert_eq!(spec.as_str(), "3,3:3,3:3:1,-1:7");
}

#[test]
fn empty_value_is_an_empty_item() {
    assert_eq!(
        err("").to_string(),
        "FI_PSM_PROG_AFFINITY=\"\": item \"\" at byte 0: empty item; expected \
         <start>[:<end>[:<stride>]] with integer core ids"
    );
}

#[test]
fn double_comma_is_an_empty_item() {
    let e = err("0,,2");
    assert_eq!(
        (e.item(), e.position(), e.problem()),
        ("", 2, Some("empty item"))
    );
    let e = err(",,");
    assert_eq!((e.item(), e.position()), ("", 0));
}

#[test]
fn trailing_and_leading_commas_are_empty_items() {
    let e = err("0:3,");
    assert_eq!(
        e.to_string(),
        "FI_PSM_PROG_AFFINITY=\"0:3,\": item \"\" at byte 4: empty item; expected \
         <start>[:<end>[:<stride>]] with integer core ids"
    );
    let e = err(",1");
    assert_eq!((e.item(), e.position()), ("", 0));
}

#[test]
fn zero_stride_is_an_error() {
    assert_eq!(
        err("0:3:0").to_string(),
        "FI_PSM_PROG_AFFINITY=\"0:3:0\": item \"0:3:0\" at byte 0: stride 0 (zero stride); \
         expected a stride >= 1"
    );
}

#[test]
fn negative_stride_is_an_error() {
    // C silently turned a stride < 1 into 1.
    assert_eq!(
        err("1,0:3:-1").to_string(),
        "FI_PSM_PROG_AFFINITY=\"1,0:3:-1\": item \"0:3:-1\" at byte 2: stride -1 is negative; \
         expected a stride >= 1"
    );
}

#[test]
fn start_after_end_is_an_error() {
    assert_eq!(
        err("5:3").to_string(),
        "FI_PSM_PROG_AFFINITY=\"5:3\": item \"5:3\" at byte 0: start 5 > end 3; expected \
         <start> <= <end> after normalisation (a negative id counts back from the number of \
         online CPUs)"
    );
    assert_eq!(err("-1:-3").problem(), Some("start -1 > end -3"));
}

#[test]
fn start_after_end_after_normalisation_is_an_error() {
    // With 8 CPUs, 6:-4 is 6:4. Only known once the topology is.
    assert!("6:-4".parse::<AffinitySpec>().is_ok());
    assert_eq!(
        err("0,6:-4").to_string(),
        "FI_PSM_PROG_AFFINITY=\"0,6:-4\": item \"6:-4\" at byte 2: start 6 (CPU 6) > end -4 \
         (CPU 4) with 8 CPUs online; expected <start> <= <end> after normalisation (a negative \
         id counts back from the number of online CPUs)"
    );
    assert_eq!(err("-1:0").position(), 0);
}

#[test]
fn negative_id_before_the_first_cpu_is_an_error() {
    assert_eq!(
        err("-9").to_string(),
        "FI_PSM_PROG_AFFINITY=\"-9\": item \"-9\" at byte 0: core id -9 is before the first core \
         (8 CPUs are online); expected CPUs within the process's allowed CPU set"
    );
}

#[test]
fn id_outside_the_machine_is_an_error() {
    // C clamped 9 to the last core.
    assert_eq!(
        err("0:3,9").to_string(),
        "FI_PSM_PROG_AFFINITY=\"0:3,9\": item \"9\" at byte 4: CPU 9 is not in the process's \
         allowed CPU set 0:7; expected CPUs within the process's allowed CPU set"
    );
    assert_eq!(err("6:8").item(), "6:8");
}

#[test]
fn id_outside_the_allowed_set_is_an_error() {
    let topo = CpuTopology {
        online: 8,
        allowed: [0, 1, 3, 4].into_iter().collect(),
    };
    let spec: AffinitySpec = "0:1,2:4".parse().unwrap();
    let e = spec.resolve(&topo).unwrap_err();
    assert_eq!(
        e.to_string(),
        "FI_PSM_PROG_AFFINITY=\"0:1,2:4\": item \"2:4\" at byte 4: CPU 2 is not in the \
         process's allowed CPU set 0:1,3:4; expected CPUs within the process's allowed CPU set"
    );
    // A stride that steps over the hole is fine.
    let spec: AffinitySpec = "1:3:2".parse().unwrap();
    assert_eq!(spec.resolve(&topo).unwrap().to_string(), "1,3");
}

#[test]
fn garbage_that_hung_the_c_provider_is_an_error() {
    assert_eq!(
        err("abc").to_string(),
        "FI_PSM_PROG_AFFINITY=\"abc\": item \"abc\" at byte 0: start: \"abc\" is not a decimal \
         integer; expected <start>[:<end>[:<stride>]] with integer core ids"
    );
    assert_eq!(
        err("2c").to_string(),
        "FI_PSM_PROG_AFFINITY=\"2c\": item \"2c\" at byte 0: start: \"2c\" is not a decimal \
         integer; expected <start>[:<end>[:<stride>]] with integer core ids"
    );
    let e = err("0:3,0:3c");
    assert_eq!((e.item(), e.position()), ("0:3c", 4));
    assert_eq!(e.problem(), Some("end: \"3c\" is not a decimal integer"));
    for junk in [
        "c", "x", "0x3", "+1", " 1", "1 ", "1.5", "1-3", "٣", "0:3:1c",
    ] {
        let e = err(junk);
        assert_eq!(e.var(), "FI_PSM_PROG_AFFINITY", "{junk:?}");
    }
}

#[test]
fn overflow_is_an_error() {
    assert_eq!(
        err("99999999999999999999").to_string(),
        "FI_PSM_PROG_AFFINITY=\"99999999999999999999\": item \"99999999999999999999\" at byte 0: \
         start: \"99999999999999999999\" overflows a 64-bit integer; expected \
         <start>[:<end>[:<stride>]] with integer core ids"
    );
    assert!(err("0:1:99999999999999999999")
        .problem()
        .unwrap()
        .contains("overflows"));
    assert!(err("-99999999999999999999")
        .problem()
        .unwrap()
        .contains("overflows"));
}

#[test]
fn ids_beyond_cpu_setsize_are_errors() {
    assert_eq!(
        err("1024").to_string(),
        "FI_PSM_PROG_AFFINITY=\"1024\": item \"1024\" at byte 0: start 1024 is out of range; \
         expected core ids in -1024..=1023 (CPU_SETSIZE is 1024)"
    );
    assert_eq!(err("0:5000").problem(), Some("end 5000 is out of range"));
    assert_eq!(err("-1025").problem(), Some("start -1025 is out of range"));
    // In range for the grammar, outside this machine.
    assert!(err("1023")
        .problem()
        .unwrap()
        .contains("not in the process's allowed"));
}

#[test]
fn wrong_field_counts_are_errors() {
    assert_eq!(
        err("1:2:3:4").to_string(),
        "FI_PSM_PROG_AFFINITY=\"1:2:3:4\": item \"1:2:3:4\" at byte 0: 4 ':'-separated fields, \
         at most 3; expected <start>[:<end>[:<stride>]] with integer core ids"
    );
    assert_eq!(err("1:").problem(), Some("end is missing"));
    assert_eq!(err(":3").problem(), Some("start is missing"));
    assert_eq!(err("1::2").problem(), Some("end is missing"));
    assert_eq!(err("1:2:").problem(), Some("stride is missing"));
}

#[test]
fn leading_zeros_are_errors() {
    assert!(err("01").problem().unwrap().contains("leading zero"));
    assert!(err("-0")
        .problem()
        .unwrap()
        .contains("not a decimal integer"));
}

#[test]
fn specs_from_items_and_sets() {
    let spec = AffinitySpec::new([
        AffinityItem::Core(0),
        AffinityItem::Strided {
            start: 2,
            end: 6,
            stride: 2,
        },
    ])
    .unwrap();
    assert_eq!(spec.to_string(), "0,2:6:2");
    let e = AffinitySpec::new([AffinityItem::Strided {
        start: 0,
        end: 1,
        stride: 0,
    }])
    .unwrap_err();
    assert_eq!(e.problem(), Some("stride 0 (zero stride)"));
    assert_eq!(
        AffinitySpec::new([]).unwrap_err().problem(),
        Some("empty item")
    );

    let cpus: CpuSet = [1, 2, 3, 9].into_iter().collect();
    let spec = AffinitySpec::from_cpu_set(&cpus).unwrap();
    assert_eq!(spec.to_string(), "1:3,9");
    assert!(AffinitySpec::from_cpu_set(&CpuSet::new()).is_err());
}

#[test]
fn builder_takes_a_spec_and_resolves_against_the_captured_topology() {
    let topo = CpuTopology::captured();
    let first = topo.allowed.iter().next().unwrap();
    let only: CpuSet = [first].into_iter().collect();
    let cfg = PsmConfig::builder()
        .prog_affinity(Some(AffinitySpec::from_cpu_set(&only).unwrap()))
        .build()
        .unwrap();
    assert_eq!(cfg.prog_affinity(), Some(&only));
    // An id past every allowed CPU fails against the real machine too.
    let beyond = topo.allowed.max().unwrap() + 1;
    if beyond <= 1023 {
        let e = PsmConfig::builder()
            .prog_affinity(Some(beyond.to_string().parse().unwrap()))
            .build()
            .unwrap_err();
        assert!(e
            .problem()
            .unwrap()
            .contains("not in the process's allowed"));
    }
}
