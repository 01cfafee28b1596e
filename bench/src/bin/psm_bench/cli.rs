//! The command line: the sweep's options, and the hidden `serve` and
//! `client` subcommands the program runs itself as (one process each).

use crate::jobs::{parse_size, Job, Part};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Latency, bandwidth and message rate of the psm provider (soft and
/// native engines, manual and auto progress) beside a hand-written tokio
/// TCP ping-pong, and fi_pingpong / ucx_perftest when installed. Each
/// variant runs in its own pair of processes, client on CPU 0 and server
/// on CPU 1.
#[derive(Parser, Debug)]
#[command(name = "psm_bench", args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    /// A peer process (started by the program itself).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The sweep's options.
    #[command(flatten)]
    pub run: RunArgs,
}

/// The peers a sweep starts.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// The server of one variant's measurements: prints its address,
    /// reads the client's from its standard input.
    #[command(hide = true)]
    Serve(PeerArgs),
    /// The client of one variant's measurements: prints its address and
    /// one `@@ row` line per job.
    #[command(hide = true)]
    Client(ClientArgs),
}

/// What is measured, how long, and where the results go.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RunArgs {
    /// Variants to measure, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "soft-manual,soft-auto,soft-adaptive,native-manual,native-auto,tokio-tcp,fi_pingpong,ucx_perftest"
    )]
    pub variants: Vec<Variant>,
    /// Parts to measure: lat (ping-pong, 1 B .. 1 MiB), bw (streaming,
    /// 4 KiB .. 4 MiB), rate (8 B streaming, messages/s).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "lat,bw,rate")]
    pub parts: Vec<Part>,
    /// Message sizes of lat and bw instead of the default sweeps (k and m
    /// suffixes: 8,4k,1m).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub sizes: Option<Vec<usize>>,
    /// Round trips per latency size up to 16 KiB (fewer above, in
    /// proportion); default 20000, or 1000 with --quick.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: Option<u32>,
    /// Small counts: the whole default sweep of two variants in well under
    /// a minute (a smoke run, not figures to quote).
    #[arg(long)]
    pub quick: bool,
    /// Write one row per variant, part and size here as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the same rows here as a JSON array.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write two charts here (latency and bandwidth against size) as SVG.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// A column of the results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
pub(crate) enum Variant {
    /// The psm provider, soft engine, manual progress (futures busy-poll).
    SoftManual,
    /// The psm provider, soft engine over its Unix-domain sockets without
    /// the shared-memory path (`SoftConfig::shared_memory` off), manual
    /// progress.
    SoftUnix,
    /// The psm provider, soft engine over loopback TCP instead of its
    /// Unix-domain sockets between processes of one host, manual progress.
    SoftTcp,
    /// The psm provider, soft engine, the auto progress thread.
    SoftAuto,
    /// The psm provider, soft engine, adaptive progress (futures spin for
    /// 500 µs after their thread's last completion, then the thread
    /// takes over): what `getinfo` picks inside a tokio runtime.
    SoftAdaptive,
    /// The psm provider, native engine (libpsm_infinipath), manual progress.
    NativeManual,
    /// The psm provider, native engine, the auto progress thread.
    NativeAuto,
    /// The baseline: tokio current-thread TcpStream, write_all / read_exact.
    TokioTcp,
    /// libfabric's fi_pingpong (tcp provider), when installed.
    #[value(name = "fi_pingpong")]
    FiPingpong,
    /// UCX's ucx_perftest (tag_lat, tag_bw), when installed.
    #[value(name = "ucx_perftest")]
    UcxPerftest,
}

impl Variant {
    /// The name `--variants` takes and the results show.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Variant::SoftManual => "soft-manual",
            Variant::SoftUnix => "soft-unix",
            Variant::SoftTcp => "soft-tcp",
            Variant::SoftAuto => "soft-auto",
            Variant::SoftAdaptive => "soft-adaptive",
            Variant::NativeManual => "native-manual",
            Variant::NativeAuto => "native-auto",
            Variant::TokioTcp => "tokio-tcp",
            Variant::FiPingpong => "fi_pingpong",
            Variant::UcxPerftest => "ucx_perftest",
        }
    }

    /// Whether this is the psm provider (else a baseline).
    pub(crate) fn is_psm(self) -> bool {
        matches!(
            self,
            Variant::SoftManual
                | Variant::SoftUnix
                | Variant::SoftTcp
                | Variant::SoftAuto
                | Variant::SoftAdaptive
                | Variant::NativeManual
                | Variant::NativeAuto
        )
    }

    /// Whether this is the native engine.
    pub(crate) fn is_native(self) -> bool {
        matches!(self, Variant::NativeManual | Variant::NativeAuto)
    }

    /// Whether this runs the auto progress thread.
    pub(crate) fn is_auto(self) -> bool {
        matches!(
            self,
            Variant::SoftAuto | Variant::SoftAdaptive | Variant::NativeAuto
        )
    }

    /// Whether futures spin before the progress thread takes over.
    pub(crate) fn is_adaptive(self) -> bool {
        self == Variant::SoftAdaptive
    }
}

/// What both peers of a variant are told.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PeerArgs {
    /// The variant (not an external command).
    #[arg(long, value_enum)]
    pub variant: Variant,
    /// The jobs, in order, the same on both sides (PART:SIZE:COUNT:WINDOW).
    #[arg(long, value_delimiter = ',', required = true)]
    pub jobs: Vec<Job>,
    /// Pin this process to that CPU once its endpoint is open.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Exit when this process, the parent, does.
    #[arg(long)]
    pub with_parent: Option<u32>,
}

/// The client's arguments: the peer's, and the server's address.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    /// What both peers are told.
    #[command(flatten)]
    pub peer: PeerArgs,
    /// The server's address, as it printed it.
    #[arg(long)]
    pub addr: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn variants_parse_by_name() -> Result<(), clap::Error> {
        let cli = Cli::try_parse_from([
            "psm_bench",
            "--variants",
            "soft-manual,tokio-tcp,fi_pingpong",
            "--parts",
            "lat",
            "--sizes",
            "8,4k",
        ])?;
        assert_eq!(
            cli.run.variants,
            [Variant::SoftManual, Variant::TokioTcp, Variant::FiPingpong]
        );
        assert_eq!(cli.run.parts, [Part::Lat]);
        assert_eq!(cli.run.sizes, Some(vec![8, 4096]));
        for v in cli.run.variants {
            assert_eq!(Variant::from_str(v.name(), false), Ok(v));
        }
        assert!(Cli::try_parse_from(["psm_bench", "--sizes", "0"]).is_err());
        assert!(Cli::try_parse_from(["psm_bench", "--variants", "nope"]).is_err());
        Ok(())
    }
}
