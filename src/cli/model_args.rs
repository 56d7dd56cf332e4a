//! The model arguments every model-using subcommand shares, and loading a scorer from them.

use anyhow::Result;
use clap::{Args, ValueEnum};

use crate::arch::{Precision, WeightPolicy};
use crate::engine::remote::{self, BackendConfig, RemoteScorer};
use crate::engine::{load_scorer, LoadOptions, MockScorer};
use crate::engine::{BatchBudget, DecoderSettings, Scorer, Strategy};
use nlg_judge_kernels::cpu::Vendor;

/// Which model to run, where, and how.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model: a card name (see `nlg-judge models list`), a .gguf file, or a directory
    /// with config.json, safetensors weights and tokenizer.json. Card files are fetched
    /// into the cache on first use. `mock[:delay-ms=N,panic-on=TEXT]` is a scripted model
    /// without weights for testing the service and its clients (its answers are not
    /// judgements). `compare` and `score` take it more than once: a jury of judges, run
    /// one after the other and combined into one ranking (README "Juries").
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub model: Vec<String>,

    /// Device: auto (a GPU when compiled in and present, else the CPU), cpu, cuda[:N],
    /// metal.
    #[arg(long, default_value = "auto")]
    pub device: String,

    /// Quantized GGUF weights: auto dequantises to f32 on CPU (faster there) where that
    /// fits in the available memory, else keeps them as stored, and keeps them quantized
    /// on GPUs; f32 always dequantises; quantized never does.
    #[arg(long, value_enum, default_value_t = WeightPolicy::Auto)]
    pub weights: WeightPolicy,

    /// Arithmetic of the model's matrix products (CPU, decoder-only models): f32 (exact);
    /// bf16 weights with f32 sums (the attention projection's inputs kept to 16 bits, the
    /// others rounded to bf16); int8 weights and activations with integer sums (least
    /// accurate); auto: f32, or bf16 where f32 would not fit in the available memory (said
    /// on stderr; AMX CPUs too, until bf16's agreement with f32 is measured on tiles). The
    /// output head stays f32. Results are cached per precision. Whether
    /// bf16/int8 are faster than f32 depends on the CPU: see `--help`.
    #[arg(long, value_enum, default_value_t = PrecisionArg::Auto, long_help = precision_help())]
    pub precision: PrecisionArg,

    /// Most tokens one forward pass computes; bounds memory. Longer prompts are
    /// computed in pieces.
    #[arg(long, default_value_t = BatchBudget::default().max_batch_tokens)]
    pub max_batch_tokens: usize,

    /// Most sequences one forward pass computes.
    #[arg(long, default_value_t = BatchBudget::default().max_batch_rows)]
    pub max_batch_rows: usize,

    #[arg(long, value_name = "MIB", help = arena_help())]
    pub max_arena_mib: Option<usize>,

    /// How prompts are evaluated: tree shares every common prefix once; naive runs each
    /// prompt on its own (a baseline, same results).
    #[arg(long, value_enum, default_value_t = Strategy::Tree)]
    pub strategy: Strategy,

    #[command(flatten)]
    pub backend: BackendArgs,
}

/// A model served by an engine instead of loaded here (see docs/engines.md).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Served model (--backend)")]
pub struct BackendArgs {
    /// Score with a model served by another program: the OpenAI-compatible base address
    /// of vLLM, SGLang, TGI, llama.cpp's server or `nlg-judge serve`, e.g.
    /// http://gpu-node:8000/v1. `--model` is then the name the engine serves the model
    /// under; prompts are tokenised here (--tokenizer) and sent as token ids; label
    /// probabilities are exact (top-K log-probs, then vLLM's restricted generation or echo
    /// for the rest; docs/engines.md). Results are
    /// cached apart from local runs. --device, --precision and --weights do not apply.
    #[arg(long, value_name = "URL")]
    pub backend: Option<String>,

    /// The served model's tokenizer and chat template: a card name, a .gguf file, or the
    /// model's directory (tokenizer.json, config.json, tokenizer_config.json; the weights
    /// are not needed). Default: the card named like --model. Checked against the
    /// engine's /tokenize route on the first prompt where the engine has one.
    #[arg(long, value_name = "SPEC", requires = "backend")]
    pub tokenizer: Option<String>,

    /// File whose first line is the engine's bearer token (else the environment variable
    /// NLG_JUDGE_BACKEND_TOKEN). Never printed or written to outputs.
    #[arg(long, value_name = "FILE", requires = "backend")]
    pub backend_token_file: Option<std::path::PathBuf>,

