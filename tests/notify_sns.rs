//! The SNS receiver against a moto server: notifications go through `Deliverer::deliver` (the
//! path the outbox takes) to a standard or FIFO topic, and an SQS queue subscribed to the topic
//! shows what SNS delivered: subject, message, message attributes, FIFO deduplication. The body
//! for one alert is compared with what Alertmanager 0.25 published through moto
//! (../shared/conformance/aws/alertmanager-0.25_sns_via_moto_sqs_message.json).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::Moto;
use watchfire::notify::receivers::sns::{publish_request, sanitize_subject, MAX_MESSAGE_BYTES};
use watchfire::notify::receivers::{Deliverer, DeliveryContext, DeliveryError, RetryPolicy};
use watchfire::notify::{load_str, Config, Notification, Notifier, PostableAlert};

/// A message as it arrived in SQS: the SNS envelope (not raw delivery).
#[derive(Debug)]
struct Arrived {
    envelope: serde_json::Value,
    subject: Option<String>,
    message: String,
    attributes: BTreeMap<String, String>,
}

/// moto's SQS over its query API (form-encoded `Action=...`); moto routes by the credential
/// scope of the Authorization header and does not check the signature.
struct Sqs {
    endpoint: String,
    http: reqwest::Client,
}

fn xml_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let end = after.find(';').expect("entity end");
        let ent = &after[1..end];
        match ent {
            "quot" => out.push('"'),
            "amp" => out.push('&'),
            "lt" => out.push('<'),
            "gt" => out.push('>'),
            "apos" => out.push('\''),
            e if e.starts_with("#x") => out.push(char::from_u32(u32::from_str_radix(&e[2..], 16).unwrap()).unwrap()),
            e if e.starts_with('#') => out.push(char::from_u32(e[1..].parse().unwrap()).unwrap()),
            e => panic!("unknown entity {e}"),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The text of every `<tag>...</tag>` in `xml`, unescaped.
fn tags(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let j = after.find(&close).expect("closing tag");
        out.push(xml_unescape(&after[..j]));
        rest = &after[j + close.len()..];
    }
    out
}

impl Sqs {
    async fn call(&self, params: &[(&str, &str)]) -> String {
        let mut form: Vec<(&str, &str)> = vec![("Version", "2012-11-05")];
        form.extend_from_slice(params);
        let resp = self
            .http
            .post(&self.endpoint)
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=00",
            )
            .form(&form)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(status.is_success(), "SQS {params:?}: {status} {text}");
        text
    }

    /// Creates a queue; returns (url, arn).
    async fn create_queue(&self, name: &str) -> (String, String) {
        let fifo = name.ends_with(".fifo");
        let mut p = vec![("Action", "CreateQueue"), ("QueueName", name)];
        if fifo {
            p.extend([("Attribute.1.Name", "FifoQueue"), ("Attribute.1.Value", "true")]);
        }
        let url = tags(&self.call(&p).await, "QueueUrl").remove(0);
        let attrs = self
            .call(&[
                ("Action", "GetQueueAttributes"),
                ("QueueUrl", &url),
                ("AttributeName.1", "QueueArn"),
            ])
            .await;
        let arn = tags(&attrs, "Value").remove(0);
        (url, arn)
    }

    /// Receives and deletes everything in the queue, in order.
    async fn drain(&self, url: &str) -> Vec<Arrived> {
        let mut out = Vec::new();
        loop {
            let xml = self
                .call(&[
                    ("Action", "ReceiveMessage"),
                    ("QueueUrl", url),
                    ("MaxNumberOfMessages", "10"),
                    ("WaitTimeSeconds", "0"),
                ])
                .await;
            let bodies = tags(&xml, "Body");
            let handles = tags(&xml, "ReceiptHandle");
            if bodies.is_empty() {
                return out;
            }
            for (b, h) in bodies.iter().zip(&handles) {
                let env: serde_json::Value = serde_json::from_str(b).unwrap();
                let attributes = env["MessageAttributes"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| {
                                assert_eq!(v["Type"], "String", "{k}");
                                (k.clone(), v["Value"].as_str().unwrap().to_string())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Arrived {
                    subject: env["Subject"].as_str().map(str::to_string),
                    message: env["Message"].as_str().unwrap().to_string(),
                    attributes,
                    envelope: env,
                });
                self.call(&[("Action", "DeleteMessage"), ("QueueUrl", url), ("ReceiptHandle", h)])
                    .await;
            }
        }
    }
}

