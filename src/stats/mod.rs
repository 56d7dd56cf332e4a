//! Statistics for meta-evaluation and discernment: correlations, meta-evaluation
//! levels with the published skip rules, bootstrap intervals, the Wilcoxon
//! signed-rank test and the harmonic-mean p-value. Pure functions over plain slices;
//! bad input (length mismatch, non-finite values, too few points) is an error, an
//! undefined coefficient (a constant series) is `None`.

pub mod bootstrap;
pub mod correlation;
pub mod hmp;
pub mod input;
pub mod meta;
pub mod ranks;
pub mod report;
pub mod wilcoxon;

pub use bootstrap::{
    bootstrap_ci, percentile_interval, BootstrapOptions, BootstrapResult, CoefficientInterval,
    Interval,
};
pub use correlation::{correlations, kendall_tau_b, pearson, spearman, Coefficient, Correlations};
pub use hmp::harmonic_mean_p;
pub use meta::{
    meta_evaluate, pooled_level, summary_level, system_level, Item, Level, LevelResult, SkipRule,
};
pub use ranks::average_ranks;
pub use wilcoxon::{wilcoxon_greater, WilcoxonMethod, WilcoxonResult};
