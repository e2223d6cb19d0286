//! `watchfire serve --data FILE... [--listen ADDR]`: Prometheus' query API over data files, so
//! Grafana (or any Prometheus client) can chart recorded or replayed data.

use std::path::PathBuf;
use std::sync::Arc;

use watchfire::duration::Duration;
use watchfire::server::{QueryApi, QueryLimits};
use watchfire::tsdb::Store;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Data files: OpenMetrics/Prometheus text, or promqltest-style notation (as `watchfire query`).
    #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
    data: Vec<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9090", value_name = "ADDR")]
    listen: String,
    /// The longest a query may run (a request's `timeout` may lower it).
    #[arg(long, default_value = "2m", value_name = "D")]
    query_timeout: String,
    /// Queries evaluated at once; more wait for a free slot up to their timeout.
    #[arg(long, default_value_t = 20, value_name = "N")]
    max_concurrent_queries: usize,
    /// Samples a query may read, and points it may return.
    #[arg(long, default_value_t = 50_000_000, value_name = "N")]
    max_samples: u64,
}

pub fn run(args: Args) -> i32 {
    match execute(args) {
        Ok(()) => 0,
        Err(e) => super::fail(e),
    }
}

fn execute(args: Args) -> Result<(), String> {
    let timeout = Duration::parse(&args.query_timeout).map_err(|e| format!("--query-timeout: {e}"))?;
    if timeout == Duration::ZERO {
        return Err("--query-timeout: must be positive".into());
    }
    if args.max_concurrent_queries == 0 {
        return Err("--max-concurrent-queries: must be at least 1".into());
    }
    let mut store = Store::new();
    for path in &args.data {
        super::query::load_data(&mut store, path)?;
    }
    let limits = QueryLimits {
        timeout: timeout.as_std(),
        max_concurrent: args.max_concurrent_queries,
        max_samples: args.max_samples,
    };
    let api = QueryApi::over(Arc::new(store), limits);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(watchfire::promql::QUERY_STACK_KB << 10)
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let result = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        eprintln!("serving the query API on http://{}", args.listen);
        watchfire::server::serve_query(listener, api, super::run::shutdown_signal())
            .await
            .map_err(|e| format!("HTTP server: {e}"))
    });
    // A query thread still running does not keep the process.
    rt.shutdown_timeout(super::run::RUNTIME_GRACE);
    result
}