    /// PEM file of certificate authorities to trust for an https backend (a private CA),
    /// beside the public ones. Certificates are always checked.
    #[arg(long, value_name = "FILE", requires = "backend")]
    pub backend_ca: Option<std::path::PathBuf>,

    /// Longest wait for one answer of the engine, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = crate::engine::remote::DEFAULT_TIMEOUT.as_secs())]
    pub backend_timeout: u64,

    /// Retries of a request the engine answers busy (429, 502-504), drops or times out,
    /// with growing waits (and the engine's Retry-After).
    #[arg(long, value_name = "N", default_value_t = crate::engine::remote::DEFAULT_RETRIES)]
    pub backend_retries: u32,

    /// Requests to the engine in flight at once (its batching works on them together).
    #[arg(long, value_name = "N", default_value_t = crate::engine::remote::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,

    /// Alternatives asked for at the answer's first position (at most the engine's
    /// limit, e.g. vLLM's max-logprobs setting); labels outside them are scored by
    /// generations restricted to the label's tokens (vLLM's allowed_token_ids) or by echo.
    #[arg(long, value_name = "K", default_value_t = crate::engine::remote::DEFAULT_TOP_K)]
    pub backend_top_k: usize,

    /// Accept an engine that gives top-K log-probs but no echo: a label outside the top-K
    /// then gets the K-th log-prob (an upper bound), and the model's name in every output
    /// says [top-k only].
    #[arg(long, requires = "backend")]
    pub accept_top_k_only: bool,
}

/// `--precision` values (mapped onto [`Precision`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// f32, or bf16 where f32 does not fit in memory.
    Auto,
    F32,
    Bf16,
    Int8,
}

/// Whether bf16 on AMX tiles has been measured to agree with f32 as issue 50 asks before
/// `--precision auto` may pick it: max |dp| <= 0.01 on SummEval document 0 and the same
/// decision on at least 99% of its comparisons (`scripts/cpu/amx.sh` measures it). Not
/// yet measured on AMX hardware, so auto stays f32 there too.
pub const AMX_BF16_AGREEMENT_MEASURED: bool = false;

/// Whether `--precision auto` runs bf16 on this CPU: where AMX bf16 tiles run and
/// [`AMX_BF16_AGREEMENT_MEASURED`]; otherwise f32 (or bf16 where f32 would not fit in
/// memory, decided at load).
pub fn auto_picks_bf16() -> bool {
    AMX_BF16_AGREEMENT_MEASURED && nlg_judge_kernels::gemm::amx::status().bf16
}

impl From<PrecisionArg> for Precision {
    fn from(arg: PrecisionArg) -> Self {
        match arg {
            PrecisionArg::Auto if auto_picks_bf16() => Precision::Bf16,
            PrecisionArg::Auto | PrecisionArg::F32 => Precision::F32,
            PrecisionArg::Bf16 => Precision::Bf16,
            PrecisionArg::Int8 => Precision::Int8,
        }
    }
}

/// What a precision does on this CPU: the instruction path of its products, and whether
/// that path is slower than f32 here (measured figures in docs/results.md, "Every
/// instruction path").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrecisionPath {
    /// The kernels' path: `avx512`, `avxvnni`, `avx2`, `dotprod`, `neon`, `portable`, or
    /// `candle` (f32).
    pub path: &'static str,
    /// One line on what the path does and how fast it was measured.
    pub description: &'static str,
    /// Whether f32 is faster than this precision on this path.
    pub slower_than_f32: bool,
}

/// What the portable products do (measured on x86-64; on aarch64 only reached with
/// `NLG_JUDGE_CPU=portable`).
const PORTABLE: &str = if cfg!(target_arch = "aarch64") {
    "plain Rust (no NEON): several times slower than f32"
} else {
    "plain Rust (no AVX2): several times slower than f32"
};

