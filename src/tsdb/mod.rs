//! Embedded in-memory series store. (Being built: see the tsdb brief.)
use crate::labels::{Labels, Matcher};

pub type SeriesId = u32;

#[derive(Default)]
pub struct Store {
    series: Vec<(Labels, Vec<(i64, f64)>)>,
}

impl Store {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn select_ids(&self, matchers: &[Matcher]) -> Vec<SeriesId> {
        (0..self.series.len() as u32)
            .filter(|&i| {
                let l = &self.series[i as usize].0;
                matchers.iter().all(|m| m.matches(l.get(&m.name).unwrap_or("")))
            })
            .collect()
    }
    pub fn labels(&self, id: SeriesId) -> &Labels {
        &self.series[id as usize].0
    }
    pub fn samples(&self, id: SeriesId, mint: i64, maxt: i64, out: &mut Vec<(i64, f64)>) {
        out.extend(self.series[id as usize].1.iter().filter(|s| s.0 >= mint && s.0 <= maxt));
    }
}
