//! Our own Markdown reports (`reproduce`'s report.md, `dhp report`'s tables) as HTML
//! sections of the report page: headings, paragraphs, lists, code blocks and tables
//! with their alignment, `**bold**` and `` `code` ``; links keep their text; an image
//! becomes the SVG figure of that file name when one is given. Every piece of text is
//! escaped: nothing in the Markdown can add markup of its own.

use std::collections::BTreeMap;

use super::Section;

/// Text made safe for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Inline Markdown of one line: escaped text with bold, code, link texts and images.
fn inline(text: &str, figures: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("**") {
            if let Some(end) = after.find("**") {
                out.push_str("<strong>");
                out.push_str(&inline(&after[..end], figures));
                out.push_str("</strong>");
                rest = &after[end + 2..];
                continue;
            }
        }
        if let Some(after) = rest.strip_prefix('`') {
            if let Some(end) = after.find('`') {
                out.push_str("<code>");
                out.push_str(&escape(&after[..end]));
                out.push_str("</code>");
                rest = &after[end + 1..];
                continue;
            }
        }
        let image = rest.starts_with("![");
        if image || rest.starts_with('[') {
            let open = if image { 2 } else { 1 };
            if let Some(close) = rest.find("](") {
                if let Some(end) = rest[close..].find(')') {
                    let label = &rest[open..close];
                    let target = &rest[close + 2..close + end];
                    if image {
                        match figures.get(target) {
                            Some(svg) => {
                                out.push_str("<figure class=\"svg\">");
                                out.push_str(svg);
                                out.push_str("<figcaption>");
                                out.push_str(&escape(label));
                                out.push_str("</figcaption></figure>");
                            }
                            None => {
                                out.push_str("<em>[figure: ");
                                out.push_str(&escape(label));
                                out.push_str("]</em>");
                            }
                        }
                    } else {
                        out.push_str(&inline(label, figures));
                    }
                    rest = &rest[close + end + 1..];
                    continue;
                }
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push_str(&escape(&c.to_string()));
        rest = &rest[c.len_utf8()..];
    }
    out
}

fn cells(line: &str) -> Vec<&str> {
    let trimmed = line.trim().trim_start_matches('|').trim_end_matches('|');
    trimmed.split('|').map(str::trim).collect()
}

/// A Markdown table (header, separator, rows) as HTML.
fn table(lines: &[&str], figures: &BTreeMap<String, String>) -> String {
    let header = cells(lines[0]);
    let right: Vec<bool> = lines
        .get(1)
        .map(|l| cells(l).iter().map(|c| c.ends_with(':')).collect())
        .unwrap_or_default();
    let align = |k: usize| {
        if right.get(k).copied().unwrap_or(false) {
            " class=\"num\""
        } else {
            ""
        }
    };
    let mut out = String::from("<div class=\"table-wrap\"><table><thead><tr>");
    for (k, cell) in header.iter().enumerate() {
        out.push_str(&format!("<th{}>{}</th>", align(k), inline(cell, figures)));
    }
    out.push_str("</tr></thead><tbody>");
    for line in lines.iter().skip(2) {
        out.push_str("<tr>");
        for (k, cell) in cells(line).iter().enumerate() {
            out.push_str(&format!("<td{}>{}</td>", align(k), inline(cell, figures)));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

/// The Markdown as sections, one per `##` heading (text before the first one forms a
/// section titled by the `#` heading, or "Report").
pub fn sections(text: &str, figures: &BTreeMap<String, String>) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    let mut current = Section {
        title: "Report".to_string(),
        html: String::new(),
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    let mut paragraph: Vec<&str> = Vec::new();
    let flush = |paragraph: &mut Vec<&str>, html: &mut String| {
        if !paragraph.is_empty() {
            html.push_str("<p>");
            html.push_str(&inline(&paragraph.join(" "), figures));
            html.push_str("</p>");
            paragraph.clear();
        }
    };
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim();
        if let Some(title) = trimmed.strip_prefix("## ") {
            flush(&mut paragraph, &mut current.html);
            if !current.html.is_empty() {
                sections.push(current);
            }
            current = Section {
                title: title.trim().to_string(),
                html: String::new(),
            };
        } else if let Some(title) = trimmed.strip_prefix("# ") {
            flush(&mut paragraph, &mut current.html);
            current.title = title.trim().to_string();
        } else if let Some(level) = ["#### ", "### "]
            .iter()
            .position(|p| trimmed.starts_with(p))
        {
            flush(&mut paragraph, &mut current.html);
            let tag = if level == 0 { "h4" } else { "h3" };
            let title = trimmed.trim_start_matches('#').trim();
            current
                .html
                .push_str(&format!("<{tag}>{}</{tag}>", inline(title, figures)));
        } else if trimmed.starts_with("```") {
            flush(&mut paragraph, &mut current.html);
            let mut block = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim().starts_with("```") {
                block.push(lines[i]);
                i += 1;
            }
            current.html.push_str("<pre><code>");
            current.html.push_str(&escape(&block.join("\n")));
            current.html.push_str("</code></pre>");
        } else if trimmed.starts_with('|') {
            flush(&mut paragraph, &mut current.html);
            let start = i;
            while i + 1 < lines.len() && lines[i + 1].trim().starts_with('|') {
                i += 1;
            }
            current.html.push_str(&table(&lines[start..=i], figures));
        } else if let Some(item) = trimmed.strip_prefix("- ") {
            flush(&mut paragraph, &mut current.html);
            current.html.push_str("<ul>");
            current
                .html
                .push_str(&format!("<li>{}", inline(item, figures)));
            while i + 1 < lines.len() {
                let next = lines[i + 1].trim();
                if let Some(item) = next.strip_prefix("- ") {
                    current
                        .html
                        .push_str(&format!("</li><li>{}", inline(item, figures)));
                } else if !next.is_empty() && lines[i + 1].starts_with("  ") {
                    current.html.push(' ');
                    current.html.push_str(&inline(next, figures));
                } else {
                    break;
                }
                i += 1;
            }
            current.html.push_str("</li></ul>");
        } else if trimmed.is_empty() {
            flush(&mut paragraph, &mut current.html);
        } else {
            paragraph.push(trimmed);
        }
        i += 1;
    }
    flush(&mut paragraph, &mut current.html);
    if !current.html.is_empty() {
        sections.push(current);
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_figures_and_text_are_escaped_html() {
        let mut figures = BTreeMap::new();
        figures.insert("f.png".to_string(), "<svg id=\"f\"></svg>".to_string());
        let text = "# Title\n\nIntro with **bold** and `a<b>`.\n\n## Results\n\n\
                    | run <x> | D |\n|---|---:|\n| <script>alert(1)</script> | 1.5 |\n\n\
                    ![the chart](f.png)\n\n- one\n- two [link](http://example.invalid)\n";
        let sections = sections(text, &figures);
        assert_eq!(sections.len(), 2);
        assert_eq!(sections[0].title, "Title");
        assert!(sections[0].html.contains("<strong>bold</strong>"));
        assert!(sections[0].html.contains("<code>a&lt;b&gt;</code>"));
        let html = &sections[1].html;
        assert_eq!(sections[1].title, "Results");
        assert!(
            html.contains("<th>run &lt;x&gt;</th><th class=\"num\">D</th>"),
            "{html}"
        );
        assert!(html.contains("<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>"));
        assert!(html.contains("<svg id=\"f\"></svg><figcaption>the chart"));
        assert!(html.contains("<li>one</li><li>two link</li>"), "{html}");
        assert!(!html.contains("http://"));
    }
}