/// [`PrecisionPath`] of `precision` with the paths `bf16` and `int8` (as named by
/// `nlg_judge_kernels::cpu::paths`) on a processor of `vendor`.
pub fn precision_path(
    precision: Precision,
    bf16: &'static str,
    int8: &'static str,
    vendor: Vendor,
) -> PrecisionPath {
    let (path, description, slower_than_f32) = match (precision, bf16, int8) {
        (Precision::F32, _, _) => (
            "candle",
            if cfg!(target_arch = "aarch64") {
                "candle's f32 matrix products (the gemm crate's own NEON code)"
            } else {
                "candle's f32 matrix products (the gemm crate's own AVX/AVX2/AVX-512 code)"
            },
            false,
        ),
        (Precision::Bf16, "amx", _) => (
            "amx",
            "AMX tiles (tdpbf16ps) for products of 32 rows or more, AVX512-BF16 below \
             (generation's single rows): not yet measured end to end",
            false,
        ),
        (Precision::Bf16, "avx512", _) if vendor == Vendor::Intel => (
            "avx512",
            "AVX512-BF16 (vdpbf16ps): measured 0.69x f32 end to end on an Intel Xeon \
             (its bf16 products ran at half f32's rate at the model's shapes; 1.26x f32 \
             on an AMD Zen 5)",
            true,
        ),
        (Precision::Bf16, "avx512", _) => (
            "avx512",
            "AVX512-BF16 (vdpbf16ps): measured 1.26x f32 on Zen 5 (0.69x on an Intel Xeon)",
            false,
        ),
        (Precision::Bf16, "avx2", _) => (
            "avx2",
            "AVX2+FMA: no bf16 arithmetic on this CPU, bf16 is widened to f32 in registers; \
             measured on an AVX2-only EPYC: 1.1-1.9x f32's matrix products on a few tokens \
             (generation), 0.64x f32 end to end on long prompts (scoring, comparisons)",
            true,
        ),
        (Precision::Bf16, "neon", _) => (
            "neon",
            "NEON: no bf16 arithmetic used (bfdot rounds differently), bf16 is widened to f32 \
             in registers and added with fmla, the AVX2 path's method; speed not measured on \
             ARM (on AVX2 the method was slower than f32 end to end on long prompts)",
            false,
        ),
        (Precision::Bf16, _, _) => ("portable", PORTABLE, true),
        (Precision::Int8, _, "amx") => (
            "amx",
            "AMX tiles (tdpbssd, one tile step per 32-value scale block) for products of 32 \
             rows or more, AVX512-VNNI below: not yet measured end to end",
            false,
        ),
        (Precision::Int8, "avx512", _) | (Precision::Int8, _, "avx512") => (
            "avx512",
            "AVX512-VNNI (vpdpbusd): measured 0.96-1.23x f32 on Zen 5, 1.20x f32 end to end \
             on an Intel Xeon",
            false,
        ),
        (Precision::Int8, _, "avxvnni") => (
            "avxvnni",
            "AVX-VNNI (vpdpbusd, 256-bit): not measured",
            false,
        ),
        (Precision::Int8, _, "avx2") => (
            "avx2",
            "AVX2: bytes widened to 16 bits and multiplied with vpmaddwd, no faster than \
             f32's FMA; measured on an AVX2-only EPYC: 1.7-2.3x f32's matrix products on a \
             few tokens (generation), 0.67x f32 end to end on long prompts (scoring)",
            true,
        ),
        (Precision::Int8, _, "dotprod") => (
            "dotprod",
            "NEON dot product (sdot, four byte products per lane): speed not measured on ARM",
            false,
        ),
        (Precision::Int8, _, "neon") => (
            "neon",
            "NEON without the dot product: bytes multiplied into 16 bits (smull) and added \
             pairwise, the AVX2 path's kind of method; speed not measured on ARM (on AVX2 \
             such a path was slower than f32 end to end on long prompts)",
            false,
        ),
        (Precision::Int8, _, _) => ("portable", PORTABLE, true),
    };
    PrecisionPath {
        path,
        description,
        slower_than_f32,
    }
}

/// [`precision_path`] on this machine (with `NLG_JUDGE_CPU` applied).
pub fn precision_path_here(precision: Precision) -> PrecisionPath {
    let paths = nlg_judge_kernels::cpu::paths();
    precision_path(precision, paths[1].1, paths[2].1, Vendor::detected())
}

