//! The application-level exporters: vLLM model servers, training progress, the EKS
//! control-plane log metric filters (CloudWatch) and the OpenTelemetry Collector's own
//! telemetry, with the names, labels and units those emit.

use super::super::cluster::{key, noise, Pod, PodOwner, STEADY_DATA_WAIT};
use super::super::spec::{EventKind, WorkloadKind};
use super::{period_values, Gen, Sink, CLOUDWATCH_PERIOD_MS};

const M: i64 = 60_000;

/// vLLM's `time_to_first_token_seconds` buckets.
pub(crate) const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
/// vLLM's request latency buckets (`e2e_request_latency_seconds`, `request_queue_time_seconds`).
pub(crate) const LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
/// How long a server takes to go from steady to fully queued.
const QUEUE_RAMP_MS: i64 = 5 * M;
/// How long the collector's queue takes to fill.
const QUEUE_FILL_MS: i64 = 10 * M;
const QUEUE_CAPACITY: f64 = 1000.0;

/// `le` as the Python client (and Prometheus 3's normalisation) writes it: `1.0`, `0.25`.
fn le(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// A log-logistic latency distribution: median `m`, shape `s` (log-space scale).
#[derive(Clone, Copy)]
struct Dist {
    m: f64,
    s: f64,
}

impl Dist {
    fn cdf(self, x: f64) -> f64 {
        1.0 / (1.0 + (-(x / self.m).ln() / self.s).exp())
    }

    fn mean(self) -> f64 {
        let a = std::f64::consts::PI * self.s;
        self.m * a / a.sin()
    }

    /// From `a` to `b` by `f` in [0, 1], in log space.
    fn towards(self, b: Dist, f: f64) -> Dist {
        Dist {
            m: (self.m.ln() + (b.m.ln() - self.m.ln()) * f).exp(),
            s: self.s + (b.s - self.s) * f,
        }
    }
}

/// What an application process does at one step: `None` when it is not running (no target),
/// `Some(false)` when it runs but its scrape fails (crash-looping container).
fn app_up(c: &super::super::cluster::Cluster<'_>, p: &Pod, t: i64) -> Option<bool> {
    if !p.running(t) {
        return None;
    }
    match c.node_down(p.node, t) {
        // The pod is still listed but its node does not answer (or it left discovery).
        Some((_, super::super::spec::DownMode::ScrapeFail)) => Some(false),
        Some((_, super::super::spec::DownMode::Vanish)) => None,
        // A terminating pod's process has stopped.
        None if p.deleting(t) => None,
        None => Some(!c.crash_looping(p, t)),
    }
}

/// A pod's scrape target labels, as a PodMonitor writes them.
fn pod_target<'a>(job: &'a str, instance: &'a str, namespace: &'a str, pod: &'a str) -> [(&'a str, &'a str); 4] {
    [
        ("job", job),
        ("instance", instance),
        ("namespace", namespace),
        ("pod", pod),
    ]
}

impl Sink {
    /// The `up` series of an application pod's target: 1 while it runs, 0 while its container
    /// crash-loops, absent otherwise.
    fn app_up_series(&mut self, c: &super::super::cluster::Cluster<'_>, p: &Pod, target: &[(&str, &str)]) {
        self.series("up", target, |t| app_up(c, p, t).map(|ok| f64::from(u8::from(ok))));
    }

    /// A per-process counter: `inc(t)` added at every step while `alive(t)`; a process that is
    /// not alive restarts from zero. Written where `present(t)`; `floor` for integer counts.
    #[allow(clippy::too_many_arguments)]
    fn process_counter(
        &mut self,
        name: &str,
        pairs: &[(&str, &str)],
        initial: f64,
        inc: &dyn Fn(i64) -> f64,
        alive: &dyn Fn(i64) -> bool,
        present: &dyn Fn(i64) -> bool,
        floor: bool,
    ) {
        let mut totals = Vec::new();
        let mut total = initial;
        let mut t = self.start;
        while t < self.end {
            if alive(t) {
                total += inc(t).max(0.0);
            } else {
                total = 0.0;
            }
            totals.push(if floor {
                total.floor()
            } else {
                (total * 1e3).round() / 1e3
            });
            t += self.step;
        }
        let (start, step) = (self.start, self.step);
        self.series(name, pairs, |t| {
            present(t).then(|| totals[((t - start) / step) as usize])
        });
    }

