//! BERTScore's greedy matching (Zhang et al., 2020): every candidate token is matched to
//! its most similar reference token by cosine similarity (precision) and every reference
//! token to its most similar candidate token (recall), optionally weighted by idf, and
//! F1 is their harmonic mean. Baseline rescaling is not applied. The embeddings come from
//! an encoder elsewhere; this module only sees vectors.
