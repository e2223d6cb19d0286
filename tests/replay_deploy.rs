//! The shipped deploy/ configuration: the Kubernetes manifests are well-formed and consistent
//! (API versions and kinds, selectors matching pod templates, the IRSA annotation, the
//! PodDisruptionBudget and NetworkPolicy), the IAM policy is least-privilege, routes and owners
//! load and agree, and every `page` alert of the policy resolves to an owner with a paging
//! receiver.
//!
//! Validation against the Kubernetes OpenAPI schemas needs a schema bundle (kubeconform's) that
//! is not available offline, so this test checks structure only; see examples/README-replay.md.

use std::path::Path;

use watchfire::labels::Labels;
use watchfire::notify::Owners;
use watchfire::replay::FileConfig;
use yaml_rust2::{Yaml, YamlLoader};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn docs() -> Vec<(String, Yaml)> {
    let dir = root().join("deploy/kubernetes");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name == "kustomization.yaml" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for d in YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}")) {
            out.push((name.clone(), d));
        }
    }
    out
}

fn s<'a>(y: &'a Yaml, path: &[&str]) -> &'a Yaml {
    let mut cur = y;
    for p in path {
        cur = &cur[*p];
    }
    cur
}

#[test]
fn kubernetes_manifests_are_consistent() {
    let docs = docs();
    let known = [
        ("v1", "Namespace"),
        ("v1", "ServiceAccount"),
        ("v1", "Service"),
        ("apps/v1", "StatefulSet"),
        ("policy/v1", "PodDisruptionBudget"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ];
    let mut kinds = Vec::new();
    for (file, d) in &docs {
        let api = d["apiVersion"].as_str().unwrap_or_else(|| panic!("{file}: apiVersion"));
        let kind = d["kind"].as_str().unwrap_or_else(|| panic!("{file}: kind"));
        assert!(known.contains(&(api, kind)), "{file}: unexpected {api} {kind}");
        let name = s(d, &["metadata", "name"])
            .as_str()
            .unwrap_or_else(|| panic!("{file}: metadata.name"));
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{file}: bad name {name}"
        );
        let namespaced = !matches!(kind, "Namespace" | "ClusterRole" | "ClusterRoleBinding");
        if namespaced {
            assert_eq!(
                s(d, &["metadata", "namespace"]).as_str(),
                Some("monitoring"),
                "{file} {kind}"
            );
        }
        kinds.push(kind.to_string());
    }
    for k in [
        "StatefulSet",
        "ServiceAccount",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ClusterRole",
        "RoleBinding",
    ] {
        assert!(kinds.iter().any(|x| x == k), "no {k}");
    }

    let find = |kind: &str| {
        docs.iter()
            .find(|(_, d)| d["kind"].as_str() == Some(kind))
            .map(|(_, d)| d)
            .unwrap()
    };
    let sts = find("StatefulSet");
    assert_eq!(s(sts, &["spec", "replicas"]).as_i64(), Some(2));
    let selector = s(sts, &["spec", "selector", "matchLabels"]).as_hash().unwrap();
    let tmpl_labels = s(sts, &["spec", "template", "metadata", "labels"]).as_hash().unwrap();
    for (k, v) in selector {
        assert_eq!(tmpl_labels.get(k), Some(v), "selector must match the template labels");
    }
    let svc_name = s(sts, &["spec", "serviceName"]).as_str().unwrap();
    assert!(docs
        .iter()
        .any(|(_, d)| d["kind"].as_str() == Some("Service") && s(d, &["metadata", "name"]).as_str() == Some(svc_name)));
    let pod = s(sts, &["spec", "template", "spec"]);
    let sa = pod["serviceAccountName"].as_str().unwrap();
    let args = format!("{:?}", pod["containers"][0]["args"]);
    assert!(args.contains("--shard"), "replicas shard the rule groups: {args}");
    assert!(args.contains("/etc/watchfire/deploy/watchfire.yaml"));
    let c = &pod["containers"][0];
    assert_eq!(
        s(c, &["securityContext", "readOnlyRootFilesystem"]).as_bool(),
        Some(true)
    );
    assert_eq!(
        s(c, &["securityContext", "allowPrivilegeEscalation"]).as_bool(),
        Some(false)
    );
    // Every volume mount has a volume.
    let volumes: Vec<&str> = pod["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    let claims: Vec<&str> = s(sts, &["spec", "volumeClaimTemplates"])
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|v| s(v, &["metadata", "name"]).as_str())
        .collect();
    for m in c["volumeMounts"].as_vec().unwrap() {
        let n = m["name"].as_str().unwrap();
        assert!(volumes.contains(&n) || claims.contains(&n), "mount {n} has no volume");
    }

    let sa_doc = docs
        .iter()
        .find(|(_, d)| d["kind"].as_str() == Some("ServiceAccount") && s(d, &["metadata", "name"]).as_str() == Some(sa))
        .map(|(_, d)| d)
        .expect("the StatefulSet's service account is defined");
    let role = s(sa_doc, &["metadata", "annotations", "eks.amazonaws.com/role-arn"])
        .as_str()
        .unwrap();
    assert!(
        role.starts_with("arn:aws:iam::") && role.contains(":role/"),
        "IRSA annotation: {role}"
    );

    let pdb = find("PodDisruptionBudget");
    assert_eq!(
        s(pdb, &["spec", "selector", "matchLabels"]).as_hash().unwrap(),
        selector
    );
    let np = find("NetworkPolicy");
    assert_eq!(
        s(np, &["spec", "podSelector", "matchLabels"]).as_hash().unwrap(),
        selector
    );
    let types = format!("{:?}", s(np, &["spec", "policyTypes"]));
    assert!(types.contains("Ingress") && types.contains("Egress"));

    // kustomization lists every manifest.
    let kust = std::fs::read_to_string(root().join("deploy/kubernetes/kustomization.yaml")).unwrap();
    for (file, _) in &docs {
        assert!(kust.contains(file.as_str()), "kustomization.yaml misses {file}");
    }
}