    /// A classic histogram (cumulative `_bucket{le}`, `_sum`, `_count`): `n(t)` observations
    /// at each step from `dist(t)`.
    #[allow(clippy::too_many_arguments)]
    fn histogram(
        &mut self,
        name: &str,
        pairs: &[(&str, &str)],
        buckets: &[f64],
        n: &dyn Fn(i64) -> f64,
        dist: &dyn Fn(i64) -> Dist,
        alive: &dyn Fn(i64) -> bool,
        present: &dyn Fn(i64) -> bool,
    ) {
        let steps = ((self.end - self.start) / self.step) as usize;
        // Per bucket (and +Inf, then the sum): the running totals at each step.
        let mut totals = vec![Vec::with_capacity(steps); buckets.len() + 2];
        let mut acc = vec![0.0; buckets.len() + 2];
        let mut t = self.start;
        while t < self.end {
            if alive(t) {
                let (k, d) = (n(t).max(0.0), dist(t));
                for (a, &ub) in acc.iter_mut().zip(buckets) {
                    *a += k * d.cdf(ub);
                }
                acc[buckets.len()] += k;
                acc[buckets.len() + 1] += k * d.mean();
            } else {
                acc.iter_mut().for_each(|a| *a = 0.0);
            }
            for (b, (a, v)) in acc.iter().zip(totals.iter_mut()).enumerate() {
                v.push(if b == buckets.len() + 1 {
                    (a * 1e3).round() / 1e3
                } else {
                    a.floor()
                });
            }
            t += self.step;
        }
        let (start, step) = (self.start, self.step);
        let at = |v: &[f64], t: i64| present(t).then(|| v[((t - start) / step) as usize]);
        let bucket = format!("{name}_bucket");
        for (b, v) in totals.iter().take(buckets.len() + 1).enumerate() {
            let bound = buckets.get(b).map_or_else(|| "+Inf".to_string(), |x| le(*x));
            let mut l = pairs.to_vec();
            l.push(("le", bound.as_str()));
            self.series(&bucket, &l, |t| at(v, t));
        }
        let count = &totals[buckets.len()];
        self.series(&format!("{name}_count"), pairs, |t| at(count, t));
        let sum = &totals[buckets.len() + 1];
        self.series(&format!("{name}_sum"), pairs, |t| at(sum, t));
    }
}

impl Gen<'_, '_> {
    /// Seconds of the pod's process before the data starts (pods running from the start).
    fn uptime_before(&self, p: &Pod) -> f64 {
        if p.running_ms <= self.v.start {
            (self.v.start - p.created_ms).max(0) as f64 / 1000.0
        } else {
            0.0
        }
    }

