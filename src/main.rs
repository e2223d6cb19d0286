//! The `watchfire` command line.

mod cli;

fn main() {
    // glibc grows a thread arena's heap by mprotect-ing just what a request needs; with many
    // threads allocating at once (ingest, evaluation) that is a system call every few KiB.
    // A pad makes each growth step larger; untouched pages cost no memory.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a malloc tunable; called before any thread is started.
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, 16 << 20);
    }
    std::process::exit(cli::main());
}
