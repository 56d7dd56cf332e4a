//! Reading an engine's answers: the model list, and the log-probabilities of OpenAI's
//! completions object (`choices[0].logprobs` with `tokens`, `token_logprobs`,
//! `top_logprobs`). Pure functions over JSON, so every engine's variant is a unit test.
//!
//! Engines name a token either by its text (`" A"`) or, where asked
//! (`return_tokens_as_token_ids`, vLLM and our own service), by its id (`"token_id:319"`);
//! [`TokenKey`] keeps the difference, since only ids identify a token for certain.

use serde_json::Value;

/// How an answer names one token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TokenKey {
    Id(u32),
    Text(String),
}

impl TokenKey {
    pub fn parse(key: &str) -> Self {
        match key
            .strip_prefix("token_id:")
            .and_then(|id| id.parse::<u32>().ok())
        {
            Some(id) => TokenKey::Id(id),
            None => TokenKey::Text(key.to_string()),
        }
    }
}

/// One model an engine serves, as `GET /v1/models` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedModel {
    pub id: String,
    /// What tells these weights apart from others served under the same name: the
    /// fields the engine gives that do not change between calls (`root`, `parent`,
    /// `fingerprint`, `revision`, `owned_by`, the context length), as one line.
    pub identity: String,
    /// Longest prompt + answer the engine accepts, where it says.
    pub context_window: Option<usize>,
}

/// The models of a `GET /v1/models` answer (`data`).
pub fn served_models(answer: &Value) -> Vec<ServedModel> {
    let Some(data) = answer.get("data").and_then(Value::as_array) else {
        return Vec::new();
    };
    data.iter()
        .filter_map(|model| {
            let id = model.get("id")?.as_str()?.to_string();
            let context_window = ["max_model_len", "context_window", "context_length"]
                .iter()
                .find_map(|field| model.get(*field).and_then(Value::as_u64))
                .map(|n| n as usize);
            let identity = ["root", "parent", "fingerprint", "revision", "owned_by"]
                .iter()
                .filter_map(|field| {
                    let value = model.get(*field)?;
                    (!value.is_null()).then(|| format!("{field}={value}"))
                })
                .chain(context_window.map(|n| format!("context={n}")))
                .collect::<Vec<_>>()
                .join(" ");
            Some(ServedModel {
                id,
                identity,
                context_window,
            })
        })
        .collect()
}

/// The first choice's `logprobs` object, if the engine gave one.
fn logprobs(answer: &Value) -> Option<&Value> {
    answer
        .pointer("/choices/0/logprobs")
        .filter(|value| !value.is_null())
}

/// The alternatives at position `index` of `top_logprobs`: an object `{token: logprob}`
/// (OpenAI's legacy shape) or a list of `{token, logprob}` (some engines).
fn alternatives_at(logprobs: &Value, index: usize) -> Option<Vec<(TokenKey, f64)>> {
    let entry = logprobs.get("top_logprobs")?.get(index)?;
    match entry {
        Value::Object(map) => Some(
            map.iter()
                .filter_map(|(key, value)| Some((TokenKey::parse(key), value.as_f64()?)))
                .collect(),
        ),
        Value::Array(list) => Some(
            list.iter()
                .filter_map(|item| {
                    let key = item.get("token")?.as_str()?;
                    Some((TokenKey::parse(key), item.get("logprob")?.as_f64()?))
                })
                .collect(),
        ),
        _ => None,
    }
}

/// The next position's alternatives after a prompt sent without echo: the first
/// generated position's `top_logprobs`. `None` where the engine gave none (it ignored
/// `logprobs`) or an empty list.
pub fn next_token_alternatives(answer: &Value) -> Option<Vec<(TokenKey, f64)>> {
    let found = alternatives_at(logprobs(answer)?, 0)?;
    (!found.is_empty()).then_some(found)
}

/// The tokens and log-probabilities of an echoed prompt (and what was generated after
/// it): `tokens` and `token_logprobs`, the first position's log-prob `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct Echoed {
    pub tokens: Vec<TokenKey>,
    pub logprobs: Vec<Option<f64>>,
}

pub fn echoed(answer: &Value) -> Option<Echoed> {
    echoed_in(logprobs(answer)?)
}