struct Env {
    moto: Moto,
    rt: tokio::runtime::Runtime,
    sqs: Sqs,
    sns: aws_sdk_sns::Client,
}

/// `None` only when moto_server is missing and the skip is allowed (see `common::require`).
fn env() -> Option<Env> {
    let moto = Moto::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sdk = rt.block_on(watchfire::aws::sdk_config(&watchfire::aws::AwsTarget {
        region: "us-east-1".into(),
        endpoint: moto.endpoint.clone(),
    }));
    Some(Env {
        sqs: Sqs {
            endpoint: moto.endpoint.clone(),
            http: reqwest::Client::new(),
        },
        sns: aws_sdk_sns::Client::new(&sdk),
        moto,
        rt,
    })
}

impl Env {
    /// A topic with an SQS queue subscribed; returns (topic ARN, queue URL).
    fn topic_with_queue(&self, name: &str) -> (String, String) {
        self.rt.block_on(async {
            let mut ct = self.sns.create_topic().name(name);
            if name.ends_with(".fifo") {
                ct = ct.attributes("FifoTopic", "true");
            }
            let topic = ct.send().await.unwrap().topic_arn().unwrap().to_string();
            let (qurl, qarn) = self.sqs.create_queue(&name.replace("alerts", "alerts-q")).await;
            self.sns
                .subscribe()
                .topic_arn(&topic)
                .protocol("sqs")
                .endpoint(qarn)
                .send()
                .await
                .unwrap();
            (topic, qurl)
        })
    }

    fn config(&self, topic_arn: &str, group_by: &str, extra: &str) -> Config {
        load_str(
            &format!(
                "route:\n  receiver: ml-platform-sns\n  group_by: [{group_by}]\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n\
                 receivers:\n  - name: ml-platform-sns\n    sns_configs:\n      - api_url: {}\n        sigv4: {{region: us-east-1, access_key: testing, secret_key: testing}}\n        topic_arn: {topic_arn}\n{extra}",
                self.moto.endpoint
            ),
            "routes.yaml",
        )
        .unwrap()
    }

    fn deliver(&self, cfg: &Config, n: &Notification) -> Result<(), DeliveryError> {
        let d = Deliverer::new(DeliveryContext {
            retry: RetryPolicy {
                max_attempts: 3,
                initial_backoff: Duration::from_millis(10),
                ..Default::default()
            },
            ..Default::default()
        });
        self.rt.block_on(d.deliver(cfg, n))
    }
}

fn t0() -> DateTime<Utc> {
    "2026-11-02T18:00:00Z".parse().unwrap()
}

