//! The embedded store as a source.

use super::{HistogramSeriesData, Queryable, SeriesData, SourceError, StartTimestampSeriesData};
use crate::labels::Matcher;
use std::sync::RwLock;

use crate::tsdb::Store;

impl Queryable for Store {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        // Decoding is most of a large query's time: tens of thousands of series are decoded on
        // every core, in series order.
        let ids = self.select_ids(matchers);
        Ok(crate::parallel::filter_map(&ids, |&id| {
            let mut samples = Vec::new();
            self.samples(id, mint, maxt, &mut samples);
            (!samples.is_empty()).then(|| SeriesData {
                labels: self.labels(id).clone(),
                samples,
            })
        }))
    }

    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        let mut out = Vec::new();
        if !self.has_histograms() {
            return Ok(out);
        }
        for id in self.select_ids(matchers) {
            let mut samples = Vec::new();
            self.histogram_samples(id, mint, maxt, &mut samples);
            if !samples.is_empty() {
                out.push(HistogramSeriesData {
                    labels: self.labels(id).clone(),
                    samples,
                });
            }
        }
        Ok(out)
    }

    fn has_histograms(&self) -> bool {
        Store::has_histograms(self)
    }

    fn select_start_timestamps(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<StartTimestampSeriesData>, SourceError> {
        let mut out = Vec::new();
        if !Store::has_start_timestamps(self) {
            return Ok(out);
        }
        for id in self.select_ids(matchers) {
            let mut starts = Vec::new();
            self.start_timestamps(id, mint, maxt, &mut starts);
            if !starts.is_empty() {
                out.push(StartTimestampSeriesData {
                    labels: self.labels(id).clone(),
                    starts,
                });
            }
        }
        Ok(out)
    }

    fn has_start_timestamps(&self) -> bool {
        Store::has_start_timestamps(self)
    }

    fn may_have_stale_markers(&self) -> bool {
        self.has_stale_markers()
    }
}

/// The embedded store as a shared, writable source.
#[derive(Default)]
pub(crate) struct SharedStore(pub RwLock<Store>);

impl SharedStore {
    /// The store for reading; a poisoned lock is the source being unavailable.
    fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Store>, SourceError> {
        self.0.read().map_err(|_| SourceError::Unavailable {
            source_name: "embedded".into(),
            message: "store lock poisoned".into(),
        })
    }
}

impl Queryable for SharedStore {
    fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<SeriesData>, SourceError> {
        self.read()?.select(matchers, mint, maxt)
    }

    fn select_histograms(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<HistogramSeriesData>, SourceError> {
        self.read()?.select_histograms(matchers, mint, maxt)
    }

    fn has_histograms(&self) -> bool {
        self.0.read().map(|s| s.has_histograms()).unwrap_or(false)
    }

    fn select_start_timestamps(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<StartTimestampSeriesData>, SourceError> {
        self.read()?.select_start_timestamps(matchers, mint, maxt)
    }

    fn has_start_timestamps(&self) -> bool {
        self.0.read().map(|s| s.has_start_timestamps()).unwrap_or(false)
    }

    fn may_have_stale_markers(&self) -> bool {
        self.0.read().map(|s| s.has_stale_markers()).unwrap_or(true)
    }
}
