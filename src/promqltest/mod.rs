//! promqltest runner.
