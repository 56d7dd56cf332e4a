//! Batched generation on the real SmolLM2: rows advanced together, each with its own
//! cache, give the tokens of one-at-a-time generation (greedy and seeded nucleus
//! sampling, prompts of different lengths, rows finishing at different steps), and a
//! batch is reproducible under its seeds.

use crate::common;

use anyhow::Result;
use nlg_judge::engine::Generate;
use nlg_judge::engine::{
    BatchBudget, DecoderSettings, GenerationRequest, Prompt, Sampling, TextPrompt,
};

fn requests() -> Vec<GenerationRequest> {
    let prompts = [
        "Paraphrase the sentences: The cat sat on the mat.",
        "Change the voice of the sentences: The committee approved the new budget yesterday after a long debate.",
        "List three colours.",
        "Use less formal language to change the level of formality of the sentences: We regret to inform you that the meeting is cancelled.",
    ];
    prompts
        .iter()
        .enumerate()
        .map(|(i, text)| GenerationRequest {
            prompt: Prompt::chat(TextPrompt::user(*text)),
            max_tokens: 12 + 4 * i,
            sampling: if i == 2 {
                Sampling::Greedy
            } else {
                Sampling::TopP {
                    temperature: 1.0,
                    top_p: 0.9,
                    seed: 7 + i as u64,
                }
            },
            stop: vec![],
        })
        .collect()
}

#[test]
fn batched_rows_generate_what_single_requests_generate() -> Result<()> {
    let mut scorer = common::smollm2_scorer(DecoderSettings::default());
    let requests = requests();
    let single: Vec<_> = requests
        .iter()
        .map(|r| scorer.generate(r))
        .collect::<Result<_>>()?;
    let batched = scorer.generate_batch(&requests)?;
    assert_eq!(batched.len(), requests.len());
    for (index, (one, many)) in single.iter().zip(&batched).enumerate() {
        assert!(!one.tokens.is_empty(), "request {index} generated nothing");
        assert_eq!(one.tokens, many.tokens, "request {index}");
        assert_eq!(one.text, many.text, "request {index}");
        assert_eq!(one.finish, many.finish, "request {index}");
    }
    assert_eq!(scorer.generate_batch(&requests)?, batched);
    Ok(())
}

#[test]
fn passes_smaller_than_the_batch_give_the_same_rows() -> Result<()> {
    let mut wide = common::smollm2_scorer(DecoderSettings::default());
    let mut narrow = common::smollm2_scorer(DecoderSettings {
        budget: BatchBudget {
            max_batch_rows: 3,
            ..BatchBudget::default()
        },
        ..DecoderSettings::default()
    });
    let requests = requests();
    assert_eq!(
        wide.generate_batch(&requests)?,
        narrow.generate_batch(&requests)?
    );
    Ok(())
}
