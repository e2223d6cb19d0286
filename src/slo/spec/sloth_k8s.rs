//! Sloth's Kubernetes CRD (`sloth.slok.dev/v1`, `PrometheusServiceLevel`): the object
//! envelope; its `spec` is Sloth's spec body in camelCase.

use crate::slo::yaml::Node;

use super::sloth::Keys;
use super::{Cx, SloSpec, SpecFormat};

const K8S_KEYS: Keys = Keys {
    error_query: "errorQuery",
    total_query: "totalQuery",
    error_ratio_query: "errorRatioQuery",
    page_alert: "pageAlert",
    ticket_alert: "ticketAlert",
};

impl Cx {
    pub(super) fn sloth_k8s(&mut self, root: &Node) -> Option<SloSpec> {
        let mut o = self.obj(root, "the PrometheusServiceLevel")?;
        o.take("apiVersion");
        o.take("kind");
        let mut name = String::new();
        let mut namespace = None;
        if let Some(m) = o.take("metadata") {
            // Kubernetes object metadata: only name and namespace matter; other fields are
            // accepted as Kubernetes writes them.
            if let Some(mo) = self.obj(m, "metadata") {
                name = m.get_str("name").unwrap_or_default().to_string();
                namespace = m.get_str("namespace").map(str::to_string);
                drop(mo);
            }
        }
        o.take("status");
        let spec = o.take("spec");
        o.finish(
            &mut self.sink,
            "the PrometheusServiceLevel",
            &["apiVersion", "kind", "metadata", "spec", "status"],
        );
        let Some(spec) = spec else {
            self.sink.error(root.pos(), "slo-required", "spec is required");
            return None;
        };
        let mut s = self.sloth_spec(spec, SpecFormat::SlothK8sV1 { name, namespace }, &K8S_KEYS)?;
        s.pos = root.pos();
        Some(s)
    }
}