    // ----- vLLM -----------------------------------------------------------------------------
    /// Each replica of a `server: vllm` deployment, scraped by a PodMonitor as job `vllm`.
    pub(super) fn vllm(&mut self) {
        let c = self.v.c;
        let step_s = self.v.step as f64 / 1000.0;
        let (start, step) = (self.v.start, self.v.step);
        for p in &c.pods {
            let PodOwner::Workload {
                namespace, workload, ..
            } = p.owner
            else {
                continue;
            };
            let w = &c.s.namespaces[namespace].workloads[workload];
            let Some(model) = w.vllm_model.as_deref() else {
                continue;
            };
            let instance = format!("{}:8000", p.ip);
            let target = pod_target("vllm", &instance, &p.namespace, &p.name);
            self.out.app_up_series(c, p, &target);
            let alive = |t: i64| app_up(c, p, t) == Some(true);
            let mut l = target.to_vec();
            l.push(("model_name", model));
            let k = key(&p.name);
            let i = |t: i64| (t - start) / step;
            // How far into queueing (0 steady, 1 fully queued).
            let q = |t: i64| {
                c.queueing_for(p, t)
                    .map_or(0.0, |d| (d as f64 / QUEUE_RAMP_MS as f64).min(1.0))
            };
            // ~2 requests/s per replica, flat while queueing (the server is full, not slower).
            let rate = |t: i64| 2.0 * (0.9 + 0.2 * noise(k, i(t)));
            let n = |t: i64| rate(t) * step_s;
            let running = self
                .v
                .steps_map(|t| alive(t).then(|| (7.0 + 4.0 * noise(k ^ 1, i(t)) + 33.0 * q(t)).round()));
            self.out.write_steps("vllm:num_requests_running", &l, &running);
            let waiting = self.v.steps_map(|t| {
                alive(t).then(|| {
                    let steady = if noise(k ^ 2, i(t)) > 0.85 { 1.0 } else { 0.0 };
                    (steady + q(t) * (52.0 + 28.0 * noise(k ^ 3, i(t)))).round()
                })
            });
            self.out.write_steps("vllm:num_requests_waiting", &l, &waiting);
            let kv = self.v.steps_map(|t| {
                alive(t).then(|| {
                    let steady = 0.3 + 0.3 * noise(k ^ 4, i(t));
                    let full = 0.97 + 0.02 * noise(k ^ 5, i(t));
                    ((steady + (full - steady) * q(t)) * 1e4).round() / 1e4
                })
            });
            self.out.write_steps("vllm:kv_cache_usage_perc", &l, &kv);
            let initial = self.uptime_before(p) * 2.0;
            let mut sl = l.clone();
            sl.push(("finished_reason", "stop"));
            self.out
                .process_counter("vllm:request_success_total", &sl, initial, &n, &alive, &alive, true);
            self.out.process_counter(
                "vllm:prompt_tokens_total",
                &l,
                initial * 620.0,
                &|t| n(t) * 620.0 * (0.85 + 0.3 * noise(k ^ 6, i(t))),
                &alive,
                &alive,
                true,
            );
            self.out.process_counter(
                "vllm:generation_tokens_total",
                &l,
                initial * 240.0,
                &|t| n(t) * 240.0 * (0.85 + 0.3 * noise(k ^ 7, i(t))),
                &alive,
                &alive,
                true,
            );
            let ttft = |t: i64| Dist { m: 0.2, s: 0.25 }.towards(Dist { m: 20.0, s: 0.2 }, q(t));
            let queue = |t: i64| Dist { m: 0.01, s: 0.4 }.towards(Dist { m: 60.0, s: 0.2 }, q(t));
            let e2e = |t: i64| Dist { m: 4.0, s: 0.3 }.towards(Dist { m: 85.0, s: 0.2 }, q(t));
            for (name, buckets, d) in [
                (
                    "vllm:time_to_first_token_seconds",
                    TTFT_BUCKETS,
                    &ttft as &dyn Fn(i64) -> Dist,
                ),
                ("vllm:request_queue_time_seconds", LATENCY_BUCKETS, &queue),
                ("vllm:e2e_request_latency_seconds", LATENCY_BUCKETS, &e2e),
            ] {
                self.out.histogram(name, &l, buckets, &n, d, &alive, &alive);
            }
        }
    }

    // ----- training progress ----------------------------------------------------------------
    /// Each worker of a `progress: true` job, scraped by a PodMonitor as job `training-metrics`.
    pub(super) fn training_progress(&mut self) {
        let c = self.v.c;
        let step_s = self.v.step as f64 / 1000.0;
        let (start, step) = (self.v.start, self.v.step);
        for p in &c.pods {
            let PodOwner::Workload {
                namespace, workload, ..
            } = p.owner
            else {
                continue;
            };
            let w = &c.s.namespaces[namespace].workloads[workload];
            if w.kind != WorkloadKind::Job || !w.progress {
                continue;
            }
            let instance = format!("{}:9090", p.ip);
            let target = pod_target("training-metrics", &instance, &p.namespace, &p.name);
            self.out.app_up_series(c, p, &target);
            let alive = |t: i64| app_up(c, p, t) == Some(true);
            let mut l = target.to_vec();
            l.push(("job_name", w.name.as_str()));
            let k = key(&p.name);
            let i = |t: i64| (t - start) / step;
            let progressing = |t: i64| !c.stalled(p, t);
            // ~1 step/s with 5% of it waiting for data; an input-bound job's steps take longer.
            let steps = |t: i64| {
                if !progressing(t) {
                    return 0.0;
                }
                let share = c.data_wait_share(p, t);
                step_s * (1.0 - share) / (1.0 - STEADY_DATA_WAIT) * (0.97 + 0.06 * noise(k, i(t)))
            };
            let before = self.uptime_before(p);
            self.out
                .process_counter("training_steps_total", &l, before, &steps, &alive, &alive, true);
            let busy = |t: i64| if progressing(t) { step_s } else { 0.0 };
            self.out
                .process_counter("training_step_seconds_total", &l, before, &busy, &alive, &alive, false);
            let wait = |t: i64| busy(t) * c.data_wait_share(p, t) * (0.9 + 0.2 * noise(k ^ 1, i(t)));
            self.out.process_counter(
                "training_data_wait_seconds_total",
                &l,
                before * STEADY_DATA_WAIT,
                &wait,
                &alive,
                &alive,
                false,
            );
            // A checkpoint every 30 minutes (at the job's own offset) while it progresses.
            let every = 30 * M;
            let offset = (key(&w.name) % 30) as i64 * M;
            let due = |t: i64| (t - offset).rem_euclid(every) == 0 && progressing(t);
            self.out.process_counter(
                "training_checkpoint_saves_total",
                &l,
                (before * 1000.0 / every as f64).floor(),
                &|t| f64::from(u8::from(due(t))),
                &alive,
                &alive,
                true,
            );
            self.out.process_counter(
                "training_checkpoint_save_failures_total",
                &l,
                0.0,
                &|_| 0.0,
                &alive,
                &alive,
                true,
            );
            let mut last = if p.running_ms <= start {
                let b = start - (start - offset).rem_euclid(every);
                b.max(p.created_ms)
            } else {
                p.running_ms
            };
            let mut stamps = Vec::new();
            let mut t = start;
            while t < self.v.end {
                if t >= p.running_ms && due(t) {
                    last = t;
                }
                stamps.push(alive(t).then_some((last / 1000) as f64));
                t += step;
            }
            self.out
                .write_steps("training_checkpoint_last_success_timestamp_seconds", &l, &stamps);
        }
    }