/// `--precision`'s long help: the static text and what each precision does here.
fn precision_help() -> String {
    let mut help = String::from(
        "Arithmetic of the model's matrix products (CPU, decoder-only models): f32 \
         (exact); bf16 weights with f32 sums (the attention projection's inputs kept to 16 \
         bits, the others rounded to bf16); int8 weights and activations with integer sums \
         (least accurate); auto (the default): f32, or bf16 where f32 would not fit in the \
         available memory (said on stderr); on CPUs with AMX tiles too, until bf16 on tiles \
         has been measured to agree with f32 there. The output head stays f32. Results are cached \
         per precision. On a CUDA GPU: f32, or bf16 (bf16 weights and activations, f32 \
         accumulation, label scoring by the level plan; its kernels have not yet run on a \
         GPU); auto means f32 there.\n\n\
         On this CPU (NLG_JUDGE_CPU=avx2|portable|... hides features to compare paths):",
    );
    for precision in [Precision::F32, Precision::Bf16, Precision::Int8] {
        let here = precision_path_here(precision);
        help.push_str(&format!(
            "\n  {}: {}{}",
            precision.as_str(),
            here.description,
            if here.slower_than_f32 {
                " [slower than f32 here on long prompts]"
            } else {
                ""
            }
        ));
    }
    help
}

