//! A protocol's texts as Jinja templates (the language of chat templates), and the named
//! fields they are rendered with. Templates are compiled when the protocol is read and
//! rendered once with every field present and once with every optional field absent, so
//! that a syntax error or a misspelt field is an error naming its place at load, not in
//! the middle of a run. Undefined fields are errors; absent optional fields are `none`.
//!
//! The fields (see `rubrics/protocols/README.md`):
//!
//! | field | value |
//! |---|---|
//! | `response` | the output graded (absolute) |
//! | `response_a`, `response_b` | the outputs compared (relative) |
//! | `context` | the input the outputs answer (the article, the dialogue); or none |
//! | `reference` | the reference answer; or none |
//! | `instruction` | the rubric's instruction to the candidates; or none |
//! | `instruction_with_input` | the instruction, a blank line and the context, whichever there are |
//! | `inputs` | `[{name, value}]`: instruction, context and reference where present, named "instruction" and by the rubric's headings |
//! | `criterion`, `criterion_name` | the rubric's question and its name ("Coherence") |
//! | `levels` | `[{score, description}]`, lowest first |
//! | `scale_low`, `scale_high` | the rubric's scale |
//! | `source_heading`, `reference_heading`, `output_heading` | the rubric's headings ("Source Text", "Reference Summary", "Summary") |
//! | `output_noun`, `output_noun_plural` | "summary", "summaries" |
//!
//! One filter is added to Jinja's: `tag` ("Source Text" → `source_text`).

use anyhow::Result;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

use super::{bad, Grading, ProtocolFile, RubricPrompt, RubricProtocol};
use crate::judge::rubric::Rubric;

/// What one output is graded on (absolute grading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RubricInput<'a> {
    pub context: Option<&'a str>,
    pub reference: Option<&'a str>,
    pub output: &'a str,
}

/// What two outputs are compared on (relative grading), shown as A and B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairInput<'a> {
    pub context: Option<&'a str>,
    pub reference: Option<&'a str>,
    pub a: &'a str,
    pub b: &'a str,
}

/// The template names of a form's texts.
fn names(grading: Grading) -> [&'static str; 2] {
    match grading {
        Grading::Absolute => ["absolute.system", "absolute.user"],
        Grading::Relative => ["relative.system", "relative.user"],
    }
}

/// The environment holding `file`'s templates, named `absolute.user` and so on.
pub(super) fn compile(file: &ProtocolFile) -> Result<Environment<'static>> {
    let mut env = Environment::new();
    env.set_keep_trailing_newline(true);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.add_filter("tag", |name: String| tag(&name));
    for (grading, form) in [
        (Grading::Absolute, &file.absolute),
        (Grading::Relative, &file.relative),
    ] {
        let Some(form) = form else { continue };
        let [system, user] = names(grading);
        for (name, source) in [(system, form.system.as_ref()), (user, Some(&form.user))] {
            if let Some(source) = source {
                env.add_template_owned(name, source.clone())
                    .map_err(|e| bad(template_error(name, &e)))?;
                let template = env.get_template(name).expect("just added");
                let known = fields(grading);
                let mut unknown: Vec<String> = template
                    .undeclared_variables(false)
                    .into_iter()
                    .filter(|field| !known.contains(&field.as_str()))
                    .collect();
                if !unknown.is_empty() {
                    unknown.sort();
                    return Err(bad(format!(
                        "{name}: no field {} (the fields are {})",
                        unknown
                            .iter()
                            .map(|f| format!("`{f}`"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        known.join(", ")
                    )));
                }
            }
        }
    }
    Ok(env)
}

/// The fields of every form.
const COMMON_FIELDS: [&str; 15] = [
    "context",
    "reference",
    "instruction",
    "instruction_with_input",
    "inputs",
    "criterion",
    "criterion_name",
    "levels",
    "scale_low",
    "scale_high",
    "source_heading",
    "reference_heading",
    "output_heading",
    "output_noun",
    "output_noun_plural",
];

/// The fields a form's templates may read.
fn fields(grading: Grading) -> Vec<&'static str> {
    let mut fields = match grading {
        Grading::Absolute => vec!["response"],
        Grading::Relative => vec!["response_a", "response_b"],
    };
    fields.extend(COMMON_FIELDS);
    fields
}

/// `error` in template `name`, with its line.
fn template_error(name: &str, error: &minijinja::Error) -> String {
    let line = error
        .line()
        .map(|line| format!(" (line {line} of the template)"))
        .unwrap_or_default();
    let detail = error.detail().unwrap_or("");
    let kind = error.kind();
    if detail.is_empty() {
        format!("{name}{line}: {kind}")
    } else {
        format!("{name}{line}: {kind}: {detail}")
    }
}

/// A heading as a tag name: lower case, spaces as underscores.
fn tag(name: &str) -> String {
    name.to_lowercase().replace(' ', "_")
}