/// The echoes of a request with `count` prompts: choice `index` k answers prompt k
/// (engines may list the choices in any order); `None` for a prompt without one.
pub fn echoed_choices(answer: &Value, count: usize) -> Vec<Option<Echoed>> {
    let mut found: Vec<Option<Echoed>> = vec![None; count];
    let choices = answer.get("choices").and_then(Value::as_array);
    for (at, choice) in choices.into_iter().flatten().enumerate() {
        let index = choice
            .get("index")
            .and_then(Value::as_u64)
            .map_or(at, |i| i as usize);
        let echoed = choice
            .get("logprobs")
            .filter(|v| !v.is_null())
            .and_then(echoed_in);
        if let (Some(slot), Some(echoed)) = (found.get_mut(index), echoed) {
            *slot = Some(echoed);
        }
    }
    found
}

fn echoed_in(logprobs: &Value) -> Option<Echoed> {
    let values = logprobs.get("token_logprobs")?.as_array()?;
    let tokens = match logprobs.get("tokens").and_then(Value::as_array) {
        Some(tokens) => tokens
            .iter()
            .map(|t| TokenKey::parse(t.as_str().unwrap_or_default()))
            .collect(),
        None => Vec::new(),
    };
    Some(Echoed {
        tokens,
        logprobs: values.iter().map(Value::as_f64).collect(),
    })
}

/// One position of a completion's `logprobs`: the token there, its log-probability
/// (`None` for an echoed prompt's first token) and the alternatives the engine listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Position {
    pub token: TokenKey,
    pub logprob: Option<f64>,
    pub top: Vec<(TokenKey, f64)>,
}

/// Every position of the first choice's `logprobs` (echoed prompt, then generated
/// tokens); `None` where the engine gave no `tokens` and `token_logprobs` of one length.
pub fn positions(answer: &Value) -> Option<Vec<Position>> {
    let logprobs = logprobs(answer)?;
    let tokens = logprobs.get("tokens")?.as_array()?;
    let values = logprobs.get("token_logprobs")?.as_array()?;
    if tokens.len() != values.len() {
        return None;
    }
    tokens
        .iter()
        .zip(values)
        .enumerate()
        .map(|(at, (token, value))| {
            Some(Position {
                token: TokenKey::parse(token.as_str()?),
                logprob: value.as_f64(),
                top: alternatives_at(logprobs, at).unwrap_or_default(),
            })
        })
        .collect()
}

