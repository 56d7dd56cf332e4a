//! The integration tests, one binary (linking candle, tokenizers, axum and rusqlite once
//! instead of once per file): one module per topic, helpers in `common`. Tests that set
//! process-wide environment variables live in `tests/process_env/`, apart.

mod archs;
mod batched_generation;
mod bertscore_parity;
mod cache_faults;
mod chat_templates;
mod cli;
mod cli_models;
mod common;
mod compare_resume;
mod completions;
mod correlate_cli;
mod decoder_scorer;
mod deploy_files;
mod dhp_analyze;
mod dhp_cli;
mod dhp_pipeline;
mod fuzz;
mod hub_source;
mod llama_model;
mod llama_safetensors;
mod llama_segment_attention;
mod metric_cli;
mod metrics_parity;
mod openai_api;
mod own_data;
mod pairwise_runner;
mod paraphrase;
mod precision;
mod report;
mod reproduce;
mod resolve;
mod score_cli;
mod score_mock;
mod score_smollm2;
mod server;
mod server_faults;
mod shard_merge;
mod t5_candle_reference;
mod t5_loading;
mod t5_parity;
mod t5_scorer;
mod t5_untied_embeddings;
mod tokenizer;
mod wheel_source;