    // ----- EKS control-plane logs through CloudWatch ----------------------------------------
    /// Metric filters on the cluster's authenticator and audit log groups (DefaultValue 0, so
    /// every period has a datapoint), per minute, stamped at the period end.
    pub(super) fn control_plane_logs(&mut self) {
        let c = self.v.c;
        let (start, end) = (self.v.start, self.v.end);
        let period = CLOUDWATCH_PERIOD_MS;
        let k = key(&c.s.cluster);
        let storm = |t: i64| {
            c.active(t).find_map(|e| match e.kind {
                EventKind::AuthFailureStorm { rate } => Some(rate),
                _ => None,
            })
        };
        let j = |t: i64| (t - start) / period;
        let failures = period_values(start, end, period, |t| {
            let n = noise(k, j(t));
            Some(match storm(t) {
                Some(rate) => (rate * (0.9 + 0.2 * n)).round(),
                None => (n * 3.0).floor(),
            })
        });
        let forbidden = period_values(start, end, period, |t| {
            let n = noise(k ^ 1, j(t));
            Some(match storm(t) {
                Some(rate) => (rate * 0.25 * (0.9 + 0.2 * n)).round(),
                None => (n * 6.0).floor(),
            })
        });
        // A rare change on a quiet day (about one a day), none near a scenario's change.
        let near_change = |t: i64| {
            c.s.events.iter().any(|e| {
                matches!(e.kind, EventKind::AccessPolicyChange) && (t - (start + e.at_ms)).abs() < 2 * 3_600_000
            })
        };
        let changes = period_values(start, end, period, |t| {
            let changed = c.active(t).any(|e| matches!(e.kind, EventKind::AccessPolicyChange));
            Some(if changed {
                3.0
            } else if noise(k ^ 2, j(t)) < 0.0007 && !near_change(t) {
                1.0
            } else {
                0.0
            })
        });
        for (name, v) in [
            ("aws_eks_authenticator_failures_sum", failures),
            ("aws_eks_apiserver_forbidden_sum", forbidden),
            ("aws_eks_access_policy_changes_sum", changes),
        ] {
            self.out.cloudwatch_series(name, &[], period, &v);
        }
    }

