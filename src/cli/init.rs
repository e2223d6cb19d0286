//! `watchfire init [DIR]`: a new alerting repository from the shipped policy pack, adapted to the
//! user's teams, metrics source and GPU telemetry path.
//!
//! The pack (`rules/`, `rules/tests/`, `slos/`, `rules/METRICS.md`, `deploy/cloudwatch-mapping.yaml`)
//! is compiled in with `include_str!` from this repository's own files, so there is one source of
//! truth and the binary works anywhere. Only the SLO owners (and, in the tests of the generated SLO
//! rules, the owners they expect) are rewritten to the user's teams; `deploy/watchfire.yaml`,
//! `routes.yaml`, `owners.yaml`, `rulecheck.yaml` and the GitHub workflows are generated here.
//!
//! Existing files are never overwritten without `--force`: in an existing repository only what is
//! missing is written, and what was skipped is listed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The repository to write into (created when missing).
    #[arg(default_value = ".", value_name = "DIR")]
    dir: PathBuf,
    /// The teams that own alerts, comma-separated. The first (or the one named like `platform`)
    /// is the default owner and gets the cluster-wide alerts; one named like `serving` or
    /// `inference` owns the serving SLOs.
    #[arg(long, value_delimiter = ',', default_value = "platform", value_name = "TEAM,...")]
    teams: Vec<String>,
    /// Where the GPU hardware signals come from.
    #[arg(long, value_enum, default_value = "dcgm-exporter")]
    telemetry: Telemetry,
    /// The EKS cluster's name (CloudWatch dimensions, kubectl links).
    #[arg(long, default_value = "eks-ml-prod", value_name = "NAME")]
    cluster: String,
    /// AWS region of AMP, CloudWatch and SNS (default: the AMP workspace's, else us-west-2).
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
    /// AWS account id for the SNS topic ARNs and the kubectl context (default: the AMP workspace
    /// ARN's, else the documentation account 111122223333, to edit).
    #[arg(long, value_name = "ID")]
    account_id: Option<String>,
    /// Amazon Managed Prometheus workspace: its id (ws-...), ARN or query URL (signed with SigV4).
    #[arg(long, value_name = "WORKSPACE", conflicts_with = "source_url")]
    amp_workspace: Option<String>,
    /// A plain Prometheus-compatible query API instead of AMP (http://prometheus:9090).
    #[arg(long, value_name = "URL")]
    source_url: Option<String>,
    /// How the severities of imported rules (kube-prometheus, awesome-prometheus-alerts) map onto
    /// the policy's classes page, notify and info: the routes written match both.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "critical=page,warning=notify",
        value_name = "SEV=CLASS,..."
    )]
    severity_map: Vec<String>,
    /// Overwrite files that exist.
    #[arg(long)]
    force: bool,
}

/// The GPU telemetry paths the policy reads (rules/METRICS.md).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Telemetry {
    /// node-probe, watchfire's NVML daemon (scraped as job="node-probe").
    NodeProbe,
    /// NVIDIA DCGM-Exporter (scraped as job="dcgm-exporter").
    DcgmExporter,
    /// CloudWatch Container Insights with enhanced observability, through the CloudWatch source.
    ContainerInsights,
}

impl Telemetry {
    fn name(self) -> &'static str {
        match self {
            Telemetry::NodeProbe => "node-probe",
            Telemetry::DcgmExporter => "dcgm-exporter",
            Telemetry::ContainerInsights => "container-insights",
        }
    }
}

/// The pack's rule files, their unit tests and SLO specs, as shipped in this repository.
/// `pack_matches_the_repository` (below) fails when a file is added to the pack but not here.
const PACK: &[(&str, &str)] = &[
    ("rules/METRICS.md", include_str!("../../rules/METRICS.md")),
    ("rules/accelerator.yaml", include_str!("../../rules/accelerator.yaml")),
    ("rules/applications.yaml", include_str!("../../rules/applications.yaml")),
    ("rules/capacity.yaml", include_str!("../../rules/capacity.yaml")),
    (
        "rules/control-plane.yaml",
        include_str!("../../rules/control-plane.yaml"),
    ),
    ("rules/gpu-tdp.yaml", include_str!("../../rules/gpu-tdp.yaml")),
    (
        "rules/gpu-telemetry.yaml",
        include_str!("../../rules/gpu-telemetry.yaml"),
    ),
    ("rules/recording.yaml", include_str!("../../rules/recording.yaml")),
    (
        "rules/slo-generated.yaml",
        include_str!("../../rules/slo-generated.yaml"),
    ),
    ("rules/telemetry.yaml", include_str!("../../rules/telemetry.yaml")),
    ("rules/training.yaml", include_str!("../../rules/training.yaml")),
    ("rules/workloads.yaml", include_str!("../../rules/workloads.yaml")),
    (
        "rules/tests/accelerator_test.yaml",
        include_str!("../../rules/tests/accelerator_test.yaml"),
    ),
    (
        "rules/tests/applications_test.yaml",
        include_str!("../../rules/tests/applications_test.yaml"),
    ),
    (
        "rules/tests/capacity_test.yaml",
        include_str!("../../rules/tests/capacity_test.yaml"),
    ),
    (
        "rules/tests/control_plane_test.yaml",
        include_str!("../../rules/tests/control_plane_test.yaml"),
    ),
    (
        "rules/tests/cost_test.yaml",
        include_str!("../../rules/tests/cost_test.yaml"),
    ),
    (
        "rules/tests/quiet_test.yaml",
        include_str!("../../rules/tests/quiet_test.yaml"),
    ),
    (
        "rules/tests/slo_test.yaml",
        include_str!("../../rules/tests/slo_test.yaml"),
    ),
    (
        "rules/tests/telemetry_test.yaml",
        include_str!("../../rules/tests/telemetry_test.yaml"),
    ),
    (
        "rules/tests/training_test.yaml",
        include_str!("../../rules/tests/training_test.yaml"),
    ),
    (
        "rules/tests/workloads_test.yaml",
        include_str!("../../rules/tests/workloads_test.yaml"),
    ),
    ("slos/artifacts.yaml", include_str!("../../slos/artifacts.yaml")),
    (
        "slos/inference-latency.yaml",
        include_str!("../../slos/inference-latency.yaml"),
    ),
    (
        "slos/priority-starts.yaml",
        include_str!("../../slos/priority-starts.yaml"),
    ),
    ("slos/serving.yaml", include_str!("../../slos/serving.yaml")),
    ("slos/submissions.yaml", include_str!("../../slos/submissions.yaml")),
];

