//! `fi_info` for psmrail: runs discovery and prints what the providers
//! would give (psm, and ofi_mrail when `FI_OFI_MRAIL_ADDR` names rails), or
//! why they refuse.
//!
//! ```sh
//! cargo run --example info                      # defaults (engine from PSMRAIL_ENGINE, else auto)
//! cargo run --example info -- --help            # every option
//! cargo run --example info -- -v                # every attribute
//! FI_OFI_MRAIL_ADDR=lo,127.0.0.1 cargo run --example info -- -p ofi_mrail   # the multi-rail provider
//! cargo run --example info -- -c tagged,msg -t dgram --engine soft
//! cargo run --example info -- -n host:0:1 -s 7 --source   # local unit 0, port 1, service 7
//! cargo run --example info -- -n server1 -s 7   # resolve through server1's name server
//! cargo run --example info -- -c msg --mem-tag-format 0xaaaaaaaaaaaaaaaa   # refused: no room for FI_MSG
//! ```
//!
//! Options (`--help` lists them all) follow `fi_info` where it has them:
//! `-c` caps, `-m` mode, `-t` endpoint type, `-a` AV type, `-p` provider
//! (`psm` or `ofi_mrail`), `-n` node, `-s` service, `--source`, `-v`;
//! psmrail adds `-e/--engine auto|native|soft`, `--progress manual|auto`,
//! `--mem-tag-format HEX`, `--inject-size N` and `--ns-port PORT`. Names
//! are libfabric's, with or without `FI_`, separated by `,` or `|`. A bad
//! option is an error naming it (exit status 2); the exit status is 1 when
//! discovery refuses (the error is printed, as `fi_info` prints
//! `fi_getinfo: -61`).

use std::process::ExitCode;
use std::str::FromStr;

use clap::Parser;
use psmrail::fabric::{
    AvType, Caps, EngineChoice, EpType, GetInfo, Hints, Mode, ProgressKind, Service,
};

/// Any of psmrail's `FromStr` names (caps, modes, endpoint and AV types,
/// engines, progress kinds), its error as clap's message.
fn parse_name<T: FromStr>(v: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    v.parse().map_err(|e: T::Err| e.to_string())
}

/// A 64-bit hexadecimal value, with or without `0x`.
fn parse_hex(v: &str) -> Result<u64, String> {
    let digits = v.strip_prefix("0x").unwrap_or(v);
    u64::from_str_radix(digits, 16).map_err(|e| format!("{v:?} is not a hexadecimal u64: {e}"))
}

/// `fi_info` for psmrail: runs discovery with these hints and prints what
/// the providers would give, or why they refuse (exit status 1).
#[derive(Parser, Debug)]
#[command(name = "info", args_override_self = true)]
struct Args {
    /// Print every attribute of each info.
    #[arg(short, long)]
    verbose: bool,
    /// Capabilities wanted: names such as tagged,msg,rma (with or without
    /// FI_, separated by , or |).
    #[arg(short, long, value_parser = parse_name::<Caps>)]
    caps: Option<Caps>,
    /// Mode bits the application supports (e.g. context).
    #[arg(short, long, value_parser = parse_name::<Mode>)]
    mode: Option<Mode>,
    /// Endpoint type: rdm, dgram or msg (FI_EP_ names accepted).
    #[arg(short = 't', long, value_parser = parse_name::<EpType>)]
    ep_type: Option<EpType>,
    /// Engine: auto, native or soft (default: PSMRAIL_ENGINE, else auto).
    #[arg(short, long, value_parser = parse_name::<EngineChoice>)]
    engine: Option<EngineChoice>,
    /// Only this provider (psm or ofi_mrail), as fi_info -p; without it,
    /// psm and, when FI_OFI_MRAIL_ADDR names rails, ofi_mrail.
    #[arg(short, long)]
    provider: Option<String>,
    /// Progress: manual or auto (data and control progress alike).
    #[arg(long, value_parser = parse_name::<ProgressKind>)]
    progress: Option<ProgressKind>,
    /// AV type: map or table.
    #[arg(short, long, value_parser = parse_name::<AvType>)]
    av_type: Option<AvType>,
    /// The tag bits format (mem_tag_format), hexadecimal, 0x optional.
    #[arg(long, value_name = "HEX", value_parser = parse_hex)]
    mem_tag_format: Option<u64>,
    /// Largest inject size wanted, in bytes.
    #[arg(long, value_name = "N")]
    inject_size: Option<usize>,
    /// Node: a host to resolve through its name server, or with --source
    /// the local anything:unit:port.
    #[arg(short, long)]
    node: Option<String>,
    /// Service: a decimal name-server service number (not a TCP port);
    /// absent or 0 is any.
    #[arg(short, long)]
    service: Option<Service>,
    /// FI_SOURCE: node and service describe the local side.
    #[arg(long)]
    source: bool,
    /// The remote name server's TCP port (default: derived from the job
    /// UUID, as every process of the job uses).
    #[arg(long, value_name = "PORT")]
    ns_port: Option<u16>,
}

impl Args {
    /// The discovery hints the options ask for.
    fn hints(&self) -> Hints {
        let mut h = Hints::new();
        if let Some(caps) = self.caps {
            h = h.caps(caps);
        }
        if let Some(mode) = self.mode {
            h = h.mode(mode);
        }
        if let Some(ep_type) = self.ep_type {
            h = h.ep_type(ep_type);
        }
        if let Some(engine) = self.engine {
            h = h.engine(engine);
        }
        if let Some(provider) = &self.provider {
            h = h.prov_name(provider.clone());
        }
        if let Some(progress) = self.progress {
            h = h.progress(progress);
        }
        if let Some(av_type) = self.av_type {
            h = h.av_type(av_type);
        }
        if let Some(format) = self.mem_tag_format {
            h = h.mem_tag_format(format);
        }
        if let Some(size) = self.inject_size {
            h = h.inject_size(size);
        }
        h
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    let hints = a.hints();
    // Without -p, every provider that can answer: psm, and ofi_mrail when
    // rails are configured (as fi_info lists every provider).
    let mut runs = vec![hints.clone()];
    let rails_set = std::env::var_os("FI_OFI_MRAIL_ADDR").is_some()
        || std::env::var_os("FI_OFI_MRAIL_ADDR_STRC").is_some();
    if a.provider.is_none() && rails_set {
        runs.push(hints.clone().prov_name("ofi_mrail"));
    }
    let mut status = ExitCode::SUCCESS;
    for (i, hints) in runs.iter().enumerate() {
        let mut request = GetInfo::new().hints(hints).source(a.source);
        if let Some(node) = &a.node {
            request = request.node(node);
        }
        if let Some(service) = a.service {
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
