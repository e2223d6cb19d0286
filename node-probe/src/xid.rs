//! What an XID means and what to do about it.
//!
//! Sources (as summarised in the project's reference/telemetry.md §2):
//! - NVIDIA's XID catalog, "Resolution Bucket" (immediate action), Ampere and later:
//!   <https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html> (generated copy read in
//!   leptonai/gpud `components/accelerator/nvidia/xid/catalog_generated.go`, 2025-10-29).
//! - The XIDs the EKS node monitoring agent treats as fatal (NodeCondition
//!   `AcceleratedHardwareReady=False`, node auto-repair): `WellKnownXidCodes` in
//!   aws/eks-node-monitoring-agent `monitors/nvidia/dcgm/dcgm_policies.go`.
//!
//! The classes:
//! - `drain`: the GPU cannot recover without at least a GPU reset (NVIDIA bucket RESET_GPU or a
//!   hardware WORKFLOW); on EKS, where no one resets a GPU by hand, the node is drained and replaced.
//! - `reboot`: NVIDIA asks for a full power cycle of the machine (RESTART_BM) or of the VM
//!   (RESTART_VM); on EKS that also means drain and replace.
//! - `application`: the job did it (RESTART_APP): attribute to the workload, don't drain.
//! - `warn`: degradation or informational; alert on rates and repetition, don't page on one event.
//!
//! `drain` and `reboot` are critical: node-probe pushes them at once (see `alert.rs`).

/// The action class of an XID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XidClass {
    Drain,
    Reboot,
    Application,
    Warn,
}

impl XidClass {
    /// The `class` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            XidClass::Drain => "drain",
            XidClass::Reboot => "reboot",
            XidClass::Application => "application",
            XidClass::Warn => "warn",
        }
    }

    /// Whether an event of this class is pushed as an alert at once.
    pub fn is_critical(self) -> bool {
        matches!(self, XidClass::Drain | XidClass::Reboot)
    }
}

use XidClass::*;

/// (xid, class, what it means). Ranges are spelled out code by code.
const TABLE: &[(u64, XidClass, &str)] = &[
    (8, Application, "GPU stopped processing (FIFO idle timeout)"),
    (13, Application, "Graphics engine exception"),
    (31, Application, "GPU memory page fault"),
    (32, Application, "Invalid or corrupted push buffer stream"),
    (38, Warn, "Driver firmware error (FECS watchdog timeout)"),
    (
        43,
        Application,
        "GPU stopped processing (reset channel verification error)",
    ),
    (45, Application, "Preemptive cleanup due to previous errors"),
    (46, Drain, "GPU stopped processing (GPU timeout)"),
    (48, Drain, "Double bit ECC error"),
    (54, Warn, "Auxiliary power is not connected"),
    (61, Warn, "Internal micro-controller breakpoint/warning"),
    (62, Drain, "Internal micro-controller halt"),
    (63, Warn, "GPU memory remapping event"),
    (64, Drain, "GPU memory remapping failure"),
    (68, Application, "NVDEC0 exception"),
    (69, Application, "Graphics engine class error"),
    (74, Drain, "NVLink error"),
    (79, Reboot, "GPU has fallen off the bus"),
    (92, Warn, "High single-bit ECC error rate"),
    (94, Application, "Contained memory error"),
    (95, Drain, "Uncontained memory error"),
    (109, Drain, "Context switch timeout"),
    (110, Drain, "Security fault"),
    (119, Drain, "GSP RPC timeout"),
    (120, Drain, "GSP error"),
    (121, Warn, "C2C (chip interconnect) error"),
    (136, Drain, "Link training failed"),
    (137, Warn, "NVLink privilege error"),
    (140, Drain, "Unrecovered ECC error"),
    (142, Drain, "Fatal per the EKS node monitoring agent"),
    (143, Drain, "GPU initialization error"),
    (144, Warn, "NVLink SAW error (decode-dependent)"),
    (145, Warn, "NVLink RLW error (decode-dependent)"),
    (146, Warn, "NVLink TLW error (decode-dependent)"),
    (147, Warn, "NVLink TREX error (decode-dependent)"),
    (148, Warn, "NVLink NVLPW control error (decode-dependent)"),
    (149, Warn, "NVLink NETIR error (decode-dependent)"),
    (150, Warn, "NVLink MSE error (decode-dependent)"),
    (151, Reboot, "Confidential-computing key rotation error"),
    (154, Warn, "GPU recovery action changed"),
    (155, Drain, "NVLink software-defined error"),
    (156, Drain, "Resource retirement event"),
    (157, Warn, "Resource retirement failure"),
    (158, Drain, "GPU fatal timeout"),
    (159, Warn, "CHI non-data error"),
];

/// The class and meaning of `xid`; an XID not in the table is `warn`.
pub fn classify(xid: u64) -> (XidClass, &'static str) {
    match TABLE.binary_search_by_key(&xid, |e| e.0) {
        Ok(i) => (TABLE[i].1, TABLE[i].2),
        Err(_) => (Warn, "XID not in node-probe's table"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        assert!(TABLE.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn drain_set_matches_the_reference_policy() {
        // reference/telemetry.md §2.3 "drain + replace node (page)".
        for x in [
            48, 64, 74, 79, 95, 119, 120, 140, 143, 62, 46, 109, 110, 136, 155, 156, 158, 151,
        ] {
            assert!(classify(x).0.is_critical(), "xid {x}");
        }
        for x in [13, 31, 43, 45, 68, 69, 94, 8, 32] {
            assert_eq!(classify(x).0, Application, "xid {x}");
        }
        for x in [63, 92, 54, 121, 144, 150, 12345] {
            assert_eq!(classify(x).0, Warn, "xid {x}");
        }
    }
}
