//! Rules: the rule-file model with source spans, the alert state machine, recording rules and
//! group evaluation.

pub mod yaml;