fn alert(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> PostableAlert {
    PostableAlert {
        labels: labels.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        annotations: annotations
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
        starts_at: Some(t0()),
        ..Default::default()
    }
}

fn gpu(node: &str) -> PostableAlert {
    alert(
        &[
            ("alertname", "GPUXidApplication"),
            ("cluster", "eks-ml-prod"),
            ("namespace", "training"),
            ("owner", "ml-training"),
            ("node", node),
            ("severity", "notify"),
        ],
        &[("summary", "XID 13 from a training job")],
    )
}

#[test]
fn publishes_what_alertmanager_publishes_plus_attributes() {
    let Some(aws) = common::conformance_dir("aws") else {
        return;
    };
    let Some(e) = env() else { return };
    let (topic, queue) = e.topic_with_queue("am-alerts");
    // Alertmanager 0.25's payload for this alert, published through moto.
    let peer: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(aws.join("alertmanager-0.25_sns_via_moto_sqs_message.json")).unwrap(),
    )
    .unwrap();
    let peer: serde_json::Value = serde_json::from_str(peer["Messages"][0]["Body"].as_str().unwrap()).unwrap();

    let cfg = e.config(
        &topic,
        "alertname",
        "        subject: '{{ template \"sns.default.subject\" . }}'\n        attributes: {team_channel: '#gpu-{{ .CommonLabels.severity }}'}\n",
    );
    let mut n = Notifier::new(cfg.clone(), t0());
    let timeout = cfg.global.resolve_timeout;
    let a = alert(
        &[
            ("alertname", "DCGMXidError"),
            ("node", "gpu-1"),
            ("severity", "critical"),
            ("xid", "79"),
        ],
        &[("summary", "XID 79 on gpu-1")],
    );
    n.put_alerts([a.into_alert(t0(), timeout).unwrap()], t0());
    let notes = n.advance(t0() + chrono::Duration::seconds(1), &mut |_| true);
    assert_eq!(notes.len(), 1);
    e.deliver(&cfg, &notes[0]).unwrap();

    let got = e.rt.block_on(e.sqs.drain(&queue));
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(
        m.message,
        peer["Message"].as_str().unwrap(),
        "the message Alertmanager 0.25 sends"
    );
    assert_eq!(m.subject.as_deref(), peer["Subject"].as_str());
    assert_eq!(m.envelope["TopicArn"], topic.as_str());
    assert_eq!(m.envelope["Type"], "Notification");
    // The same envelope as Alertmanager's, plus the message attributes.
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.retain(|k| k != "MessageAttributes");
        k.sort();
        k
    };
    assert_eq!(keys(&m.envelope), keys(&peer));
    let want: BTreeMap<String, String> = [
        ("alertname", "DCGMXidError"),
        ("severity", "critical"),
        ("team_channel", "#gpu-critical"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(m.attributes, want);

    // Alerts that carry cluster, namespace and owner: all five attributes, and a resolved
    // notification after the firing one.
    let cfg = e.config(&topic, "alertname, cluster", "");
    let mut n = Notifier::new(cfg.clone(), t0());
    n.put_alerts(
        [gpu("ip-10-0-1-5"), gpu("ip-10-0-1-6")].map(|a| a.into_alert(t0(), timeout).unwrap()),
        t0(),
    );
    let firing = n.advance(t0() + chrono::Duration::seconds(1), &mut |_| true);
    e.deliver(&cfg, &firing[0]).unwrap();
    let t2 = t0() + chrono::Duration::seconds(2);
    let resolved = [gpu("ip-10-0-1-5"), gpu("ip-10-0-1-6")].map(|mut a| {
        a.ends_at = Some(t2);
        a.into_alert(t2, timeout).unwrap()
    });
    n.put_alerts(resolved, t2);
    let resolved = n.advance(t0() + chrono::Duration::seconds(3), &mut |_| true);
    e.deliver(&cfg, &resolved[0]).unwrap();
    let got = e.rt.block_on(e.sqs.drain(&queue));
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].subject.as_deref(),
        Some("[FIRING:2] GPUXidApplication eks-ml-prod (training ml-training notify)")
    );
    assert_eq!(
        got[1].subject.as_deref(),
        Some("[RESOLVED] GPUXidApplication eks-ml-prod (training ml-training notify)")
    );
    assert!(got[0]
        .message
        .starts_with("XID 13 from a training job\n\nAlerts Firing:\n"));
    assert!(got[1]
        .message
        .starts_with("XID 13 from a training job\n\n\nAlerts Resolved:\n"));
    for g in &got {
        assert_eq!(g.attributes["cluster"], "eks-ml-prod");
        assert_eq!(g.attributes["namespace"], "training");
        assert_eq!(g.attributes["owner"], "ml-training");
        assert_eq!(g.attributes["severity"], "notify");
        assert_eq!(g.attributes["alertname"], "GPUXidApplication");
    }
}

#[test]
fn non_ascii_subject_and_oversized_message() {
    let Some(e) = env() else { return };
    let (topic, queue) = e.topic_with_queue("big-alerts");
    let cfg = e.config(&topic, "alertname", "");
    let timeout = cfg.global.resolve_timeout;
    let mut n = Notifier::new(cfg.clone(), t0());
    // 300 KB of annotation (three bytes a character), and a subject SNS would refuse.
    let big = "Überhitzung… ".repeat(20_000);
    let a = alert(
        &[("alertname", "GPUÜberhitzung🔥"), ("severity", "page")],
        &[("description", big.as_str())],
    );
    n.put_alerts([a.into_alert(t0(), timeout).unwrap()], t0());
    let notes = n.advance(t0() + chrono::Duration::seconds(1), &mut |_| true);
    let ic = &cfg.receivers[0].integrations[0];
    let full = publish_request(ic, &notes[0], "http://localhost:9093").unwrap();
    e.deliver(&cfg, &notes[0]).unwrap();
    let got = e.rt.block_on(e.sqs.drain(&queue));
    assert_eq!(got.len(), 1);
    let m = &got[0];
    let subject = m.subject.as_deref().unwrap();
    assert_eq!(subject, "[FIRING:1] GPU?berhitzung? (page)");
    assert_eq!(subject, sanitize_subject("[FIRING:1] GPUÜberhitzung🔥 (page)"));
    assert!(m.message.len() > 200_000, "{}", m.message.len());
    assert!(m.message.len() <= MAX_MESSAGE_BYTES - 64, "{}", m.message.len());
    assert_eq!(m.message, full.message);
    assert!(big.len() > 300_000);
    assert!(m.message.starts_with(&big[..10_000]));
    assert_eq!(m.attributes["truncated"], "true");
}

