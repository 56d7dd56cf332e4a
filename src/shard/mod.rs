//! Sharded runs: N processes on N machines split one input's contexts between them and a
//! merge puts the outputs back together, byte for byte what a single run writes.
//!
//! - [`spec`]: which shard this process is (`--shard I/N`, Slurm job arrays, Kubernetes
//!   Indexed Jobs) and which contexts belong to it (a fixed hash of `context_id`);
//! - [`fingerprint`]: what must agree between shards for their outputs to be merged,
//!   written as a sidecar file beside each output;
//! - [`merge`]: the checks and the reassembly.

pub mod fingerprint;
pub mod merge;
pub mod spec;

pub use fingerprint::{sidecar_path, Fingerprint, ShardSidecar};
pub use merge::{merge_outputs, MergeError, ShardOutput};
pub use spec::{resolve_shard, shard_of, ShardChoice, ShardSpec};
