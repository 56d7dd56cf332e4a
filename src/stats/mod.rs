//! Statistics for meta-evaluation and discernment: correlations, tests, bootstrap.
//! Pure functions over plain slices.
