//! `fi_info` for psmrail: runs discovery and prints what the providers
//! would give (psm, and ofi_mrail when `FI_OFI_MRAIL_ADDR` names rails), or
//! why they refuse.
//!
//! ```sh
//! cargo run --example info                      # defaults (engine from PSMRAIL_ENGINE, else auto)
//! cargo run --example info -- -v                # every attribute
//! FI_OFI_MRAIL_ADDR=lo,127.0.0.1 cargo run --example info -- -p ofi_mrail   # the multi-rail provider
//! cargo run --example info -- -c tagged,msg -t dgram --engine soft
//! cargo run --example info -- -n host:0:1 -s 7 --source   # local unit 0, port 1, service 7
//! cargo run --example info -- -n server1 -s 7   # resolve through server1's name server
//! cargo run --example info -- -c msg --mem-tag-format 0xaaaaaaaaaaaaaaaa   # refused: no room for FI_MSG
//! ```
//!
//! Options: `-c/--caps NAMES`, `-m/--mode NAMES`, `-t/--ep-type TYPE`,
//! `-e/--engine auto|native|soft`, `-p/--provider psm|ofi_mrail` (as
//! `fi_info -p`), `--progress manual|auto`,
//! `-a/--av-type map|table`, `--mem-tag-format HEX`, `--inject-size N`,
//! `-n/--node NODE`, `-s/--service N`, `--source`, `--ns-port PORT`,
//! `-v/--verbose`, `-h/--help`. Names are libfabric's, with or without
//! `FI_`, separated by `,` or `|`. The exit status is 1 when discovery
//! refuses (the error is printed, as `fi_info` prints `fi_getinfo: -61`).

use std::process::ExitCode;
use std::str::FromStr;

use psmrail::fabric::{AvType, Caps, EngineChoice, EpType, GetInfo, Hints, Mode, ProgressKind};

const USAGE: &str = "usage: info [-v] [-c CAPS] [-m MODE] [-t EP_TYPE] [-e ENGINE] [-p PROVIDER] [--progress PROGRESS] \
[-a AV_TYPE] [--mem-tag-format HEX] [--inject-size N] [-n NODE] [-s SERVICE] [--source] [--ns-port PORT]";

struct Args {
    hints: Hints,
    verbose: bool,
    node: Option<String>,
    service: Option<String>,
    source: bool,
    ns_port: Option<u16>,
    provider: Option<String>,
}

fn parse<T: FromStr>(flag: &str, value: Option<String>) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value.parse().map_err(|e| format!("{flag} {value:?}: {e}"))
}

fn parse_hex(flag: &str, value: Option<String>) -> Result<u64, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    let digits = value.strip_prefix("0x").unwrap_or(&value);
    u64::from_str_radix(digits, 16).map_err(|e| format!("{flag} {value:?}: {e}"))
}

fn args() -> Result<Option<Args>, String> {
    let mut a = Args {
        hints: Hints::new(),
        verbose: false,
        node: None,
        service: None,
        source: false,
        ns_port: None,
        provider: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let h = std::mem::take(&mut a.hints);
        a.hints = match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "-v" | "--verbose" => {
                a.verbose = true;
                h
            }
            "--source" => {
                a.source = true;
                h
            }
            "-c" | "--caps" => h.caps(parse::<Caps>(&flag, it.next())?),
            "-m" | "--mode" => h.mode(parse::<Mode>(&flag, it.next())?),
            "-t" | "--ep-type" => h.ep_type(parse::<EpType>(&flag, it.next())?),
            "-e" | "--engine" => h.engine(parse::<EngineChoice>(&flag, it.next())?),
            "-p" | "--provider" => {
                let name = it.next().ok_or("-p needs a provider name")?;
                a.provider = Some(name.clone());
                h.prov_name(name)
            }
            "--progress" => h.progress(parse::<ProgressKind>(&flag, it.next())?),
            "-a" | "--av-type" => h.av_type(parse::<AvType>(&flag, it.next())?),
            "--mem-tag-format" => h.mem_tag_format(parse_hex(&flag, it.next())?),
            "--inject-size" => h.inject_size(parse::<usize>(&flag, it.next())?),
            "-n" | "--node" => {
                a.node = Some(it.next().ok_or("-n needs a value")?);
                h
            }
            "-s" | "--service" => {
                a.service = Some(it.next().ok_or("-s needs a value")?);
                h
            }
            "--ns-port" => {
                a.ns_port = Some(parse::<u16>(&flag, it.next())?);
                h
            }
            other => return Err(format!("unknown option {other:?}")),
        };
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("info: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // Without -p, every provider that can answer: psm, and ofi_mrail when
    // rails are configured (as fi_info lists every provider).
    let mut runs = vec![a.hints.clone()];
    let rails_set = std::env::var_os("FI_OFI_MRAIL_ADDR").is_some()
        || std::env::var_os("FI_OFI_MRAIL_ADDR_STRC").is_some();
    if a.provider.is_none() && rails_set {
        runs.push(a.hints.clone().prov_name("ofi_mrail"));
    }
    let mut status = ExitCode::SUCCESS;
    for (i, hints) in runs.iter().enumerate() {
        let mut request = GetInfo::new().hints(hints).source(a.source);
        if let Some(node) = &a.node {
            request = request.node(node);
        }
        if let Some(service) = &a.service {
            request = request.service(service);
        }
        if let Some(port) = a.ns_port {
            request = request.name_server_port(port);
        }
        match request.run() {
            Ok(infos) => {
                for info in infos {
                    if a.verbose {
                        print!("{info:#}");
                    } else {
                        print!("{info}");
                    }
                }
            }
            // Listing every provider, one that cannot answer is left out.
            Err(_) if i > 0 => {}
            Err(e) => {
                eprintln!("fi_getinfo: -{} ({e})", e.kind().errno());
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}
