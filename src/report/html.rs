//! The report as one HTML page: inline styles and script, the data as JSON inside a
//! `<script type="application/json">` element, the sections' tables and figures as
//! HTML. A content security policy forbids every load from elsewhere (no network, even
//! through something in the data), so the page works offline and keeps its data to
//! itself.
//!
//! The JSON is escaped for its element: `<`, `>` and `&` as `\u003c`..., and the line
//! separators JavaScript once rejected, so no text in it (candidate texts are arbitrary
//! user data) can close the element or be read as markup; the script puts every text
//! into the page as text.

use anyhow::{Context as _, Result};

use super::markdown::escape;
use super::Report;

const STYLE: &str = include_str!("assets/report.css");
const SCRIPT: &str = include_str!("assets/report.js");

/// The content security policy: inline styles and scripts of this page only, images
/// from data URIs, nothing else from anywhere.
pub const POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

/// `json` made safe inside a `<script>` element.
pub fn script_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The whole page.
pub fn render(report: &Report) -> Result<String> {
    let data = serde_json::to_string(report).context("cannot serialise the report's data")?;
    let mut page = String::with_capacity(data.len() + STYLE.len() + SCRIPT.len() + 4096);
    page.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    page.push_str(&format!(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY}\">\n"
    ));
    page.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    page.push_str("<meta name=\"generator\" content=\"nlg-judge ");
    page.push_str(env!("CARGO_PKG_VERSION"));
    page.push_str("\">\n<title>");
    page.push_str(&escape(&report.title));
    page.push_str("</title>\n<style>\n");
    page.push_str(STYLE);
    page.push_str("</style>\n</head>\n<body>\n<header class=\"top\">\n<div class=\"brand\">nlg-judge report</div>\n<h1>");
    page.push_str(&escape(&report.title));
    page.push_str("</h1>\n<nav class=\"tabs\" id=\"tabs\"></nav>\n</header>\n<main>\n<div id=\"main\"><noscript><p>This report draws its pages with JavaScript; please allow scripts for this file.</p></noscript></div>\n");
    if !report.sections.is_empty() {
        page.push_str("<div id=\"sections\">\n");
        for section in &report.sections {
            page.push_str("<section class=\"card\"><h2>");
            page.push_str(&escape(&section.title));
            page.push_str("</h2>\n");
            page.push_str(&section.html);
            page.push_str("</section>\n");
        }
        page.push_str("</div>\n");
    }
    page.push_str("</main>\n<div class=\"tooltip\" id=\"tooltip\" role=\"tooltip\"></div>\n");
    page.push_str("<footer>Made by nlg-judge ");
    page.push_str(env!("CARGO_PKG_VERSION"));
    page.push_str(" · self-contained: this file loads nothing from elsewhere</footer>\n");
    page.push_str("<script type=\"application/json\" id=\"report-data\">");
    page.push_str(&script_safe(&data));
    page.push_str("</script>\n<script>\n");
    page.push_str(SCRIPT);
    page.push_str("</script>\n</body>\n</html>\n");
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_cannot_close_its_element() {
        let text = serde_json::to_string("</script><script>alert(1)</script>&\u{2028}").unwrap();
        let safe = script_safe(&text);
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        let back: String = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, "</script><script>alert(1)</script>&\u{2028}");
    }
}
