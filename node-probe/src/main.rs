//! node-probe: watchfire's NVML daemon for GPU nodes.
//!
//! The NVML collection itself is tracked by its own issue; until it lands this binary only
//! reports that it has nothing to probe, so that the workspace layout is in place.

use clap::Parser;

#[derive(Parser)]
#[command(version, about = "watchfire NVML node probe")]
struct Args {}

fn main() -> anyhow::Result<()> {
    let _ = Args::parse();
    anyhow::bail!("node-probe: NVML collection is not built yet (see the node-probe issue)")
}