/// Not written: `rules/tests/notifications.test.yaml` routes through this repository's own
/// deploy/routes.yaml and owners.yaml (the ml-* teams), which a new repository does not have.
#[cfg(test)]
const PACK_LEFT_OUT: &[&str] = &["rules/tests/notifications.test.yaml"];

const CLOUDWATCH_MAPPING: &str = include_str!("../../deploy/cloudwatch-mapping.yaml");

/// The shipped pack's owners: the SLO specs (and the rules and tests generated from them) name
/// these two teams, which become the user's.
const PACK_PLATFORM_OWNER: &str = "owner: ml-platform";
const PACK_SERVING_OWNER: &str = "owner: ml-serving";
/// The cluster and region the shipped CloudWatch mapping names.
const PACK_CLUSTER: &str = "eks-ml-prod";
const PACK_REGION: &str = "us-west-2";

const DEFAULT_REGION: &str = "us-west-2";

/// The user's choices, checked.
struct Plan {
    teams: Vec<String>,
    /// Default owner; owns the cluster-wide layers and the platform SLOs.
    platform: String,
    /// Owns the serving SLOs.
    serving: String,
    telemetry: Telemetry,
    cluster: String,
    region: String,
    account_id: String,
    source: Source,
    /// Severity values other rule collections use, by the class (page, notify, info) they route as.
    severity_map: Vec<(String, String)>,
}

impl Plan {
    /// The matcher of a class's route: the class and every severity mapped to it.
    fn severity_matcher(&self, class: &str) -> String {
        let mut values = vec![class.to_string()];
        values.extend(
            self.severity_map
                .iter()
                .filter(|(_, c)| c == class)
                .map(|(s, _)| s.clone()),
        );
        if values.len() == 1 {
            format!("severity=\"{class}\"")
        } else {
            format!("'severity=~\"{}\"'", values.join("|"))
        }
    }

    /// The severities that page (rulecheck's `page_severities`).
    fn page_severities(&self) -> Vec<String> {
        let mut v = vec!["page".to_string()];
        v.extend(
            self.severity_map
                .iter()
                .filter(|(_, c)| c == "page")
                .map(|(s, _)| s.clone()),
        );
        v
    }
}

enum Source {
    Amp { url: String },
    Prometheus { url: String },
}

pub fn run(args: Args) -> i32 {
    match run_inner(&args) {
        Ok(()) => 0,
        Err(e) => super::fail(format!("{e:#}")),
    }
}

fn run_inner(args: &Args) -> Result<()> {
    let plan = plan(args)?;
    let files = render(&plan);
    if args.dir.exists() && !args.dir.is_dir() {
        bail!("{}: not a directory", args.dir.display());
    }
    let (mut written, mut skipped) = (Vec::new(), Vec::new());
    for (rel, content) in &files {
        let path = args.dir.join(rel);
        if path.exists() && !args.force {
            skipped.push(rel.clone());
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("{}", parent.display()))?;
        }
        std::fs::write(&path, content).with_context(|| format!("{}", path.display()))?;
        written.push(rel.clone());
    }
    print!("{}", summary(args, &plan, &written, &skipped));
    Ok(())
}

fn summary(args: &Args, plan: &Plan, written: &[String], skipped: &[String]) -> String {
    let mut s = String::new();
    let dir = args.dir.display();
    for f in written {
        let _ = writeln!(s, "wrote   {f}");
    }
    for f in skipped {
        let _ = writeln!(s, "skipped {f} (exists; --force overwrites)");
    }
    if written.is_empty() {
        let _ = writeln!(
            s,
            "nothing written: all {} files exist in {dir} (--force overwrites them)",
            skipped.len()
        );
    } else {
        let _ = writeln!(
            s,
            "{} files written, {} skipped, in {dir}: teams {}, GPU telemetry {}, cluster {}",
            written.len(),
            skipped.len(),
            plan.teams.join(", "),
            plan.telemetry.name(),
            plan.cluster
        );
    }
    let cd = if args.dir == Path::new(".") {
        String::new()
    } else {
        format!("cd {dir} && ")
    };
    let _ = writeln!(s, "\nNext:");
    let _ = writeln!(
        s,
        "  {cd}rulecheck                                   # static checks (policy ml-on-eks)"
    );
    let _ = writeln!(
        s,
        "  watchfire test rules/tests/*_test.yaml      # the policy's unit tests"
    );
    let _ = writeln!(
        s,
        "  watchfire replay --demo --config deploy/watchfire.yaml   # the demo cluster through your routes"
    );
    let _ = writeln!(s, "Before `watchfire run`, edit what is marked EDIT:");
    let _ = writeln!(s, "  deploy/owners.yaml    the namespaces each team owns");
    let _ = writeln!(
        s,
        "  deploy/routes.yaml    PagerDuty routing keys as files (/etc/watchfire/secrets/pagerduty-<team>), SNS topics"
    );
    let _ = writeln!(s, "  deploy/watchfire.yaml the metrics source, external_url");
    s
}

