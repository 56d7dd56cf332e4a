//! `nlg-judge labels`: the log-probabilities a model gives a few label words after a
//! prompt. A debugging view of exactly what every method builds on.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;

use super::model_args::ModelArgs;
use crate::engine::{Label, LabelRequest, Prompt, TextPrompt};

/// Arguments of `nlg-judge labels`.
#[derive(Debug, Args)]
pub struct LabelsArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// File holding the prompt (the user's message).
    #[arg(long)]
    pub prompt_file: PathBuf,

    /// A label to score after the prompt (repeat: --label ' A' --label ' B'). Leading
    /// spaces matter: " A" and "A" are different tokens for most tokenisers.
    #[arg(long = "label", required = true)]
    pub labels: Vec<String>,

    /// Text that opens the answer before the labels (e.g. "Summary").
    #[arg(long, default_value = "")]
    pub answer_prefix: String,

    /// Render the prompt with the model's chat template (the answer prefix opens the
    /// assistant turn).
    #[arg(long)]
    pub chat: bool,

    /// System message for --chat (default: the model's own default, if any).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,

    /// Print the prompt as the model reads it.
    #[arg(long)]
    pub show_prompt: bool,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct LabelOut {
    text: String,
    token_ids: Vec<u32>,
    logprob: f64,
    prob_normalised: f64,
}

#[derive(Debug, Serialize)]
struct LabelsOut {
    labels: Vec<LabelOut>,
    label_mass: f64,
}

pub fn run(args: LabelsArgs) -> Result<()> {
    let user = std::fs::read_to_string(&args.prompt_file)
        .with_context(|| format!("cannot read prompt file {}", args.prompt_file.display()))
        .map_err(super::input_error)?;
    let text = TextPrompt {
        system: args.system.clone(),
        user,
        answer_prefix: args.answer_prefix.clone(),
    };
    let prompt = if args.chat {
        Prompt::chat(text)
    } else {
        Prompt::plain(text)
    };
    let request = LabelRequest {
        prompt,
        labels: args.labels.iter().map(|l| Label::Text(l.clone())).collect(),
    };
    let mut scorer = args.model.load()?;
    if args.show_prompt {
        let rendered = scorer.render(&request.prompt)?;
        eprintln!("--- prompt ---\n{}", rendered.input);
        if !rendered.decoder_prefix.is_empty() {
            eprintln!("--- decoder prefix ---\n{}", rendered.decoder_prefix);
        }
        eprintln!("--------------");
    }
    let result = scorer
        .label_logprobs(std::slice::from_ref(&request))?
        .remove(0);
    let normalised = result.normalised();
    let out = LabelsOut {
        label_mass: result.label_mass(),
        labels: args
            .labels
            .iter()
            .zip(&result.labels)
            .zip(normalised)
            .map(|((text, score), prob)| LabelOut {
                text: text.clone(),
                token_ids: score.tokens.clone(),
                logprob: score.logprob,
                prob_normalised: prob,
            })
            .collect(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!(
            "{:<16} {:<20} {:>12} {:>12}",
            "label", "token ids", "log-prob", "normalised"
        );
        for label in &out.labels {
            println!(
                "{:<16} {:<20} {:>12.6} {:>12.6}",
                format!("{:?}", label.text),
                format!("{:?}", label.token_ids),
                label.logprob,
                label.prob_normalised
            );
        }
        println!(
            "label mass {:.6} ({} prompt tokens)",
            out.label_mass, result.prompt_tokens
        );
    }
    Ok(())
}