    // ----- OpenTelemetry Collector ----------------------------------------------------------
    /// The collector's internal telemetry (default Prometheus reader: no `_total` suffix),
    /// scraped as job `otel-collector`.
    pub(super) fn otel_collector(&mut self) {
        let c = self.v.c;
        let step_s = self.v.step as f64 / 1000.0;
        let (start, step) = (self.v.start, self.v.step);
        for p in c.pods.iter().filter(|p| p.owner == PodOwner::Collector) {
            let instance = format!("{}:8888", p.ip);
            let target = pod_target("otel-collector", &instance, "monitoring", &p.name);
            self.out.app_up_series(c, p, &target);
            let alive = |t: i64| app_up(c, p, t) == Some(true);
            let k = key(&p.name);
            let i = |t: i64| (t - start) / step;
            let mut exp = target.to_vec();
            exp.extend_from_slice(&[
                ("exporter", "prometheusremotewrite"),
                ("service_name", "otelcol-contrib"),
            ]);
            let mut rcv = target.to_vec();
            rcv.extend_from_slice(&[("receiver", "prometheus"), ("service_name", "otelcol-contrib")]);
            let mut svc = target.to_vec();
            svc.push(("service_name", "otelcol-contrib"));
            // ~20k points/s in; under backpressure the queue fills over 10 minutes, then the
            // exporter drops ~10% at enqueue and the memory limiter refuses ~5% at the receiver.
            let incoming = |t: i64| 20_000.0 * (0.95 + 0.1 * noise(k, i(t))) * step_s;
            let bp = |t: i64| c.backpressure_for(t);
            let full = |t: i64| bp(t).is_some_and(|d| d >= QUEUE_FILL_MS);
            let refused = |t: i64| if full(t) { 0.05 * incoming(t) } else { 0.0 };
            let accepted = |t: i64| incoming(t) - refused(t);
            let dropped = |t: i64| if full(t) { 0.10 * incoming(t) } else { 0.0 };
            let sent = |t: i64| match bp(t) {
                Some(_) if full(t) => accepted(t) - dropped(t),
                Some(_) => 0.9 * accepted(t),
                None => accepted(t),
            };
            let send_failed = |t: i64| if bp(t).is_some() { 0.001 * incoming(t) } else { 0.0 };
            let before = self.uptime_before(p) * 20_000.0;
            self.out.process_counter(
                "otelcol_receiver_accepted_metric_points",
                &rcv,
                before,
                &accepted,
                &alive,
                &alive,
                true,
            );
            self.out.process_counter(
                "otelcol_receiver_refused_metric_points",
                &rcv,
                0.0,
                &refused,
                &alive,
                &alive,
                true,
            );
            for (name, inc, initial) in [
                (
                    "otelcol_exporter_sent_metric_points",
                    &sent as &dyn Fn(i64) -> f64,
                    before,
                ),
                ("otelcol_exporter_send_failed_metric_points", &send_failed, 0.0),
                ("otelcol_exporter_enqueue_failed_metric_points", &dropped, 0.0),
            ] {
                self.out.process_counter(name, &exp, initial, inc, &alive, &alive, true);
            }
            let queue = self.v.steps_map(|t| {
                alive(t).then(|| {
                    let steady = (noise(k ^ 1, i(t)) * 21.0).floor();
                    match bp(t) {
                        Some(d) => (steady + QUEUE_CAPACITY * d as f64 / QUEUE_FILL_MS as f64).min(QUEUE_CAPACITY),
                        None => steady,
                    }
                })
            });
            self.out.write_steps("otelcol_exporter_queue_size", &exp, &queue);
            let cap = self.v.steps_map(|t| alive(t).then_some(QUEUE_CAPACITY));
            self.out.write_steps("otelcol_exporter_queue_capacity", &exp, &cap);
            let since = if p.running_ms <= start {
                p.created_ms
            } else {
                p.running_ms
            };
            let uptime = self
                .v
                .steps_map(|t| alive(t).then(|| ((t - since) as f64 / 1000.0 * 1e3).round() / 1e3));
            self.out.write_steps("otelcol_process_uptime", &svc, &uptime);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::cluster::Cluster;
    use super::super::super::spec::Scenario;
    use super::super::generate;
    use super::*;
    use crate::labels::Matcher;
    use crate::source::{Queryable, SeriesData};
    use crate::tsdb::notation::STALE_NAN_BITS;
    use crate::tsdb::Store;

    const H: i64 = 3_600_000;

    /// Six hours: a vLLM deployment queueing from 1h to 2h, a training job stalled from 1h to
    /// 3h, another input-bound from 4h to 5h, an authenticator storm at 2h, a policy change at
    /// 3h, collector backpressure from 1h to 2h.
    const TEXT: &str = "\
name: apps
cluster: c1
start: 2026-11-09T00:00:00Z
duration: 6h
gpu_telemetry: [dcgm-exporter]
control_plane_logs: true
otel_collector: true
node_groups:
  - {name: g5, instance_type: g5.12xlarge, count: 2}
  - {name: system, instance_type: m6i.2xlarge, count: 1}
namespaces:
  - name: llm
    team: ml-serving
    workload_class: serving
    deployments: [{name: chat, replicas: 2, gpus_per_replica: 1, node_group: g5, server: vllm, model_name: m1}]
  - name: training
    team: ml-training
    workload_class: training
    jobs:
      - {name: pretrain, workers: 1, gpus_per_worker: 2, node_group: g5, progress: true}
      - {name: finetune, workers: 1, gpus_per_worker: 4, node_group: g5, progress: true}
events:
  - {id: q, kind: server-queueing, namespace: llm, deployment: chat, at: 1h, for: 1h}
  - {id: stall, kind: training-stall, namespace: training, job: pretrain, at: 1h, for: 2h}
  - {id: dl, kind: dataloader-bound, namespace: training, job: finetune, share: 0.4, at: 4h, for: 1h}
  - {id: storm, kind: auth-failure-storm, rate: 300, at: 2h, for: 30m}
  - {id: policy, kind: access-policy-change, at: 3h}
  - {id: bp, kind: collector-backpressure, at: 1h, for: 1h}
";

    fn setup() -> (Scenario, Store) {
        let s = Scenario::parse(TEXT, "apps.yaml").unwrap();
        let st = generate(&Cluster::build(&s).unwrap());
        (s, st)
    }

    fn series(store: &Store, name: &str, more: &[(&str, &str)]) -> Vec<SeriesData> {
        let mut m = vec![Matcher::equal("__name__", name)];
        m.extend(more.iter().map(|(k, v)| Matcher::equal(k, v)));
        store.select(&m, i64::MIN, i64::MAX).unwrap()
    }

    fn at(s: &SeriesData, t: i64) -> f64 {
        s.samples.iter().find(|x| x.0 == t).map(|x| x.1).unwrap()
    }

    fn never_decreases(s: &SeriesData) {
        for w in s.samples.windows(2) {
            assert!(
                w[1].1 >= w[0].1,
                "{} at {}: {} then {}",
                s.labels,
                w[1].0,
                w[0].1,
                w[1].1
            );
        }
    }

    #[test]
    fn vllm_histograms_are_cumulative_and_move_when_requests_queue() {
        let (s, st) = setup();
        let ups = series(&st, "up", &[("job", "vllm")]);
        assert_eq!(ups.len(), 2);
        let pod = ups[0].labels.get("pod").unwrap().to_string();
        assert!(pod.starts_with("chat-"), "{pod}");
        assert!(ups[0].labels.get("instance").unwrap().ends_with(":8000"));
        assert!(ups.iter().all(|u| u.samples.iter().all(|x| x.1 == 1.0)));
        let name = "vllm:time_to_first_token_seconds";
        let mut buckets = series(&st, &format!("{name}_bucket"), &[("pod", &pod)]);
        assert_eq!(buckets.len(), TTFT_BUCKETS.len() + 1);
        let bound = |b: &SeriesData| {
            let le = b.labels.get("le").unwrap();
            if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse::<f64>().unwrap()
            }
        };
        buckets.sort_by(|a, b| bound(a).total_cmp(&bound(b)));
        assert_eq!(buckets[11].labels.get("le"), Some("1.0"));
        assert_eq!(buckets[0].labels.get("model_name"), Some("m1"));
        let count = &series(&st, &format!("{name}_count"), &[("pod", &pod)])[0];
        let n = count.samples.len();
        for i in 0..n {
            let t = count.samples[i].0;
            let row: Vec<f64> = buckets.iter().map(|b| at(b, t)).collect();
            assert!(row.windows(2).all(|w| w[0] <= w[1]), "not cumulative at {t}: {row:?}");
            assert_eq!(*row.last().unwrap(), count.samples[i].1);
        }
        buckets.iter().chain([count]).for_each(never_decreases);
        never_decreases(&series(&st, &format!("{name}_sum"), &[("pod", &pod)])[0]);
        // Steady: most first tokens within 0.1-0.5 s; queueing: within 10-40 s.
        let inc = |b: usize, from: i64, to: i64| at(&buckets[b], to) - at(&buckets[b], from);
        let (t0, t1) = (s.start_ms + 10 * 60_000, s.start_ms + 50 * 60_000);
        let total = inc(buckets.len() - 1, t0, t1);
        assert!((inc(9, t0, t1) - inc(7, t0, t1)) / total > 0.85, "0.1..0.5");
        let (q0, q1) = (s.start_ms + H + 10 * 60_000, s.start_ms + H + 50 * 60_000);
        let total_q = inc(buckets.len() - 1, q0, q1);
        assert!((inc(17, q0, q1) - inc(15, q0, q1)) / total_q > 0.85, "10..40");
        assert!(
            (total_q / total - 1.0).abs() < 0.1,
            "throughput flat: {total} {total_q}"
        );
        let waiting = &series(&st, "vllm:num_requests_waiting", &[("pod", &pod)])[0];
        assert!(at(waiting, q1) >= 50.0 && at(waiting, t1) <= 1.0);
        let kv = &series(&st, "vllm:kv_cache_usage_perc", &[("pod", &pod)])[0];
        assert!((0.3..=0.6).contains(&at(kv, t1)) && at(kv, q1) > 0.96);
        // The replicas stay ready throughout.
        let ready = series(&st, "kube_deployment_status_replicas_ready", &[("deployment", "chat")]);
        assert!(ready[0].samples.iter().all(|x| x.1 == 2.0));
        let ok = series(&st, "vllm:request_success_total", &[("finished_reason", "stop")]);
        assert_eq!(ok.len(), 2);
        ok.iter().for_each(never_decreases);
    }

    #[test]
    fn a_stalled_job_stays_running_with_its_gpus_and_makes_no_progress() {
        let (s, st) = setup();
        let steps = series(&st, "training_steps_total", &[("job_name", "pretrain")]);
        assert_eq!(steps.len(), 1);
        let l = &steps[0].labels;
        assert_eq!(l.get("job"), Some("training-metrics"));
        assert_eq!(l.get("namespace"), Some("training"));
        let pod = l.get("pod").unwrap();
        never_decreases(&steps[0]);
        let t = |h: f64| s.start_ms + (h * H as f64).round() as i64;
        // ~1 step/s before; flat during the stall; again after.
        let rate = (at(&steps[0], t(0.9)) - at(&steps[0], t(0.4))) / 1800.0;
        assert!((0.95..=1.05).contains(&rate), "{rate}");
        assert_eq!(at(&steps[0], t(1.1)), at(&steps[0], t(2.9)));
        assert!(at(&steps[0], t(3.5)) > at(&steps[0], t(3.0)));
        let last = &series(
            &st,
            "training_checkpoint_last_success_timestamp_seconds",
            &[("job_name", "pretrain")],
        )[0];
        assert_eq!(at(last, t(1.0)), at(last, t(2.95)));
        assert!(at(last, t(0.9)) * 1000.0 > (t(0.9) - 30 * 60_000) as f64);
        // Pods Running and ready, their GPUs allocated, the GPUs idle.
        let phase = series(&st, "kube_pod_status_phase", &[("pod", pod), ("phase", "Running")]);
        assert!(phase[0].samples.iter().all(|x| x.1 == 1.0));
        let ready = series(&st, "kube_pod_status_ready", &[("pod", pod), ("condition", "true")]);
        assert!(ready[0].samples.iter().all(|x| x.1 == 1.0));
        let power = series(&st, "DCGM_FI_DEV_POWER_USAGE", &[("exported_pod", pod)]);
        assert_eq!(power.len(), 2);
        for p in &power {
            assert!(at(p, t(0.5)) > 200.0 && at(p, t(2.0)) < 50.0, "{}", p.labels);
        }
        // The input-bound job: 40% of step time waiting, fewer steps.
        let wait = &series(&st, "training_data_wait_seconds_total", &[("job_name", "finetune")])[0];
        let busy = &series(&st, "training_step_seconds_total", &[("job_name", "finetune")])[0];
        let share = |a: f64, b: f64| (at(wait, t(b)) - at(wait, t(a))) / (at(busy, t(b)) - at(busy, t(a)));
        assert!((0.04..=0.06).contains(&share(3.0, 3.9)), "{}", share(3.0, 3.9));
        assert!((0.38..=0.42).contains(&share(4.1, 4.9)), "{}", share(4.1, 4.9));
        let fsteps = &series(&st, "training_steps_total", &[("job_name", "finetune")])[0];
        let r = (at(fsteps, t(4.9)) - at(fsteps, t(4.1))) / (0.8 * 3600.0);
        assert!((0.6..=0.66).contains(&r), "{r}");
    }

    #[test]
    fn control_plane_filters_have_a_datapoint_every_period() {
        let (s, st) = setup();
        for name in [
            "aws_eks_authenticator_failures_sum",
            "aws_eks_apiserver_forbidden_sum",
            "aws_eks_access_policy_changes_sum",
        ] {
            let v = series(&st, name, &[]);
            assert_eq!(v.len(), 1, "{name}");
            let names: Vec<&str> = v[0].labels.iter().map(|l| &*l.name).collect();
            assert_eq!(names, ["__name__", "cluster"], "{name}");
            let x = &v[0].samples;
            assert_eq!(x[0].0, s.start_ms + 60_000, "stamped at the period end");
            assert!(x.windows(2).all(|w| w[1].0 - w[0].0 == 60_000), "{name}: a gap");
            assert!(x.iter().all(|p| p.1.to_bits() != STALE_NAN_BITS && p.1 >= 0.0));
            assert!(x.iter().any(|p| p.1 == 0.0), "{name}: zero datapoints");
        }
        let f = &series(&st, "aws_eks_authenticator_failures_sum", &[])[0];
        let v = |t: i64| at(f, t);
        assert!(v(s.start_ms + 60_000 * 30) <= 2.0);
        assert!((270.0..=330.0).contains(&v(s.start_ms + 2 * H + 10 * 60_000)));
        let p = &series(&st, "aws_eks_access_policy_changes_sum", &[])[0];
        // The period [3h, 3h+1m) is stamped at its end.
        assert_eq!(at(p, s.start_ms + 3 * H + 60_000), 3.0);
        assert_eq!(p.samples.iter().filter(|x| x.1 == 3.0).count(), 1);
    }

    #[test]
    fn collector_backpressure_fills_the_queue_then_drops() {
        let (s, st) = setup();
        let up = series(&st, "up", &[("job", "otel-collector")]);
        assert_eq!(up.len(), 1);
        assert_eq!(up[0].labels.get("namespace"), Some("monitoring"));
        let pod = up[0].labels.get("pod").unwrap();
        assert!(pod.starts_with("otel-collector-"));
        let q = &series(
            &st,
            "otelcol_exporter_queue_size",
            &[("exporter", "prometheusremotewrite")],
        )[0];
        assert_eq!(q.labels.get("service_name"), Some("otelcol-contrib"));
        let t = |m: i64| s.start_ms + m * 60_000;
        assert!(at(q, t(30)) <= 20.0 && at(q, t(65)) > 400.0 && at(q, t(75)) == 1000.0);
        let cap = &series(&st, "otelcol_exporter_queue_capacity", &[])[0];
        assert_eq!(at(cap, t(75)), 1000.0);
        for name in [
            "otelcol_exporter_sent_metric_points",
            "otelcol_exporter_send_failed_metric_points",
            "otelcol_exporter_enqueue_failed_metric_points",
            "otelcol_receiver_accepted_metric_points",
            "otelcol_receiver_refused_metric_points",
        ] {
            let v = series(&st, name, &[]);
            assert_eq!(v.len(), 1, "{name}");
            never_decreases(&v[0]);
        }
        let inc = |name: &str, a: i64, b: i64| {
            let v = &series(&st, name, &[])[0];
            at(v, t(b)) - at(v, t(a))
        };
        let acc = inc("otelcol_receiver_accepted_metric_points", 75, 115);
        let dropped = inc("otelcol_exporter_enqueue_failed_metric_points", 75, 115);
        let refused = inc("otelcol_receiver_refused_metric_points", 75, 115);
        assert!((0.09..=0.12).contains(&(dropped / acc)), "{}", dropped / acc);
        assert!((0.04..=0.06).contains(&(refused / (acc + refused))));
        assert_eq!(inc("otelcol_exporter_enqueue_failed_metric_points", 0, 60), 0.0);
        let steady = inc("otelcol_receiver_accepted_metric_points", 0, 50) / 3000.0;
        assert!((19_000.0..=21_000.0).contains(&steady), "{steady}");
        let ksm = series(
            &st,
            "kube_deployment_status_replicas_ready",
            &[("deployment", "otel-collector")],
        );
        assert_eq!(ksm[0].samples[0].1, 1.0);
    }

    #[test]
    fn new_events_refer_to_what_they_need() {
        let err = |from: &str, to: &str| {
            Scenario::parse(&TEXT.replace(from, to), "s.yaml")
                .unwrap_err()
                .to_string()
        };
        let e = err(", server: vllm, model_name: m1", "");
        assert!(
            e.contains("server-queueing needs a deployment with `server: vllm`"),
            "{e}"
        );
        let e = err("control_plane_logs: true\n", "");
        assert!(e.contains("auth-failure-storm needs `control_plane_logs: true`"), "{e}");
        let e = err("otel_collector: true\n", "");
        assert!(e.contains("collector-backpressure needs `otel_collector: true`"), "{e}");
        let e = err(
            "node_group: g5, progress: true}\n      - {name: finetune",
            "node_group: g5}\n      - {name: finetune",
        );
        assert!(e.contains("training-stall needs a job with `progress: true`"), "{e}");
        let e = err("model_name: m1", "model: m1");
        assert!(e.contains("unknown key \"model\""), "{e}");
        let e = err("share: 0.4", "share: 1.5");
        assert!(e.contains("share (of step time) must be in (0, 1)"), "{e}");
        // An access policy change is one period unless `for` says otherwise.
        let s = Scenario::parse(TEXT, "s.yaml").unwrap();
        let ev = &s.events[s.event("policy").unwrap()];
        assert_eq!((ev.kind.name(), ev.for_ms), ("access-policy-change", 60_000));
    }
}