/// Team names become receiver names, label values and YAML scalars: keep them plain.
fn check_team(t: &str) -> Result<()> {
    let plain = t.starts_with(|c: char| c.is_ascii_lowercase())
        && t.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !t.ends_with(['-', '_']);
    // YAML 1.1 reads these as booleans or null, not as the team's name.
    let yaml_word = matches!(t, "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null");
    if !plain || yaml_word {
        bail!("--teams: {t:?} is not a plain team name (lowercase letters, digits, - and _, starting with a letter)");
    }
    Ok(())
}

fn plan(args: &Args) -> Result<Plan> {
    let mut teams: Vec<String> = Vec::new();
    for t in &args.teams {
        let t = t.trim();
        if t.is_empty() {
            continue;
        }
        check_team(t)?;
        if !teams.iter().any(|x| x == t) {
            teams.push(t.to_string());
        }
    }
    if teams.is_empty() {
        bail!("--teams: name at least one team");
    }
    let find = |words: &[&str]| teams.iter().find(|t| words.iter().any(|w| t.contains(w))).cloned();
    let platform = find(&["platform", "infra"]).unwrap_or_else(|| teams[0].clone());
    let serving = find(&["serving", "inference"]).unwrap_or_else(|| platform.clone());
    let plain = |s: &str, flag: &str| -> Result<()> {
        if s.is_empty() || s.contains(|c: char| c.is_whitespace() || "'\"#{}[],:&*!|>%@`".contains(c)) {
            bail!("{flag}: {s:?} is not a plain name");
        }
        Ok(())
    };
    plain(&args.cluster, "--cluster")?;
    let arn_account = args
        .amp_workspace
        .as_deref()
        .and_then(|ws| ws.strip_prefix("arn:aws:aps:"))
        .and_then(|rest| rest.split(':').nth(1))
        .filter(|a| !a.is_empty());
    let account_id = match (&args.account_id, arn_account) {
        (Some(a), _) => a.clone(),
        (None, Some(a)) => a.to_string(),
        (None, None) => "111122223333".to_string(),
    };
    if !(account_id.len() == 12 && account_id.chars().all(|c| c.is_ascii_digit())) {
        bail!("--account-id: {account_id:?} is not a 12-digit AWS account id");
    }
    let (source, amp_region) = match (&args.amp_workspace, &args.source_url) {
        (_, Some(url)) => {
            check_url(url, "--source-url")?;
            (Source::Prometheus { url: url.clone() }, None)
        }
        (Some(ws), None) => {
            let (url, region) = amp_url(ws, args.region.as_deref())?;
            (Source::Amp { url }, region)
        }
        (None, None) => {
            let region = args.region.as_deref().unwrap_or(DEFAULT_REGION);
            let url = format!(
                "https://aps-workspaces.{region}.amazonaws.com/workspaces/ws-00000000-0000-0000-0000-000000000000"
            );
            (Source::Amp { url }, None)
        }
    };
    let region = args
        .region
        .clone()
        .or(amp_region)
        .unwrap_or_else(|| DEFAULT_REGION.to_string());
    plain(&region, "--region")?;
    let mut severity_map = Vec::new();
    for m in args.severity_map.iter().map(|m| m.trim()).filter(|m| !m.is_empty()) {
        let Some((sev, class)) = m.split_once('=') else {
            bail!("--severity-map: {m:?} must look like critical=page");
        };
        if !matches!(class, "page" | "notify" | "info") {
            bail!("--severity-map: {m:?}: the class must be page, notify or info");
        }
        if sev.is_empty() || !sev.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            bail!("--severity-map: {sev:?} is not a plain severity value");
        }
        severity_map.push((sev.to_string(), class.to_string()));
    }
    Ok(Plan {
        severity_map,
        teams,
        platform,
        serving,
        telemetry: args.telemetry,
        cluster: args.cluster.clone(),
        region,
        account_id,
        source,
    })
}

fn check_url(url: &str, flag: &str) -> Result<()> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .with_context(|| format!("{flag}: {url:?} is not an http(s) URL"))?;
    if rest.is_empty() || rest.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
        bail!("{flag}: {url:?} is not a URL");
    }
    Ok(())
}

