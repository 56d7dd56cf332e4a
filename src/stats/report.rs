//! How a meta-evaluation is reported: the table people read and the JSON object scripts
//! read, for `nlg-judge correlate`, the `--correlate` summary of `compare` and `score`,
//! and the Python package, so that all of them print the same figures.

use anyhow::Result;
use serde_json::{json, Value};

use super::bootstrap::{bootstrap_ci, BootstrapOptions, BootstrapResult};
use super::correlation::Coefficient;
use super::meta::{meta_evaluate, Item, Level, LevelResult, SkipRule};

/// Resamples of the `--correlate` summary of `compare` and `score` (the defaults of
/// `correlate --bootstrap 1000`: seed 0, 95%).
pub const RUN_RESAMPLES: usize = 1000;

/// The summary-level meta-evaluation of a run's `items` against their human scores, as
/// `correlate --level summary --bootstrap 1000` prints it.
pub fn run_summary(items: &[Item]) -> Result<String> {
    let skip = SkipRule::Authors;
    let result = meta_evaluate(items, Level::Summary, skip)?;
    let options = BootstrapOptions {
        resamples: RUN_RESAMPLES,
        confidence: 0.95,
        seed: 0,
    };
    let ci = bootstrap_ci(items, Level::Summary, skip, &options, || {})?;
    Ok(report_table(&result, skip, Some(&ci)))
}

/// What to say when a summary-level result is undefined because every group (context)
/// holds one item: nothing varies within a context, while a pooled correlation (across
/// contexts) is defined.
pub fn single_item_note(result: &LevelResult) -> Option<&'static str> {
    (result.level == Level::Summary
        && result.n_groups == 0
        && result.n_groups_skipped > 0
        && result.n_single_item_groups == result.n_groups_skipped)
        .then_some(
            "every context has a single candidate, so nothing can be correlated within a \
             context; correlate across contexts with --level pooled (nlg-judge correlate \
             --level pooled on the output file)",
        )
}

/// `{"level", "pearson", "spearman", "kendall", "n_groups", "n_items", ...}`; undefined
/// coefficients are `null`. Extra keys: `skip` and `n_groups_skipped` at summary level,
/// `n_systems` at system level, `ci` when bootstrapped.
pub fn report_json(result: &LevelResult, skip: SkipRule, ci: Option<&BootstrapResult>) -> Value {
    let mut report = json!({
        "level": result.level.name(),
        "pearson": result.correlations.pearson,
        "spearman": result.correlations.spearman,
        "kendall": result.correlations.kendall,
        "n_groups": result.n_groups,
        "n_items": result.n_items,
    });
    if result.level == Level::Summary {
        report["skip"] = json!(skip.name());
        report["n_groups_skipped"] = json!(result.n_groups_skipped);
    }
    if let Some(note) = single_item_note(result) {
        report["note"] = json!(note);
    }
    if let Some(n_systems) = result.n_systems {
        report["n_systems"] = json!(n_systems);
    }
    if let Some(ci) = ci {
        let mut intervals = json!({
            "confidence": ci.confidence,
            "resamples": ci.resamples,
            "seed": ci.seed,
            "n_defined": {},
        });
        if let Some(why) = &ci.withheld {
            intervals["no_interval"] = json!(why);
        }
        for coefficient in Coefficient::ALL {
            let interval = ci.get(coefficient);
            intervals[coefficient.name()] = match interval.interval {
                Some(bounds) => json!([bounds.lower, bounds.upper]),
                None => Value::Null,
            };
            intervals["n_defined"][coefficient.name()] = json!(interval.n_defined);
        }
        report["ci"] = intervals;
    }
    report
}