#[test]
fn fifo_topic_delivers_updates_and_drops_exact_retries() {
    let Some(e) = env() else { return };
    let (topic, queue) = e.topic_with_queue("gpu-alerts.fifo");
    let cfg = e.config(&topic, "alertname, cluster", "");
    let timeout = cfg.global.resolve_timeout;
    let mut n = Notifier::new(cfg.clone(), t0());
    n.put_alerts([gpu("ip-10-0-1-5").into_alert(t0(), timeout).unwrap()], t0());
    let first = n.advance(t0() + chrono::Duration::seconds(1), &mut |_| true);
    // A second node joins the group within the 5-minute deduplication window.
    let t2 = t0() + chrono::Duration::seconds(2);
    n.put_alerts([gpu("ip-10-0-1-6").into_alert(t2, timeout).unwrap()], t2);
    let update = n.advance(t0() + chrono::Duration::seconds(3), &mut |_| true);
    assert_eq!((first.len(), update.len()), (1, 1));
    assert_eq!(first[0].group_key, update[0].group_key);
    e.deliver(&cfg, &first[0]).unwrap();
    e.deliver(&cfg, &update[0]).unwrap();
    // The first notification again (a retry after a lost response): deduplicated by SNS.
    e.deliver(&cfg, &first[0]).unwrap();

    let got = e.rt.block_on(e.sqs.drain(&queue));
    let subjects: Vec<&str> = got.iter().filter_map(|m| m.subject.as_deref()).collect();
    assert_eq!(
        subjects,
        [
            "[FIRING:1] GPUXidApplication eks-ml-prod (training ip-10-0-1-5 ml-training notify)",
            "[FIRING:2] GPUXidApplication eks-ml-prod (training ml-training notify)",
        ]
    );
    let ic = &cfg.receivers[0].integrations[0];
    let r1 = publish_request(ic, &first[0], "").unwrap();
    let r2 = publish_request(ic, &update[0], "").unwrap();
    assert_eq!(r1.message_group_id, r2.message_group_id);
    assert_ne!(r1.message_deduplication_id, r2.message_deduplication_id);
}

#[test]
fn unknown_topic_is_a_final_error() {
    let Some(e) = env() else { return };
    let cfg = e.config("arn:aws:sns:us-east-1:123456789012:no-such-topic", "alertname", "");
    let timeout = cfg.global.resolve_timeout;
    let mut n = Notifier::new(cfg.clone(), t0());
    n.put_alerts([gpu("ip-10-0-1-5").into_alert(t0(), timeout).unwrap()], t0());
    let notes = n.advance(t0() + chrono::Duration::seconds(1), &mut |_| true);
    let err = e.deliver(&cfg, &notes[0]).unwrap_err();
    match &err {
        DeliveryError::Status { status, retryable, .. } => {
            assert_eq!(*status / 100, 4, "{err}");
            assert!(!retryable, "{err}");
        }
        other => panic!("expected a final status error, got {other:?}"),
    }
}

#[test]
fn unreachable_endpoint_is_retried_then_given_up() {
    let Some(e) = env() else { return };
    // A port nothing listens on: transport errors, retried per the policy.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = load_str(
        &format!(
            "route: {{receiver: r, group_by: [alertname], group_wait: 1s}}\nreceivers:\n  - name: r\n    sns_configs:\n      - api_url: http://127.0.0.1:{port}\n        sigv4: {{region: us-east-1}}\n        topic_arn: arn:aws:sns:us-east-1:123456789012:t\n"
        ),
        "routes.yaml",
    )
    .unwrap();
    let timeout = cfg.global.resolve_timeout;
    let mut n = Notifier::new(cfg.clone(), t0());
    n.put_alerts([gpu("ip-10-0-1-5").into_alert(t0(), timeout).unwrap()], t0());
    let notes = n.advance(t0() + chrono::Duration::seconds(1), &mut |_| true);
    match e.deliver(&cfg, &notes[0]).unwrap_err() {
        DeliveryError::GaveUp { attempts, last } => {
            assert_eq!(attempts, 3);
            assert!(matches!(*last, DeliveryError::Transport(_)), "{last:?}");
        }
        other => panic!("expected GaveUp, got {other:?}"),
    }
}
