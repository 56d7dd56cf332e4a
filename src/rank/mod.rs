//! From pairwise outcomes to scores and ranks: win ratios, Bradley-Terry, Product of
//! Experts, debiasing, and positional-bias statistics. Pure functions.