/// AMP's query URL from a workspace id, ARN (`arn:aws:aps:REGION:ACCOUNT:workspace/ws-...`) or
/// URL, and the region the ARN or URL names.
fn amp_url(ws: &str, region: Option<&str>) -> Result<(String, Option<String>)> {
    let is_id =
        |s: &str| s.starts_with("ws-") && s.len() > 3 && s[3..].chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if ws.starts_with("https://") {
        check_url(ws, "--amp-workspace")?;
        let url = ws.trim_end_matches('/').to_string();
        // https://aps-workspaces.REGION.amazonaws.com/workspaces/ws-...
        let from_url = url
            .strip_prefix("https://aps-workspaces.")
            .and_then(|r| r.split_once(".amazonaws.com"))
            .map(|(r, _)| r.to_string());
        return Ok((url, from_url));
    }
    if let Some(rest) = ws.strip_prefix("arn:aws:aps:") {
        let parts: Vec<&str> = rest.splitn(3, ':').collect();
        if let [r, _account, res] = parts[..] {
            if let Some(id) = res.strip_prefix("workspace/").filter(|id| is_id(id)) {
                if !r.is_empty() {
                    return Ok((
                        format!("https://aps-workspaces.{r}.amazonaws.com/workspaces/{id}"),
                        Some(r.to_string()),
                    ));
                }
            }
        }
        bail!("--amp-workspace: {ws:?} is not an AMP workspace ARN (arn:aws:aps:REGION:ACCOUNT:workspace/ws-...)");
    }
    if is_id(ws) {
        let r = region.unwrap_or(DEFAULT_REGION);
        return Ok((
            format!("https://aps-workspaces.{r}.amazonaws.com/workspaces/{ws}"),
            None,
        ));
    }
    bail!("--amp-workspace: {ws:?}: expected a workspace id (ws-...), ARN or https:// query URL")
}

/// Every file `init` writes, by path relative to the repository, in writing order.
fn render(p: &Plan) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = PACK
        .iter()
        .map(|(path, text)| {
            let text = adapt_owners(text, p);
            // The contract names watchfire's own files (src/, tests/, examples/): say whose.
            let text = match *path {
                "rules/METRICS.md" => format!("> From watchfire's policy pack (`watchfire init`); paths under src/, tests/, examples/ and scenarios/ are watchfire's repository.\n\n{text}"),
                _ => text,
            };
            (path.to_string(), text)
        })
        .collect();
    files.push(("deploy/watchfire.yaml".into(), watchfire_yaml(p)));
    files.push(("deploy/routes.yaml".into(), routes_yaml(p)));
    files.push(("deploy/owners.yaml".into(), owners_yaml(p)));
    files.push(("deploy/cloudwatch-mapping.yaml".into(), cloudwatch_mapping(p)));
    if p.telemetry == Telemetry::DcgmExporter {
        files.push(("deploy/dcgm-exporter/counters.csv".into(), DCGM_COUNTERS.into()));
    }
    files.push(("rulecheck.yaml".into(), rulecheck_yaml(p)));
    files.push((
        ".github/workflows/rulecheck.yml".into(),
        RULECHECK_WORKFLOW.replace("@INSTALL@\n", INSTALL_STEPS),
    ));
    files.push((".github/workflows/replay-diff.yml".into(), replay_diff_workflow(p)));
    files
}

/// The pack's SLO owners become the user's teams (specs, generated rules, their tests).
fn adapt_owners(text: &str, p: &Plan) -> String {
    text.replace(PACK_PLATFORM_OWNER, &format!("owner: {}", p.platform))
        .replace(PACK_SERVING_OWNER, &format!("owner: {}", p.serving))
}

fn cloudwatch_mapping(p: &Plan) -> String {
    let body = CLOUDWATCH_MAPPING
        .replace(PACK_CLUSTER, &p.cluster)
        .replace(PACK_REGION, &p.region);
    format!(
        "# Written by `watchfire init` from watchfire's mapping. EDIT: the S3 buckets (BucketName) are examples.\n{body}"
    )
}

/// DCGM-Exporter's counters for the policy (`-f` / the Helm chart's `arguments`): its default set
/// reports power, temperature and the last XID; throttle reasons, the power limits (the TDP) and the
/// windowed XID and clock-event counts are off by default, and without them GPUThrottling cannot fire
/// and the TDP comes from the model table (rules/METRICS.md, "DCGM-Exporter").
const DCGM_COUNTERS: &str = "\
# DCGM-Exporter counters for watchfire's policy (written by `watchfire init`; rules/METRICS.md lists what
# each rule reads). Use it as the exporter's collectors file (dcgm-exporter -f counters.csv; with the Helm
# chart, a ConfigMap and `arguments: [-f, /etc/dcgm-exporter/counters.csv]`), scraped as job=\"dcgm-exporter\".
# Legacy field names: the rules read both them and the DCGM 4.6 names.
# Format: DCGM field, Prometheus metric type, help message

# From dcgm-exporter's default set (the policy reads temperature, power and XIDs; keep your others here).
DCGM_FI_DEV_GPU_TEMP,            gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE,         gauge, Power draw (in W).
DCGM_FI_DEV_XID_ERRORS,          gauge, Value of the last XID error encountered.
DCGM_FI_DEV_GPU_UTIL,            gauge, GPU utilization (in %).
DCGM_FI_DEV_FB_USED,             gauge, Framebuffer memory used (in MiB).

# Not in the default set: what GPUThrottling, GPULowPowerVsTDP and GPUHardwareFailure also read.
DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF, gauge, Default power management limit (in W): the TDP.
DCGM_FI_DEV_ENFORCED_POWER_LIMIT, gauge, Power limit the driver enforces (in W).
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, Bitmask of active clock throttle reasons.
DCGM_EXP_CLOCK_EVENTS_COUNT,     gauge, Count of clock events within the user-specified time window (see clock-events-count-window-size param).
DCGM_EXP_XID_ERRORS_COUNT,       gauge, Count of XID Errors within user-specified time window (see xid-count-window-size param).
";

