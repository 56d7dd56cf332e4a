//! From a model name to verified model files: devices, model cards, weight sources (local
//! path, hub, PyPI wheel), the file cache, tokenisers and chat templates. Building a model
//! from those files is the engine's (`engine::load`): this layer knows no model code.
//!
//! Entry points: [`resolve_model`] turns a `--model` argument into a [`ResolvedModel`]
//! (verified files, architecture, chat template, conventions); [`load_tokenizer`] gives
//! its [`TextTokenizer`]; [`DeviceSpec`] picks the device.

pub mod cache;
pub mod card;
pub mod chat;
pub mod checkpoint;
pub mod conventions;
pub mod device;
pub mod fetch;
pub mod gguf_tokenizer;
pub mod hub;
pub mod progress;
pub mod resolve;
pub mod tokenizer;
pub mod wheel;

pub use cache::ModelCache;
pub use card::{Architecture, CardCatalog, ModelCard, WeightFormat};
pub use chat::ChatTemplate;
pub use conventions::{Conventions, ModelKind, BUILTIN_PROTOCOL_NAMES};
pub use device::{cpu_features, select_device, DeviceSpec};
pub use fetch::{fetch_card, FetchOptions, FetchedFile};
pub use hub::HubSettings;
pub use resolve::{
    load_tokenizer, resolve_card, resolve_model, resolve_tokenizer, ResolveOptions, ResolvedModel,
    TokenizerSource,
};
pub use tokenizer::{SpecialTokens, TextTokenizer};