/// Render every template of `protocol` with every field present and with the optional
/// ones absent.
pub(super) fn probe(protocol: &RubricProtocol) -> Result<()> {
    let rubric =
        Rubric::builtin("coherence", crate::judge::Task::Summary).expect("a built-in rubric");
    for full in [true, false] {
        let (context, reference) = if full {
            (Some("context"), Some("reference"))
        } else {
            (None, None)
        };
        let mut rubric = rubric.clone();
        if !full {
            rubric.instruction = None;
        }
        if protocol.file().absolute.is_some() {
            let fields = RubricInput {
                context,
                reference,
                output: "output",
            };
            render_absolute(protocol, &rubric, &fields)?;
        }
        if protocol.file().relative.is_some() {
            let fields = PairInput {
                context,
                reference,
                a: "a",
                b: "b",
            };
            render_relative(protocol, &rubric, &fields)?;
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct Level<'a> {
    score: i64,
    description: &'a str,
}

#[derive(Serialize)]
struct Input<'a> {
    name: &'a str,
    value: &'a str,
}

/// The fields every form has.
#[derive(Serialize)]
struct Common<'a> {
    context: Option<&'a str>,
    reference: Option<&'a str>,
    instruction: Option<&'a str>,
    instruction_with_input: String,
    inputs: Vec<Input<'a>>,
    criterion: &'a str,
    criterion_name: &'a str,
    levels: Vec<Level<'a>>,
    scale_low: i64,
    scale_high: i64,
    source_heading: &'a str,
    reference_heading: &'a str,
    output_heading: &'a str,
    output_noun: String,
    output_noun_plural: String,
}

fn common<'a>(
    rubric: &'a Rubric,
    context: Option<&'a str>,
    reference: Option<&'a str>,
) -> Common<'a> {
    let sections = &rubric.sections;
    let instruction = rubric.instruction.as_deref();
    let noun = sections.output.to_lowercase();
    Common {
        context,
        reference,
        instruction,
        instruction_with_input: [instruction, context]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("\n\n"),
        inputs: [
            ("instruction", instruction),
            (sections.source.as_str(), context),
            (sections.reference.as_str(), reference),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.map(|value| Input { name, value }))
        .collect(),
        criterion: &rubric.criterion,
        criterion_name: &rubric.name,
        levels: rubric
            .levels()
            .map(|(score, description)| Level { score, description })
            .collect(),
        scale_low: rubric.scale.low(),
        scale_high: rubric.scale.high(),
        source_heading: &sections.source,
        reference_heading: &sections.reference,
        output_heading: &sections.output,
        output_noun_plural: plural_of(&noun),
        output_noun: noun,
    }
}

#[derive(Serialize)]
struct AbsoluteFields<'a> {
    #[serde(flatten)]
    common: Common<'a>,
    response: &'a str,
}

#[derive(Serialize)]
struct RelativeFields<'a> {
    #[serde(flatten)]
    common: Common<'a>,
    response_a: &'a str,
    response_b: &'a str,
}

/// The absolute form's prompt grading `fields` on `rubric`.
pub fn render_absolute(
    protocol: &RubricProtocol,
    rubric: &Rubric,
    fields: &RubricInput,
) -> Result<RubricPrompt> {
    protocol.absolute()?;
    let values = AbsoluteFields {
        common: common(rubric, fields.context, fields.reference),
        response: fields.output,
    };
    render(protocol, Grading::Absolute, &values)
}

/// The relative form's prompt comparing `fields`' outputs on `rubric`.
pub fn render_relative(
    protocol: &RubricProtocol,
    rubric: &Rubric,
    fields: &PairInput,
) -> Result<RubricPrompt> {
    protocol.relative()?;
    let values = RelativeFields {
        common: common(rubric, fields.context, fields.reference),
        response_a: fields.a,
        response_b: fields.b,
    };
    render(protocol, Grading::Relative, &values)
}

fn render(
    protocol: &RubricProtocol,
    grading: Grading,
    values: &impl Serialize,
) -> Result<RubricPrompt> {
    let env = protocol.templates();
    let [system, user] = names(grading);
    let one = |name: &str| -> Result<Option<String>> {
        match env.get_template(name) {
            Ok(template) => template.render(values).map(Some).map_err(|e| {
                bad(format!(
                    "protocol {}: {}",
                    protocol.name(),
                    template_error(name, &e)
                ))
            }),
            Err(_) => Ok(None),
        }
    };
    Ok(RubricPrompt {
        system: one(system)?,
        user: one(user)?.unwrap_or_default(),
    })
}

/// "summaries", "responses", "texts", "stories".
pub fn plural_of(noun: &str) -> String {
    match noun.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{stem}ies"),
        _ if noun.ends_with('s') || noun.ends_with("sh") || noun.ends_with("ch") => {
            format!("{noun}es")
        }
        _ => format!("{noun}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_of_the_output_nouns() {
        assert_eq!(plural_of("summary"), "summaries");
        assert_eq!(plural_of("response"), "responses");
        assert_eq!(plural_of("story"), "stories");
        assert_eq!(plural_of("essay"), "essays");
        assert_eq!(plural_of("text"), "texts");
    }

    #[test]
    fn headings_become_tags() {
        assert_eq!(tag("Source Text"), "source_text");
        assert_eq!(tag("Summary"), "summary");
    }
}