fn rulecheck_yaml(p: &Plan) -> String {
    format!(
        "# rulecheck's configuration (every key: docs/reference/rulecheck.yaml.md in watchfire's repository,\n\
         # `rulecheck --help`). The rules under rules/ and slos/ come from watchfire's ML-on-EKS policy pack\n\
         # (rules/METRICS.md): every alert carries severity and layer from the policy's values and the summary,\n\
         # description and runbook_url annotations; recording rules are named level:metric:operations.\n\
         # rulecheck finds rules/, slos/ and deploy/ itself.\n\
         policy: ml-on-eks\n\
         # Severities that page: routes/intent follows each such alert through owners.yaml and the routes\n\
         # and reports it when no paging receiver gets it (the routes map these too: --severity-map).\n\
         page_severities: [{}]\n\
         # Rules imported from other collections (kube-prometheus, awesome-prometheus-alerts) go under\n\
         # rules/vendor/: they keep every universal check, without the ML-on-EKS policy's labels and names.\n\
         # One finding is silenced in the file: `# rulecheck disable CODE` above a rule or a group,\n\
         # `# rulecheck file/disable CODE` for the whole file.\n\
         overrides:\n  \
           - paths: [rules/vendor/]\n    \
             policy: none\n",
        p.page_severities().join(", ")
    )
}

fn watchfire_yaml(p: &Plan) -> String {
    let mut s = String::from(
        "# watchfire configuration (written by `watchfire init`). Relative paths resolve against this file's\n\
         # directory, so the same file serves `watchfire replay` in a checkout and the evaluator in the cluster.\n\
         sources:\n",
    );
    match &p.source {
        Source::Amp { url } => {
            let _ = write!(
                s,
                "  - name: amp                     # Amazon Managed Service for Prometheus, signed with the pod's IRSA credentials\n    \
                   type: prometheus\n    \
                   url: {url}{edit}\n    \
                   timeout: 30s\n    \
                   sigv4: {{region: {region}, service: aps}}\n",
                edit = if url.contains("ws-00000000-") { "   # EDIT: your workspace" } else { "" },
                region = p.region,
            );
        }
        Source::Prometheus { url } => {
            let _ = write!(
                s,
                "  - name: prometheus              # a Prometheus-compatible query API\n    \
                   type: prometheus\n    \
                   url: {url}\n    \
                   timeout: 30s\n"
            );
        }
    }
    let cw = "name: cloudwatch\n\
              type: cloudwatch\n\
              mapping_file: cloudwatch-mapping.yaml\n\
              timeout: 30s";
    match p.telemetry {
        Telemetry::ContainerInsights => {
            s.push_str(
                "  # GPU telemetry: Container Insights (enhanced observability) through CloudWatch, as the series\n  \
                 # cloudwatch-mapping.yaml names; also AWS/Usage quotas, S3 and control-plane log metrics.\n  \
                 # Needs cloudwatch:GetMetricData and cloudwatch:ListMetrics in the IRSA role's policy.\n",
            );
            for (i, line) in cw.lines().enumerate() {
                let _ = writeln!(s, "  {}{line}", if i == 0 { "- " } else { "  " });
            }
        }
        t => {
            let how = match t {
                Telemetry::NodeProbe => {
                    "node-probe's DaemonSet on the GPU nodes, scraped as job=\"node-probe\" into the source above"
                }
                _ => {
                    "DCGM-Exporter scraped as job=\"dcgm-exporter\" into the source above, with the counters of\n  \
                     # dcgm-exporter/counters.csv (throttle reasons and power limits are not in its default set)"
                }
            };
            let _ = writeln!(s, "  # GPU telemetry: {how}.");
            s.push_str(
                "  # CloudWatch (AWS/Usage quotas, S3 request metrics, control-plane log metrics) through\n  \
                 # cloudwatch-mapping.yaml; needs cloudwatch:GetMetricData and ListMetrics:\n",
            );
            for (i, line) in cw.lines().enumerate() {
                let _ = writeln!(s, "  # {}{line}", if i == 0 { "- " } else { "  " });
            }
        }
    }
    s.push_str(
        "rule_files: [../rules]              # every *.yaml and *.yml under rules/ (as rulecheck reads them); unit tests are skipped\n\
         slo_files: [../slos/*.yaml]         # Sloth specs, generated to rules at load\n\
         routes_file: routes.yaml            # Alertmanager 0.25 format\n\
         owners_file: owners.yaml            # owners, diagnostic links, label deny-list\n\
         evaluation_interval: 1m\n\
         external_url: https://watchfire.example.com   # EDIT: where watchfire's API and status page are reached\n\
         state_dir: /var/lib/watchfire\n\
         http:\n  \
           listen: 0.0.0.0:9099\n  \
           bearer_token_env: WATCHFIRE_API_TOKEN\n\
         shard: 0/1\n",
    );
    s
}

