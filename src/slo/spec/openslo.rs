//! What both OpenSLO versions share: the object envelope and metadata, the objectives list,
//! targets as ratios, budgeting method, the `watchfire:` block with its `alerting`, and Sloth's
//! good/total mapping.

use std::collections::BTreeMap;

use crate::duration::Duration;
use crate::slo::yaml::{Node, Pos};

use super::keys::Obj;
use super::sloth::PROM_KEYS;
use super::{AlertMeta, Cx, Extensions, Objective, Query, Sli, Slo, SloSpec, SpecFormat};

/// The `spec` fields both OpenSLO versions read alike, for [`Cx::openslo_finish`];
/// `period` is filled in by each version from its own time window keys.
pub(super) struct OpensloCommon<'n> {
    pub(super) format: SpecFormat,
    pub(super) name: String,
    pub(super) service: Option<(String, Pos)>,
    pub(super) description: String,
    pub(super) period: Option<Duration>,
    pub(super) objectives: Option<&'n Node>,
    pub(super) ext: Option<&'n Node>,
    /// Where `spec` starts: "at least one objective is required" points here.
    pub(super) spos: Pos,
}

impl Cx {
    /// What both OpenSLO versions read alike before their own keys: the top level,
    /// `metadata` and the shared `spec` keys (service, description, budgetingMethod,
    /// objectives, watchfire). Returns those, the `spec` mapping still open for the
    /// version's own keys (its `finish` lists the shared ones too), and
    /// `budgetingMethod`, which each version checks after its own errors.
    pub(super) fn openslo_envelope<'n>(
        &mut self,
        root: &'n Node,
        format: SpecFormat,
        meta_allowed: &[&str],
    ) -> Option<(OpensloCommon<'n>, Obj<'n>, Option<String>)> {
        let mut o = self.obj(root, "the OpenSLO SLO")?;
        o.take("apiVersion");
        o.take("kind");
        let meta = o.take("metadata");
        let spec = o.take("spec");
        o.finish(
            &mut self.sink,
            "the OpenSLO SLO",
            &["apiVersion", "kind", "metadata", "spec"],
        );
        let name = self.openslo_metadata(meta, root.pos(), meta_allowed)?;
        let Some(spec) = spec else {
            self.sink.error(root.pos(), "slo-required", "spec is required");
            return None;
        };
        let mut so = self.obj(spec, "spec")?;
        let spos = so.pos;
        let service = self.required_string(so.take("service"), spos, "spec.service");
        let description = self.string(so.take("description"), "description").unwrap_or_default();
        let budgeting = self.string(so.take("budgetingMethod"), "budgetingMethod");
        let common = OpensloCommon {
            format,
            name,
            service,
            description,
            period: None,
            objectives: so.take("objectives"),
            ext: so.take("watchfire"),
            spos,
        };
        Some((common, so, budgeting))
    }

    /// The SLO period from a time window list: the first window counts; more than
    /// one (or, with `exactly_one`, none) is an error.
    pub(super) fn openslo_period(
        &mut self,
        node: Option<&Node>,
        what: &str,
        exactly_one: bool,
        window: fn(&mut Self, &Node) -> Option<Duration>,
    ) -> Option<Duration> {
        let w = node?;
        let items = self.seq(w, what)?;
        let (ok, msg) = if exactly_one {
            (items.len() == 1, "exactly one time window is supported")
        } else {
            (items.len() <= 1, "only one time window is supported")
        };
        if !ok {
            self.sink.error(w.pos(), "slo-openslo", msg);
        }
        window(self, items.first()?)
    }

    /// The part both OpenSLO versions share once their own `spec` keys are read:
    /// `watchfire`, the service name, the objectives list and the resulting spec.
    /// `objective` decodes one objective mapping (its version's keys) into a target
    /// and an SLI; it returns `None` after reporting why the objective is dropped.
    pub(super) fn openslo_finish<'n>(
        &mut self,
        root: &Node,
        c: OpensloCommon<'n>,
        mut objective: impl FnMut(&mut Self, Obj<'n>) -> Option<(Objective, Sli)>,
    ) -> Option<SloSpec> {
        let (ext, alerting) = self.openslo_ext(c.ext);
        let (service, spos2) = c.service?;
        self.check_name(&service, spos2, "service");
        let Some(objectives) = c.objectives else {
            self.sink
                .error(c.spos, "slo-required", "at least one objective is required");
            return None;
        };
        let items = self.seq(objectives, "objectives")?;
        if items.is_empty() {
            self.sink
                .error(objectives.pos(), "slo-required", "at least one objective is required");
        }
        let mut slos = Vec::new();
        for (idx, item) in items.iter().enumerate() {
            let Some(oo) = self.obj(item, "an objective") else {
                continue;
            };
            let opos = oo.pos;
            let Some((target, sli)) = objective(self, oo) else {
                continue;
            };
            slos.push(self.openslo_slo(
                &service,
                &c.name,
                idx,
                &c.description,
                target,
                sli,
                c.period,
                &ext,
                &alerting,
                opos,
            ));
        }
        Some(SloSpec {
            file: self.sink.file.clone(),
            doc_index: 0,
            pos: root.pos(),
            format: c.format,
            service,
            labels: BTreeMap::new(),
            slos,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn openslo_slo(
        &mut self,
        service: &str,
        name: &str,
        idx: usize,
        description: &str,
        objective: Objective,
        sli: Sli,
        period: Option<Duration>,
        ext: &Extensions,
        alerting: &Option<(AlertMeta, AlertMeta)>,
        pos: Pos,
    ) -> Slo {
        let (page_alert, ticket_alert) = alerting.clone().unwrap_or((
            AlertMeta {
                disable: true,
                ..AlertMeta::default()
            },
            AlertMeta {
                disable: true,
                ..AlertMeta::default()
            },
        ));
        let slo_name = format!("{name}-{idx}");
        let id = format!("{service}-{slo_name}");
        self.check_name(&id, pos, "SLO ID");
        Slo {
            id,
            name: slo_name,
            service: service.to_string(),
            description: description.to_string(),
            objective,
            labels: BTreeMap::new(),
            sli,
            period: ext.period.or(period),
            page_alert,
            ticket_alert,
            plugins: Vec::new(),
            override_default_plugins: false,
            ext: ext.clone(),
            pos,
        }
    }

    fn openslo_ext(&mut self, node: Option<&Node>) -> (Extensions, Option<(AlertMeta, AlertMeta)>) {
        let Some(n) = node else {
            return (Extensions::default(), None);
        };
        let (mut ext, _) = self.extensions(n, false, true);
        ext.latency = None;
        let alerting = match n.get("alerting") {
            Some(a) if !a.is_null() => {
                let r = self.sloth_alerting(a, &PROM_KEYS, false);
                if let Some((p, t)) = &r {
                    for (m, which) in [(p, "page"), (t, "ticket")] {
                        if !m.disable && m.name.is_empty() {
                            self.sink.error(
                                a.pos(),
                                "slo-alert-name",
                                format!("watchfire.alerting.name is required unless the {which} alert is disabled"),
                            );
                        }
                    }
                }
                r
            }
            _ => None,
        };
        (ext, alerting)
    }

    pub(super) fn budgeting_method(&mut self, m: Option<&str>, at: Pos) {
        match m {
            None | Some("Occurrences") => {}
            Some(other) => self.sink.error(
                at,
                "slo-openslo",
                format!("budgetingMethod {other:?} is not supported: only Occurrences (ratio of events)"),
            ),
        }
    }

    /// `metadata`, returning the name.
    fn openslo_metadata(&mut self, meta: Option<&Node>, at: Pos, allowed: &[&str]) -> Option<String> {
        let Some(m) = meta else {
            self.sink.error(at, "slo-required", "metadata.name is required");
            return None;
        };
        let mut mo = self.obj(m, "metadata")?;
        let name = self.required_string(mo.take("name"), mo.pos, "metadata.name");
        for k in allowed {
            mo.take(k);
        }
        mo.finish(&mut self.sink, "metadata", allowed);
        let (name, p) = name?;
        self.check_name(&name, p, "metadata.name");
        Some(name)
    }

    /// An OpenSLO target (a ratio in [0, 1)) as a percentage.
    pub(super) fn objective_ratio(&mut self, node: &Node) -> Option<Objective> {
        let (d, f, pos) = self.number(node, "target")?;
        let exact = d
            .to_ratio()
            .and_then(|r| r.checked_mul(crate::slo::num::Ratio { num: 100, den: 1 }))
            .and_then(|r| r.to_decimal());
        let Some(exact) = exact else {
            self.sink.error(pos, "slo-type", "target is out of range");
            return None;
        };
        if !(exact.is_positive() && exact.cmp_int(100) == std::cmp::Ordering::Less) {
            self.sink
                .error(pos, "slo-objective-range", format!("target must be in (0, 1), got {d}"));
            return None;
        }
        Some(Objective {
            percent: f * 100.0,
            exact,
            pos,
        })
    }
}

/// Sloth's OpenSLO mapping: `1 - (good / total)` as a raw error-ratio SLI.
pub(super) fn good_total_sli(good: &Query, total: &Query) -> Sli {
    Sli::Raw {
        error_ratio_query: Query {
            text: format!(
                "\n  1 - (\n    (\n      {}\n    )\n    /\n    (\n      {}\n    )\n  )\n",
                good.text, total.text
            ),
            pos: good.pos,
        },
    }
}