#[test]
fn iam_policy_is_least_privilege() {
    let text = std::fs::read_to_string(root().join("deploy/iam/watchfire-policy.json")).unwrap();
    let p: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut actions = Vec::new();
    for st in p["Statement"].as_array().unwrap() {
        assert_eq!(st["Effect"], "Allow");
        let acts: Vec<String> = match &st["Action"] {
            serde_json::Value::String(a) => vec![a.clone()],
            serde_json::Value::Array(v) => v.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
            other => panic!("{other}"),
        };
        for a in &acts {
            assert!(!a.contains('*'), "wildcard action {a}");
            if a == "sns:Publish" {
                let res = format!("{}", st["Resource"]);
                assert!(!res.contains('*'), "sns:Publish only on named topics: {res}");
                assert!(res.contains("arn:aws:sns:"), "{res}");
            }
            if a == "aps:QueryMetrics" {
                assert!(st["Resource"].as_str().unwrap().contains(":workspace/"));
            }
        }
        actions.extend(acts);
    }
    actions.sort();
    assert_eq!(
        actions,
        [
            "aps:QueryMetrics",
            "cloudwatch:GetMetricData",
            "cloudwatch:ListMetrics",
            "sns:Publish"
        ]
    );
    let trust = std::fs::read_to_string(root().join("deploy/iam/watchfire-trust-policy.json")).unwrap();
    let t: serde_json::Value = serde_json::from_str(&trust).unwrap();
    assert!(trust.contains("system:serviceaccount:monitoring:watchfire"));
    assert_eq!(t["Statement"][0]["Action"], "sts:AssumeRoleWithWebIdentity");
}

#[test]
fn routes_owners_and_policy_agree() {
    let cfg = FileConfig::load(&root().join("deploy/watchfire.yaml")).unwrap();
    let setup = cfg.build(None).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    let owners = Owners::load_file(&root().join("deploy/owners.yaml")).unwrap();
    // Every team has a paging receiver that routes.yaml defines (build() checks existence).
    for t in &owners.teams {
        let page = t
            .receivers
            .page
            .as_deref()
            .unwrap_or_else(|| panic!("team {} has no page receiver", t.name));
        assert!(setup.routes.receiver(page).is_some(), "{page}");
    }
    // Every page alert resolves to an owner whose page receiver the routing tree picks.
    let route = watchfire::notify::Route::new(&setup.routes.route);
    let mut checked = 0;
    for g in &setup.groups {
        for r in g.rules() {
            let Some(a) = r.as_alerting() else { continue };
            let labels: Vec<(String, String)> = a.labels().to_vec();
            if !labels.iter().any(|(k, v)| k == "severity" && v == "page") {
                continue;
            }
            for ns in ["", "training", "serving", "evaluation"] {
                let mut pairs = labels.clone();
                pairs.push(("alertname".into(), a.name().into()));
                pairs.push(("cluster".into(), "eks-ml-prod".into()));
                if !ns.is_empty() && !pairs.iter().any(|(k, _)| k == "namespace") {
                    pairs.push(("namespace".into(), ns.into()));
                }
                let l = owners.stamp(&Labels::from_pairs(pairs.iter().map(|(a, b)| (a.as_str(), b.as_str()))));
                let (team, _) = owners
                    .resolve(&l)
                    .unwrap_or_else(|| panic!("{} has no owner", a.name()));
                let receivers: Vec<String> = route.match_labels(&l).iter().map(|r| r.opts.receiver.clone()).collect();
                assert_eq!(
                    receivers,
                    vec![team.receivers.page.clone().unwrap()],
                    "{} (namespace {ns:?}) routes to {receivers:?}",
                    a.name()
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "{checked}");
}