fn owners_yaml(p: &Plan) -> String {
    let mut s = format!(
        "# Who owns what (written by `watchfire init`). Resolution: the alert's `owner` label when it names a\n\
         # team below (the SLO specs set it), else the namespace's team label (namespace_teams), else the first\n\
         # team whose `owns` entry matches, else `default`. The team is written to `owner` before routing.\n\
         team_label: owner\n\
         default: {}\n\
         teams:\n",
        p.platform
    );
    for t in &p.teams {
        let _ = write!(
            s,
            "  - name: {t}\n    \
               receivers: {{page: {t}-pagerduty, notify: {t}-sns{info}}}\n    \
               escalation: [\"{t} on-call\"]                   # EDIT: who is paged after whom\n    \
               owns:\n      \
                 - namespace: \"{t}|{t}-.*\"   # EDIT: the namespaces {t} owns (anchored regex)\n",
            info = if *t == p.platform { ", info: digest" } else { "" },
        );
        if *t == p.platform {
            s.push_str(
                "      # Cluster-wide alerts without a namespace (GPUs, nodes, telemetry, control plane).\n      \
                 - matchers: ['layer=~\"accelerator|worker|telemetry|control-plane\"', 'namespace=\"\"']\n",
            );
        }
    }
    let _ = write!(
        s,
        "\n# Never sent to external receivers (PagerDuty, SNS): image references, prompts, storage paths,\n\
         # tenant names, run and pod identifiers.\n\
         deny_labels: [image, image_id, container_image, prompt, s3_path, path, bucket_path, tenant, run_id, uid, pod_uid]\n\
         \n\
         # Diagnostic links on every notification.\n\
         links:\n  \
           cloudwatch_region: {region}\n  \
           cloudwatch_metrics: \"aws_.*\"\n  \
           kubectl: \"kubectl --context arn:aws:eks:{region}:{account}:cluster/{{cluster}}\"\n  \
           range_before: 1h\n\
         \n\
         # A namespace labelled team=<name> (kube-state-metrics with\n\
         # --metric-labels-allowlist=namespaces=[team,workload_class]) is owned by that team.\n\
         namespace_teams:\n  \
           metric: kube_namespace_labels\n  \
           label: label_team\n",
        region = p.region,
        account = p.account_id,
    );
    s
}