/// Prompt tokens the engine says it took from its prefix cache
/// (`usage.prompt_tokens_details.cached_tokens`, where it says).
pub fn cached_prompt_tokens(answer: &Value) -> usize {
    answer
        .pointer("/usage/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .map_or(0, |n| n as usize)
}

/// The first choice's text and finish reason.
pub fn generated(answer: &Value) -> Option<(String, Option<String>)> {
    let choice = answer.pointer("/choices/0")?;
    let text = choice.get("text")?.as_str()?.to_string();
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    Some((text, finish))
}

/// The token ids of a tokenize answer: `{"tokens": [ids]}` (vLLM, SGLang, llama.cpp's
/// server, llama-cpp-python, our `serve`), or a list of `{"id": ..}` objects, bare or
/// under `tokens` (TGI, llama.cpp with pieces).
pub fn tokenized(answer: &Value) -> Option<Vec<u32>> {
    let list = match answer {
        Value::Array(list) => list,
        _ => answer.get("tokens")?.as_array()?,
    };
    list.iter()
        .map(|t| {
            t.as_u64()
                .or_else(|| t.get("id")?.as_u64())
                .and_then(|n| u32::try_from(n).ok())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_name_ids_where_the_engine_gives_them() {
        assert_eq!(TokenKey::parse("token_id:319"), TokenKey::Id(319));
        assert_eq!(TokenKey::parse(" A"), TokenKey::Text(" A".into()));
        assert_eq!(
            TokenKey::parse("token_id:x"),
            TokenKey::Text("token_id:x".into())
        );
    }

    #[test]
    fn the_model_list_gives_names_identities_and_windows() {
        let vllm = json!({"object": "list", "data": [{
            "id": "llama-70b", "object": "model", "created": 1732000000,
            "owned_by": "vllm", "root": "/models/Llama-3.1-70B", "parent": null,
            "max_model_len": 8192
        }]});
        let models = served_models(&vllm);
        assert_eq!(models.len(), 1);
        assert_eq!(models[0].id, "llama-70b");
        assert_eq!(models[0].context_window, Some(8192));
        // `created` changes from call to call on some engines: never part of the identity.
        assert!(!models[0].identity.contains("1732000000"));
        assert!(models[0].identity.contains("Llama-3.1-70B"));
        assert!(served_models(&json!({"error": "x"})).is_empty());
    }

    #[test]
    fn alternatives_come_as_objects_or_lists() {
        let object = json!({"choices": [{"text": "A", "logprobs": {
            "tokens": [" A"], "token_logprobs": [-0.1],
            "top_logprobs": [{" A": -0.1, "token_id:33": -2.5}]
        }}]});
        let mut found = next_token_alternatives(&object).unwrap();
        found.sort_by(|a, b| b.1.total_cmp(&a.1));
        assert_eq!(
            found,
            vec![
                (TokenKey::Text(" A".into()), -0.1),
                (TokenKey::Id(33), -2.5)
            ]
        );
        let list = json!({"choices": [{"logprobs": {"top_logprobs": [[
            {"token": " B", "logprob": -0.7}
        ]]}}]});
        assert_eq!(
            next_token_alternatives(&list).unwrap(),
            vec![(TokenKey::Text(" B".into()), -0.7)]
        );
        // An engine that ignored `logprobs`.
        let none = json!({"choices": [{"text": "A", "logprobs": null}]});
        assert!(next_token_alternatives(&none).is_none());
        let empty = json!({"choices": [{"logprobs": {"top_logprobs": [{}]}}]});
        assert!(next_token_alternatives(&empty).is_none());
    }

    #[test]
    fn echoed_prompts_keep_the_first_positions_null() {
        let answer = json!({"choices": [{"logprobs": {
            "tokens": ["token_id:1", "token_id:7", "token_id:9"],
            "token_logprobs": [null, -1.5, -0.25]
        }}]});
        let echoed = echoed(&answer).unwrap();
        assert_eq!(echoed.tokens[1], TokenKey::Id(7));
        assert_eq!(echoed.logprobs, vec![None, Some(-1.5), Some(-0.25)]);
    }

    #[test]
    fn every_position_comes_with_its_alternatives() {
        let answer = json!({"choices": [{"text": " B", "logprobs": {
            "tokens": ["token_id:5", "token_id:7", "token_id:9"],
            "token_logprobs": [null, -1.5, -0.25],
            "top_logprobs": [null, {"token_id:7": -1.5, "token_id:2": -0.5},
                             [{"token": "token_id:9", "logprob": -0.25}]]
        }}], "usage": {"prompt_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}}});
        let found = positions(&answer).unwrap();
        assert_eq!(found.len(), 3);
        assert_eq!(
            (found[0].token.clone(), found[0].logprob),
            (TokenKey::Id(5), None)
        );
        assert!(found[0].top.is_empty());
        assert_eq!(found[1].top.len(), 2);
        assert_eq!(found[2].top, vec![(TokenKey::Id(9), -0.25)]);
        assert_eq!(cached_prompt_tokens(&answer), 1);
        // Lists of two lengths are not one answer.
        let uneven = json!({"choices": [{"logprobs": {
            "tokens": ["a", "b"], "token_logprobs": [null]}}]});
        assert!(positions(&uneven).is_none());
        assert_eq!(cached_prompt_tokens(&json!({})), 0);
    }

    #[test]
    fn the_echoes_of_several_prompts_go_by_their_index() {
        let answer = json!({"choices": [
            {"index": 1, "logprobs": {"tokens": ["a", "b"], "token_logprobs": [null, -2.0]}},
            {"index": 0, "logprobs": {"tokens": ["a", "c"], "token_logprobs": [null, -1.0]}}
        ]});
        let found = echoed_choices(&answer, 3);
        assert_eq!(found[0].as_ref().unwrap().logprobs, vec![None, Some(-1.0)]);
        assert_eq!(
            found[1].as_ref().unwrap().tokens[1],
            TokenKey::Text("b".into())
        );
        assert!(found[2].is_none(), "no choice for the third prompt");
    }

    #[test]
    fn texts_and_tokenizer_answers_are_read() {
        let answer = json!({"choices": [{"text": "Fine.", "finish_reason": "stop"}]});
        assert_eq!(
            generated(&answer),
            Some(("Fine.".to_string(), Some("stop".to_string())))
        );
        assert_eq!(
            tokenized(&json!({"tokens": [1, 2, 3]})),
            Some(vec![1, 2, 3])
        );
        assert_eq!(tokenized(&json!({"tokens": [1, -2]})), None);
        let tgi = json!([{"id": 4, "text": "A", "start": 0, "stop": 1}, {"id": 9}]);
        assert_eq!(tokenized(&tgi), Some(vec![4, 9]));
        let pieces = json!({"tokens": [{"id": 4, "piece": "A"}]});
        assert_eq!(tokenized(&pieces), Some(vec![4]));
        assert_eq!(tokenized(&json!({"detail": "Not Found"})), None);
    }
}