/// Print, once per process, a warning when `precision` runs slower than f32 on this CPU,
/// and a note when the CPU has AMX tiles that bf16/int8 cannot use here (the switch
/// `NLG_JUDGE_CPU`, or the operating system refused the tile state).
pub fn warn_if_slower(precision: Precision) {
    static NOTED: std::sync::Once = std::sync::Once::new();
    let amx = nlg_judge_kernels::gemm::amx::status();
    let tiles_run = match precision {
        Precision::Bf16 => amx.bf16,
        Precision::Int8 => amx.int8,
        _ => true,
    };
    let cpu_has_tiles = nlg_judge_kernels::cpu::CpuFeatures::detected().amx_tile;
    if let (false, true, Some(reason)) = (tiles_run, cpu_has_tiles, &amx.reason) {
        NOTED.call_once(|| {
            eprintln!(
                "note: --precision {} runs without AMX tiles: {reason}",
                precision.as_str()
            )
        });
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    let here = precision_path_here(precision);
    if here.slower_than_f32 {
        WARNED.call_once(|| {
            eprintln!(
                "warning: --precision {} runs the {} path on this CPU, slower than f32 on long \
                 prompts: {}; --precision f32 is faster there and exact",
                precision.as_str(),
                here.path,
                here.description
            )
        });
    }
}

impl ModelArgs {
    /// Loading options from these arguments and the environment.
    pub fn load_options(&self) -> Result<LoadOptions> {
        let mut options = LoadOptions::from_env()?;
        options.device = self.device.clone();
        options.weights = self.weights;
        options.precision = self.precision.into();
        warn_if_slower(options.precision);
        options.memory.adapt_precision = self.precision == PrecisionArg::Auto;
        options.memory.adapt_arena = self.max_arena_mib.is_none();
        options.progress = super::progress::bars("loading");
        options.decoder = DecoderSettings {
            strategy: self.strategy,
            budget: BatchBudget {
                max_batch_tokens: self.max_batch_tokens,
                max_batch_rows: self.max_batch_rows,
                max_arena_bytes: self
                    .max_arena_mib
                    .map_or(BatchBudget::default().max_arena_bytes, |mib| {
                        mib.saturating_mul(1 << 20)
                    }),
            },
        };
        Ok(options)
    }

    /// The one model named by `--model`; more than one is a usage error outside `compare`
    /// and `score` (the commands that take a jury).
    pub fn spec(&self) -> Result<&str> {
        match self.model.as_slice() {
            [one] => Ok(one),
            more => Err(super::input_error(anyhow::anyhow!(
                "--model given {} times ({}): only compare and score take several judges (a \
                 jury)",
                more.len(),
                more.join(", ")
            ))),
        }
    }

    /// These arguments for one judge of a jury: `model`, served at `backend` when given.
    pub fn for_judge(&self, model: &str, backend: Option<&str>) -> ModelArgs {
        let mut args = self.clone();
        args.model = vec![model.to_string()];
        if let Some(url) = backend {
            args.backend.backend = Some(url.to_string());
        }
        args
    }

    /// Resolve, fetch if needed, and load the model (`mock[:...]`: the scripted model,
    /// see [`MockScorer::from_spec`]).
    pub fn load(&self) -> Result<Box<dyn Scorer>> {
        let spec = self.spec()?;
        if let Some(url) = &self.backend.backend {
            return Ok(Box::new(self.connect(url)?));
        }
        if let Some(mock) = MockScorer::from_spec(spec).map_err(super::input_error)? {
            return Ok(Box::new(mock));
        }
        load_scorer(spec, &self.load_options()?)
    }
}

impl ModelArgs {
    /// The served model behind `--backend URL`.
    pub fn connect(&self, url: &str) -> Result<RemoteScorer> {
        let local_only = [
            (self.device != "auto", "--device"),
            (self.precision != PrecisionArg::Auto, "--precision"),
            (self.weights != WeightPolicy::Auto, "--weights"),
        ];
        if let Some((_, flag)) = local_only.iter().find(|(given, _)| *given) {
            return Err(super::input_error(anyhow::anyhow!(
                "{flag} applies to a model loaded here, not to one served by --backend (the \
                 engine's own settings decide)"
            )));
        }
        let args = &self.backend;
        let config = BackendConfig {
            url: url.to_string(),
            tokenizer: args.tokenizer.clone(),
            token_file: args.backend_token_file.clone(),
            ca_file: args.backend_ca.clone(),
            timeout_seconds: args.backend_timeout,
            retries: args.backend_retries,
            concurrency: args.concurrency,
            top_k: args.backend_top_k,
            accept_top_k_only: args.accept_top_k_only,
        };
        if config.concurrency == 0 || config.top_k == 0 {
            return Err(super::input_error(anyhow::anyhow!(
                "--concurrency and --backend-top-k must be at least 1"
            )));
        }
        let options = config.options(self.spec()?, super::progress::bars("backend"))?;
        remote::connect(options)
    }
}

/// The help of `--max-arena-mib`: its default is lowered at load where it does not fit,
/// so clap cannot show it as a plain default; the text says it, in clap's words.
fn arena_help() -> String {
    format!(
        "Most memory, in MiB, for keys and values: generation's rows and its prefix cache \
         together (rows wait for memory, the results are the same), and the level plan's \
         prefixes (bf16 on a GPU, `bench pairwise`: a run that needs more goes in waves of \
         documents, probabilities equal within rounding, 1e-6). The memory plan counts it \
         (CPU). The default is lowered at load to what fits beside the weights (said on \
         stderr); an explicit value is kept (an error says the value that would fit) \
         [default: {}]",
        BatchBudget::default().max_arena_bytes >> 20
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_measured_faster_go_without_a_warning() {
        let on = |p, bf16, int8| precision_path(p, bf16, int8, Vendor::Amd);
        let slower = |p, bf16, int8| on(p, bf16, int8).slower_than_f32;
        assert!(!slower(Precision::F32, "portable", "portable"));
        assert!(!slower(Precision::Bf16, "avx512", "avx512"));
        // The same instructions on an Intel Xeon: bf16 0.69x f32 end to end, int8 1.20x.
        let intel = |p| precision_path(p, "avx512", "avx512", Vendor::Intel).slower_than_f32;
        assert!(intel(Precision::Bf16));
        assert!(!intel(Precision::Int8));
        assert!(slower(Precision::Bf16, "avx2", "avx2"));
        assert!(slower(Precision::Bf16, "portable", "avx2"));
        assert!(slower(Precision::Int8, "avx2", "avx2"));
        assert!(slower(Precision::Int8, "portable", "portable"));
        assert_eq!(on(Precision::Int8, "avx2", "avxvnni").path, "avxvnni");
        // aarch64's paths are not measured (as AVX-VNNI's): no warning, and the help says so.
        for (precision, path) in [
            (Precision::Bf16, "neon"),
            (Precision::Int8, "dotprod"),
            (Precision::Int8, "neon"),
        ] {
            assert!(!slower(precision, path, path), "{precision:?} {path}");
            let here = on(precision, path, path);
            assert_eq!(here.path, path);
            assert!(here.description.contains("not measured"), "{here:?}");
        }
        assert!(precision_help().contains("On this CPU"));
    }

    #[test]
    fn amx_paths_are_described_and_auto_waits_for_their_measurement() {
        for vendor in [Vendor::Intel, Vendor::Amd] {
            for precision in [Precision::Bf16, Precision::Int8] {
                let here = precision_path(precision, "amx", "amx", vendor);
                assert_eq!(here.path, "amx", "{precision:?}");
                assert!(!here.slower_than_f32);
                assert!(here.description.contains("not yet measured"), "{here:?}");
            }
        }
        // Auto is bf16 only where the tiles run (and, until the agreement is measured on
        // AMX hardware, nowhere).
        let expected = if auto_picks_bf16() {
            Precision::Bf16
        } else {
            Precision::F32
        };
        assert_eq!(Precision::from(PrecisionArg::Auto), expected);
        if !nlg_judge_kernels::gemm::amx::status().bf16 || !AMX_BF16_AGREEMENT_MEASURED {
            assert!(!auto_picks_bf16());
        }
    }
}