fn routes_yaml(p: &Plan) -> String {
    let mut s = format!(
        "# Alertmanager 0.25 configuration (written by `watchfire init`; `amtool check-config` accepts it).\n\
         # watchfire stamps each alert's owner (owners.yaml) into `owner` before routing: pages go to the\n\
         # owner's PagerDuty service, notifications to its SNS topic, info to the digest topic.\n\
         # Severities of imported rules route as the class they map to (`watchfire init --severity-map`):\n\
         # {map}.\n\
         global:\n  \
           resolve_timeout: 5m\n\
         \n\
         route:\n  \
           receiver: digest\n  \
           group_by: [cluster, namespace, alertname]\n  \
           group_wait: 30s\n  \
           group_interval: 5m\n  \
           repeat_interval: 4h\n  \
           routes:\n    \
             # The dead man's switch: Watchdog always fires; its notifications stopping is the alarm.\n    \
             - matchers: [alertname=\"Watchdog\"]\n      \
               receiver: heartbeat\n      \
               group_by: [cluster]\n      \
               group_wait: 0s\n      \
               group_interval: 1m\n      \
               repeat_interval: 1h\n\
         \n    \
             # Pages: one PagerDuty incident per cause (alert, cluster, namespace); a threshold page and\n    \
             # its SLO's burn-rate page join through the `slo` label both carry.\n    \
             - matchers: [{page}]\n      \
               group_by: [alertname, cluster, namespace]\n      \
               group_wait: 30s\n      \
               group_interval: 5m\n      \
               repeat_interval: 4h\n      \
               receiver: {platform}-pagerduty\n      \
               routes:\n        \
                 - matchers: ['slo=~\".+\"']\n          \
                   group_by: [slo, cluster, namespace]\n          \
                   routes: &page_owners\n",
        platform = p.platform,
        page = p.severity_matcher("page"),
        map = if p.severity_map.is_empty() {
            "none mapped".to_string()
        } else {
            p.severity_map
                .iter()
                .map(|(s, c)| format!("{s} -> {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
    );
    for t in &p.teams {
        let _ = write!(
            s,
            "            - matchers: [owner=\"{t}\"]\n              receiver: {t}-pagerduty\n"
        );
    }
    s.push_str(
        "        - matchers: ['slo=\"\"']\n          \
           routes: *page_owners\n\
         \n    \
           # Notifications: the owning team's SNS topic.\n    \
           - matchers: [@NOTIFY@]\n      \
             group_by: [owner, cluster, namespace, alertname]\n      \
             group_wait: 1m\n      \
             group_interval: 15m\n      \
             repeat_interval: 12h\n",
    );
    let _ = writeln!(s, "      receiver: {}-sns\n      routes:", p.platform);
    for t in &p.teams {
        let _ = write!(s, "        - matchers: [owner=\"{t}\"]\n          receiver: {t}-sns\n");
    }
    s = s.replace("@NOTIFY@", &p.severity_matcher("notify"));
    s.push_str(
        &INHIBIT_AND_INFO
            .replace("[severity=\"info\"]", &format!("[{}]", p.severity_matcher("info")))
            .replace("[severity=\"page\"]", &format!("[{}]", p.severity_matcher("page")))
            .replace("[severity=\"notify\"]", &format!("[{}]", p.severity_matcher("notify"))),
    );
    s.push_str("\nreceivers:\n");
    for t in &p.teams {
        let _ = write!(
            s,
            "  - name: {t}-pagerduty\n    \
               pagerduty_configs:\n      \
                 # EDIT: the PagerDuty service's Events API v2 routing key, in this file (a Kubernetes secret).\n      \
                 - routing_key_file: /etc/watchfire/secrets/pagerduty-{t}\n        \
                   severity: critical\n        \
                   send_resolved: true\n"
        );
    }
    for t in &p.teams {
        let _ = write!(
            s,
            "  - name: {t}-sns\n    \
               sns_configs:\n      \
                 - topic_arn: arn:aws:sns:{r}:{a}:watchfire-{t}   # EDIT: the team's topic (sns:Publish in the IRSA role)\n        \
                   sigv4: {{region: {r}}}\n",
            r = p.region,
            a = p.account_id,
        );
    }
    let _ = write!(
        s,
        "  - name: digest\n    \
           sns_configs:\n      \
             - topic_arn: arn:aws:sns:{r}:{a}:watchfire-digest     # EDIT: efficiency and cost signals, daily\n        \
               sigv4: {{region: {r}}}\n        \
               send_resolved: false\n  \
         # EDIT: your dead man's switch (a webhook_configs entry of a heartbeat service). Without one,\n  \
         # Watchdog's notifications go nowhere and nothing notices when watchfire stops.\n  \
         - name: heartbeat\n",
        r = p.region,
        a = p.account_id,
    );
    s
}

/// The info route and the inhibit rules of the shipped routes (rules/METRICS.md lists what they rely on).
const INHIBIT_AND_INFO: &str = "
    # Efficiency and cost signals: a daily digest, not a person.
    - matchers: [severity=\"info\"]
      receiver: digest
      group_by: [cluster, alertname]
      group_wait: 5m
      group_interval: 1h
      repeat_interval: 24h

inhibit_rules:
  # A GPU hardware failure explains low power and throttling on that node.
  - source_matchers: [alertname=\"GPUHardwareFailure\"]
    target_matchers: ['alertname=~\"GPULowPowerVsTDP|GPUThrottling\"']
    equal: [cluster, node]
  # A telemetry path down explains the alerts fed by that path (rules name it in `telemetry`), in
  # that cluster, or on that node where the outage is one node's.
  - source_matchers: [alertname=\"TelemetryPathDown\", scope=\"path\"]
    target_matchers: ['alertname!~\"TelemetryPathDown|Watchdog|GPUHardwareFailure\"']
    equal: [cluster, telemetry]
  - source_matchers: [alertname=\"TelemetryPathDown\", scope=\"node\"]
    target_matchers: ['alertname!~\"TelemetryPathDown|Watchdog|GPUHardwareFailure\"']
    equal: [cluster, node, telemetry]
  # A page suppresses the notify of the same alert and scope.
  - source_matchers: [severity=\"page\"]
    target_matchers: [severity=\"notify\"]
    equal: [alertname, cluster, namespace]
";

/// The install step both workflows share: watchfire from the git repository your organisation
/// builds it from (repository variables, so the workflow files need no edit).
const INSTALL_STEPS: &str = "      - uses: dtolnay/rust-toolchain@stable
      - uses: actions/cache@v4
        with:
          path: ~/.cargo/bin
          key: watchfire-${{ vars.WATCHFIRE_GIT_REF || 'default' }}
      - name: Install watchfire and rulecheck
        # Repository variables: WATCHFIRE_GIT_URL (the git repository of watchfire's source) and
        # WATCHFIRE_GIT_REF (a tag or commit; unset: the default branch).
        env:
          GIT_URL: ${{ vars.WATCHFIRE_GIT_URL }}
          GIT_REF: ${{ vars.WATCHFIRE_GIT_REF }}
        run: command -v watchfire >/dev/null || cargo install --locked --git \"$GIT_URL\" ${GIT_REF:+--rev \"$GIT_REF\"} watchfire
";

/// `@INSTALL@` is replaced with [`INSTALL_STEPS`].
const RULECHECK_WORKFLOW: &str = "\
# Static checks as annotations on the pull request, and the rule unit tests (written by `watchfire init`).
name: rulecheck
on:
  pull_request:
    paths: [rules/**, slos/**, deploy/**, rulecheck.yaml, .github/workflows/rulecheck.yml]
permissions: {contents: read}
jobs:
  rulecheck:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with: {fetch-depth: 0}     # --base reads origin/<base> from git
@INSTALL@
      - name: Static checks (annotations on the PR, only problems in changed rules)
        run: rulecheck --format github --base origin/${{ github.base_ref }}
      - name: Rule unit tests and notification tests
        # Both kinds: promtool's rule tests (*_test.yaml) and notification tests (*.test.yaml).
        run: |
          shopt -s nullglob globstar
          watchfire test rules/**/*_test.yaml rules/**/*_test.yml rules/**/*.test.yaml rules/**/*.test.yml
";

fn replay_diff_workflow(p: &Plan) -> String {
    let aws = match p.source {
        Source::Amp { .. } => format!(
            "      # The role needs aps:QueryMetrics (and cloudwatch:GetMetricData for CloudWatch-sourced rules).\n      \
             - uses: aws-actions/configure-aws-credentials@v4\n        \
               with:\n          \
                 role-to-assume: ${{{{ vars.WATCHFIRE_REPLAY_ROLE }}}}\n          \
                 aws-region: {}\n",
            p.region
        ),
        Source::Prometheus { .. } => String::new(),
    };
    format!(
        "# What would this change page? The base branch vs this pull request over the last week of the\n\
         # configured sources, as a sticky PR comment (written by `watchfire init`). Only the rule groups the\n\
         # PR touches (and what they read) are fetched and replayed; the cache keeps the fetched week between\n\
         # runs. Without access to the sources, replay the demo cluster instead: --demo.\n\
         name: replay-diff\n\
         on:\n  \
           pull_request:\n    \
             paths: [rules/**, slos/**, deploy/**]\n\
         jobs:\n  \
           replay-diff:\n    \
             runs-on: ubuntu-latest\n    \
             permissions: {{contents: read, pull-requests: write, id-token: write}}\n    \
             steps:\n      \
               - uses: actions/checkout@v4\n        \
                 with: {{fetch-depth: 0}}     # --compare reads origin/<base> from git\n\
         {INSTALL_STEPS}{aws}      \
               - uses: actions/cache@v4\n        \
                 with:\n          \
                   path: ~/.cache/watchfire/replay\n          \
                   key: watchfire-replay-${{{{ github.run_id }}}}\n          \
                   restore-keys: watchfire-replay-\n      \
               - name: Replay base and PR over the last week, diff the pages\n        \
                 run: |\n          \
                   watchfire replay --config deploy/watchfire.yaml --from -7d \\\n            \
                     --compare origin/${{{{ github.base_ref }}}} --format markdown > comment.md\n      \
               - uses: marocchino/sticky-pull-request-comment@v2\n        \
                 with:\n          \
                   header: watchfire-replay\n          \
                   path: comment.md\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_for(teams: &str, telemetry: Telemetry) -> Plan {
        let args = Args {
            dir: PathBuf::from("."),
            teams: teams.split(',').map(String::from).collect(),
            telemetry,
            cluster: "c1".into(),
            region: None,
            account_id: None,
            amp_workspace: None,
            source_url: None,
            severity_map: vec!["critical=page".into(), "warning=notify".into()],
            force: false,
        };
        plan(&args).expect("plan")
    }

    /// One source of truth: every rule file, test and SLO spec of the pack is embedded (or left out
    /// on purpose), and nothing embedded is missing from the repository.
    #[test]
    fn pack_matches_the_repository() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut on_disk = Vec::new();
        for dir in ["rules", "rules/tests", "slos"] {
            for e in std::fs::read_dir(root.join(dir)).expect("read pack dir").flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.path().is_file() && (name.ends_with(".yaml") || name.ends_with(".md")) {
                    on_disk.push(format!("{dir}/{name}"));
                }
            }
        }
        on_disk.retain(|f| !PACK_LEFT_OUT.contains(&f.as_str()));
        on_disk.sort();
        let mut embedded: Vec<String> = PACK.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
    }

    #[test]
    fn slo_owners_become_the_users_teams() {
        let p = plan_for("ml-training,ml-serving", Telemetry::DcgmExporter);
        assert_eq!(p.platform, "ml-training");
        assert_eq!(p.serving, "ml-serving");
        let files = render(&p);
        let mut replaced = 0;
        for (path, text) in &files {
            assert!(!text.contains("ml-platform"), "{path} still names ml-platform");
            if path.starts_with("slos/") || path.ends_with("slo-generated.yaml") {
                replaced += text.matches("owner: ml-training").count();
            }
        }
        assert!(replaced > 0);
        let p = plan_for("data,core-platform,inference", Telemetry::NodeProbe);
        assert_eq!(
            (p.platform.as_str(), p.serving.as_str()),
            ("core-platform", "inference")
        );
    }

    #[test]
    fn bad_names_are_refused() {
        for t in ["", "Team", "on", "a b", "x-", "9lives", "a:b"] {
            let mut args = Args {
                dir: PathBuf::from("."),
                teams: vec![t.to_string()],
                telemetry: Telemetry::NodeProbe,
                cluster: "c".into(),
                region: None,
                account_id: None,
                amp_workspace: None,
                source_url: None,
                severity_map: Vec::new(),
                force: false,
            };
            assert!(plan(&args).is_err(), "{t:?} accepted");
            args.teams = vec!["ok".into()];
            args.account_id = Some("12".into());
            assert!(plan(&args).is_err());
        }
    }

    /// Every field of the counters file is one DCGM-Exporter has (its catalogue), and every
    /// DCGM-Exporter metric the GPU rules read is enabled in one of its names.
    #[test]
    fn dcgm_counters_are_known_fields_the_rules_read() {
        let catalogue = include_str!("../../catalogue/dcgm-exporter.yaml");
        let fields: Vec<&str> = DCGM_COUNTERS
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split(',').next().unwrap().trim())
            .collect();
        assert!(fields.len() >= 9);
        for f in &fields {
            assert!(
                catalogue.contains(&format!("\n  {f}: {{")),
                "{f} is not a DCGM-Exporter field"
            );
        }
        let rules = include_str!("../../rules/gpu-telemetry.yaml");
        for f in [
            "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF",
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
            "DCGM_EXP_XID_ERRORS_COUNT",
        ] {
            assert!(fields.contains(&f));
            assert!(rules.contains(f), "{f} is no longer read by the rules");
        }
    }

    #[test]
    fn amp_workspace_forms() {
        let (url, r) = amp_url("arn:aws:aps:eu-west-1:123456789012:workspace/ws-abc-123", None).unwrap();
        assert_eq!(
            url,
            "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-abc-123"
        );
        assert_eq!(r.as_deref(), Some("eu-west-1"));
        let (url, r) = amp_url("ws-abc", Some("ap-south-1")).unwrap();
        assert_eq!(url, "https://aps-workspaces.ap-south-1.amazonaws.com/workspaces/ws-abc");
        assert_eq!(r, None);
        let (_, r) = amp_url("https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-x/", None).unwrap();
        assert_eq!(r.as_deref(), Some("us-east-2"));
        assert!(amp_url("arn:aws:aps:eu-west-1:1:collector/x", None).is_err());
        assert!(amp_url("my-workspace", None).is_err());
    }
}
