//! The self-contained HTML page: a title, a table of contents, sections with inline SVG
//! figures, tables and attention viewers. Everything is inline (no script, stylesheet, font or
//! image is loaded from anywhere), so the file opens from `file://` with the network off.

use std::fmt::Write;

/// One section of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Anchor id (`#id`), unique within the report.
    pub id: String,
    /// Heading.
    pub title: String,
    /// Body: HTML built with [`escape`] and inline SVG figures.
    pub body: String,
}

impl Section {
    /// An empty section.
    pub fn new(id: impl Into<String>, title: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            title: title.into(),
            body: String::new(),
        }
    }

    /// Appends a paragraph of plain text.
    pub fn text(&mut self, text: &str) {
        let _ = writeln!(self.body, "<p>{}</p>", escape(text));
    }

    /// Appends a "not run" note naming what is missing (a missing input is never an error).
    pub fn not_run(&mut self, what: &str) {
        let _ = writeln!(
            self.body,
            "<p class=\"missing\">not run: {}</p>",
            escape(what)
        );
    }

    /// Appends figures side by side.
    pub fn figures(&mut self, svgs: &[String]) {
        self.body.push_str("<div class=\"figures\">\n");
        for svg in svgs {
            let _ = writeln!(self.body, "<figure>{}</figure>", strip_xml_declaration(svg));
        }
        self.body.push_str("</div>\n");
    }

    /// Appends a table: a header row and rows of plain-text cells.
    pub fn table(&mut self, header: &[&str], rows: &[Vec<String>]) {
        self.body.push_str("<table>\n<tr>");
        for h in header {
            let _ = write!(self.body, "<th>{}</th>", escape(h));
        }
        self.body.push_str("</tr>\n");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                let _ = write!(self.body, "<td>{}</td>", escape(cell));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
    }

    /// Appends an attention viewer (see [`crate::viewer`]); `id` is unique within the page.
    pub fn viewer(
        &mut self,
        view: &ropelab_analysis::lens::attention::AttentionView,
        id: &str,
        gamma: ropelab_analysis::measure::dynamics::Gamma,
    ) {
        self.body.push_str(&crate::viewer::viewer(view, id, gamma));
    }

    /// Appends preformatted text (a config, a command).
    pub fn pre(&mut self, text: &str) {
        let _ = writeln!(self.body, "<pre>{}</pre>", escape(text));
    }
}

/// `text` with the five HTML special characters escaped.
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

fn strip_xml_declaration(svg: &str) -> &str {
    match svg.strip_prefix("<?xml") {
        Some(rest) => rest
            .find("?>")
            .map_or(svg, |end| rest[end + 2..].trim_start()),
        None => svg,
    }
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;\
color:#222}h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}\
nav ol{columns:2}figure{margin:.5em;display:inline-block}.figures{display:flex;flex-wrap:wrap}\
table{border-collapse:collapse;margin:1em 0;font-size:.9em}td,th{border:1px solid #ccc;\
padding:.3em .6em;text-align:left;vertical-align:top}th{background:#f4f4f4}\
pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:.85em}.missing{color:#999;\
font-style:italic}.holds{color:#176317}.does_not_hold{color:#a11}";

/// The whole page: `title`, a line under it, a table of contents and every section.
pub fn page(title: &str, subtitle: &str, sections: &[Section]) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{t}</title>\n<style>{STYLE}{viewer}</style>\n</head>\n<body>\n<h1>{t}</h1>\n<p>{s}</p>\n\
         <nav id=\"contents\"><h2>Contents</h2><ol>\n",
        t = escape(title),
        s = escape(subtitle),
        viewer = crate::viewer::STYLE
    );
    for s in sections {
        let _ = writeln!(
            html,
            "<li><a href=\"#{}\">{}</a></li>",
            escape(&s.id),
            escape(&s.title)
        );
    }
    html.push_str("</ol></nav>\n");
    for s in sections {
        let _ = writeln!(
            html,
            "<section id=\"{}\">\n<h2>{}</h2>\n{}</section>",
            escape(&s.id),
            escape(&s.title),
            s.body
        );
    }
    if sections
        .iter()
        .any(|s| s.body.contains("<div class=\"attn\""))
    {
        let _ = writeln!(html, "<script>{}</script>", crate::viewer::SCRIPT);
    }
    html.push_str("</body>\n</html>\n");
    html
}