/// The table `nlg-judge correlate` prints.
pub fn report_table(result: &LevelResult, skip: SkipRule, ci: Option<&BootstrapResult>) -> String {
    let mut out = String::new();
    let level = match result.level {
        Level::Summary => format!("summary (skip rule: {})", skip.name()),
        other => other.name().to_string(),
    };
    out.push_str(&format!("level     {level}\n"));
    match result.level {
        Level::Summary => out.push_str(&format!(
            "groups    {} used, {} skipped\n",
            result.n_groups, result.n_groups_skipped
        )),
        _ => out.push_str(&format!("groups    {}\n", result.n_groups)),
    }
    if let Some(n_systems) = result.n_systems {
        out.push_str(&format!("systems   {n_systems}\n"));
    }
    out.push_str(&format!("items     {}\n\n", result.n_items));

    let format_value = |value: Option<f64>| match value {
        Some(value) => format!("{value:.4}"),
        None => "undefined".to_string(),
    };
    match ci {
        Some(ci) if ci.withheld.is_some() => out.push_str(&format!(
            "{:<10}{:>10}   {}\n",
            "",
            "value",
            ci.withheld.as_deref().unwrap_or_default()
        )),
        Some(ci) => out.push_str(&format!(
            "{:<10}{:>10}   {}% CI ({} resamples, seed {})\n",
            "",
            "value",
            // 0.9 * 100 is 90.00000000000001: round away the binary noise.
            (ci.confidence * 1e6).round() / 1e4,
            ci.resamples,
            ci.seed
        )),
        None => out.push_str(&format!("{:<10}{:>10}\n", "", "value")),
    }
    for coefficient in Coefficient::ALL {
        let value = format_value(result.correlations.get(coefficient));
        out.push_str(&format!("{:<10}{value:>10}", coefficient.name()));
        if let Some(ci) = ci.filter(|ci| ci.withheld.is_none()) {
            let interval = ci.get(coefficient);
            match interval.interval {
                Some(bounds) => {
                    out.push_str(&format!("   [{:.4}, {:.4}]", bounds.lower, bounds.upper))
                }
                None => out.push_str("   undefined"),
            }
            if interval.n_defined < ci.resamples {
                out.push_str(&format!(" ({} resamples defined)", interval.n_defined));
            }
        }
        out.push('\n');
    }
    if let Some(note) = single_item_note(result) {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(group: usize, system: usize, pred: f64, human: f64) -> Item {
        Item {
            group: format!("c{group}"),
            system: format!("s{system}"),
            pred,
            human,
        }
    }

    /// One candidate per context: the summary level is undefined, and the table and the
    /// JSON say to pool; with several candidates, no such note.
    #[test]
    fn single_candidate_contexts_point_to_the_pooled_level() {
        let single: Vec<Item> = (0..6)
            .map(|g| item(g, 0, g as f64, (g * 7 % 5) as f64))
            .collect();
        let result = meta_evaluate(&single, Level::Summary, SkipRule::Authors).unwrap();
        let table = report_table(&result, SkipRule::Authors, None);
        assert!(
            table.contains("note: every context has a single candidate"),
            "{table}"
        );
        assert!(report_json(&result, SkipRule::Authors, None)["note"]
            .as_str()
            .unwrap()
            .contains("--level pooled"));
        let several: Vec<Item> = (0..12)
            .map(|k| item(k / 3, k % 3, k as f64, (k * 7 % 5) as f64))
            .collect();
        let result = meta_evaluate(&several, Level::Summary, SkipRule::Authors).unwrap();
        assert!(single_item_note(&result).is_none());
        assert!(report_json(&result, SkipRule::Authors, None)
            .get("note")
            .is_none());
    }

    /// Two contexts: the run summary prints no interval and says why; the JSON has
    /// `null` intervals and the reason.
    #[test]
    fn two_contexts_give_no_interval_anywhere() {
        let items: Vec<Item> = (0..8)
            .map(|k| item(k / 4, k % 4, (k * 3 % 7) as f64, (k * 5 % 4) as f64))
            .collect();
        let text = run_summary(&items).unwrap();
        assert!(
            text.contains("no interval: 2 groups (contexts) only") && !text.contains('['),
            "{text}"
        );
        let result = meta_evaluate(&items, Level::Summary, SkipRule::Authors).unwrap();
        let options = BootstrapOptions {
            resamples: 100,
            confidence: 0.95,
            seed: 0,
        };
        let ci = bootstrap_ci(&items, Level::Summary, SkipRule::Authors, &options, || {}).unwrap();
        let json = report_json(&result, SkipRule::Authors, Some(&ci));
        assert!(json["ci"]["spearman"].is_null());
        assert!(json["ci"]["no_interval"]
            .as_str()
            .unwrap()
            .contains("fewer than 10"));
    }
}
