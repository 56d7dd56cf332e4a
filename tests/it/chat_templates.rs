//! Our chat templates against transformers' `apply_chat_template` with each family's
//! published Jinja template, on fixed conversations (system, multi-turn, whitespace):
//! the strings must be equal, byte for byte. Fixture: `tests/fixtures/chat_templates`.

use std::path::Path;

use nlg_judge::runtime::card::{ChatSpec, ChatTemplateKind};
use nlg_judge::runtime::ChatTemplate;
use serde_json::Value;

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/chat_templates/chat_templates.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn messages(conversation: &Value) -> Vec<(String, String)> {
    conversation
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn every_family_renders_as_transformers_does() {
    let fixture = fixture();
    let conversations = fixture["conversations"].as_object().unwrap();
    let templates = fixture["templates"].as_object().unwrap();
    assert_eq!(templates.len(), 8);
    let mut compared = 0;
    for (name, entry) in templates {
        let jinja = entry["template"].as_str().unwrap();
        let bos = entry["bos"].as_str().unwrap();
        // Recognised from the checkpoint's Jinja, and named by a card: the same family.
        let ours = ChatTemplate::detect(jinja);
        assert_eq!(ours.family(), entry["family"].as_str().unwrap(), "{name}");
        let kind: ChatTemplateKind = serde_json::from_value(entry["family"].clone()).unwrap();
        let from_card = ChatTemplate::from_spec(&ChatSpec {
            template: kind,
            default_system: ours.default_system().map(str::to_string),
        });
        assert_eq!(from_card, ours, "{name}");
        for (key, expected) in entry["rendered"].as_object().unwrap() {
            let turns = messages(&conversations[key]);
            let refs: Vec<(&str, &str)> = turns
                .iter()
                .map(|(r, c)| (r.as_str(), c.as_str()))
                .collect();
            let Some(expected) = expected.as_str() else {
                // Gemma 2's template refuses system messages; ours folds them in as
                // Gemma 3's does (checked on the gemma3 entry).
                assert_eq!(name, "gemma2", "{key}");
                assert_eq!(refs[0].0, "system", "{name}/{key}");
                continue;
            };
            // The tokenizer adds the beginning-of-text token; we never write it.
            let expected = expected.strip_prefix(bos).unwrap();
            assert!(bos.is_empty() || !expected.contains(bos), "{name}/{key}");
            assert_eq!(
                ours.render_conversation(&refs).unwrap(),
                expected,
                "{name}/{key}"
            );
            // One (system,) user exchange renders the same through `render`.
            if let [("user", user)] | [("system", _), ("user", user)] = refs.as_slice() {
                let system = (refs.len() == 2).then(|| refs[0].1);
                assert_eq!(ours.render(system, user, "X"), format!("{expected}X"));
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 8 * 5 - 3);
}

#[test]
fn published_templates_show_no_differences_but_variants_do() {
    let fixture = fixture();
    for (name, entry) in fixture["templates"].as_object().unwrap() {
        let jinja = entry["template"].as_str().unwrap();
        let found = ChatTemplate::detect(jinja).differences(jinja);
        if name == "gemma2" {
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].contains("refuses system messages"), "{found:?}");
        } else {
            assert!(found.is_empty(), "{name}: {found:?}");
        }
    }
    // Mistral v0.1's template puts a space before [/INST].
    let v01 = "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}";
    let mistral = ChatTemplate::detect(v01);
    assert_eq!(mistral.family(), "mistral");
    let found = mistral.differences(v01);
    assert!(
        found.iter().any(|f| f.contains("\" [/INST]\"")),
        "{found:?}"
    );
    // A card naming ChatML for a checkpoint whose template is Llama 3's.
    let llama3 = fixture["templates"]["llama3"]["template"].as_str().unwrap();
    let chatml = ChatTemplate::ChatMl {
        default_system: None,
    };
    let found = chatml.differences(llama3);
    assert!(found[0].contains("'llama3' family"), "{found:?}");
    // Llama 3.2 writes today's date.
    let llama32 = fixture["templates"]["llama3.1"]["template"]
        .as_str()
        .unwrap()
        .replace("\"26 Jul 2024\"", "strftime_now(\"%d %b %Y\")");
    let found = ChatTemplate::detect(&llama32).differences(&llama32);
    assert!(
        found.iter().any(|f| f.contains("today's date")),
        "{found:?}"
    );
}
