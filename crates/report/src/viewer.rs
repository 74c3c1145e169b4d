//! The attention viewer: every head's attention on one test input, as rows of token cells
//! shaded by the attention weight from a query position (white 0 to dark blue 1), with the
//! input's swap scores per head. Hovering (or focusing) a token of the input strip makes it
//! the query; the page's inline script ([`SCRIPT`]) redraws every head's row. The page is
//! drawn for the task's query (the last position) before any script runs, so it reads the
//! same without JavaScript.

use std::fmt::Write;

use ropelab_analysis::lens::attention::AttentionView;

use crate::heatmap::shade;
use crate::html::escape;

/// The CSS colour of attention weight `w` (0..=1), the same scale as the heatmaps.
fn colour(w: f64) -> String {
    let c = shade(w, 1.0);
    format!("rgb({},{},{})", c.0, c.1, c.2)
}

/// The viewer of `view` as an HTML fragment; `id` must be unique within the page; each head's
/// type is read from its swap scores at tolerance `gamma`.
pub fn viewer(
    view: &AttentionView,
    id: &str,
    gamma: ropelab_analysis::measure::dynamics::Gamma,
) -> String {
    let n = view.tokens.len();
    let mut html = String::new();
    if n == 0 || view.heads.iter().any(|h| h.pattern.len() != n) {
        let _ = writeln!(
            html,
            "<p class=\"missing\">attention of test input {}: no tokens or a pattern of the wrong size</p>",
            view.sample
        );
        return html;
    }
    let query = n - 1;
    let _ = writeln!(
        html,
        "<div class=\"attn\" id=\"attn-{id}\" data-query=\"{query}\">\n<p>{} task, checkpoint {}, \
         test input {} ({} hop{}): answer <b>{}</b>, model <b>{}</b>. Hover a token of the input \
         to make it the query; each row shows where one head attends from it (darker = more \
         weight). Underlined: the chain from the query to the answer.</p>",
        escape(&view.task),
        view.step,
        view.sample,
        view.hops,
        if view.hops == 1 { "" } else { "s" },
        escape(&view.answer),
        escape(&view.predicted),
    );
    let _ = writeln!(
        html,
        "<p class=\"attn-query\">query: position {query} ({})</p>",
        escape(&view.tokens[query])
    );
    html.push_str("<table class=\"attn-grid\">\n<tr class=\"attn-strip\"><th>input</th>");
    for (pos, token) in view.tokens.iter().enumerate() {
        let mut class = String::from("tok");
        if view.chain.contains(&pos) {
            class.push_str(" chain");
        }
        if pos == query {
            class.push_str(" current");
        }
        let _ = write!(
            html,
            "<td class=\"{class}\" data-pos=\"{pos}\" tabindex=\"0\" title=\"position {pos}\">{}</td>",
            escape(token)
        );
    }
    html.push_str("</tr>\n");
    for (h, head) in view.heads.iter().enumerate() {
        let _ = write!(
            html,
            "<tr class=\"attn-head\" data-head=\"{h}\"><th title=\"s_pos {:.3}, s_sym {:.3} on this input\">L{} H{} \
             <span class=\"kind-{}\">{}</span></th>",
            head.scores.s_pos, head.scores.s_sym, head.layer, head.head, head.kind, head.kind
        );
        let row = &head.pattern[query];
        for (k, token) in view.tokens.iter().enumerate() {
            let w = row.get(k).copied().map_or(0.0, f64::from);
            let ink = if w > 0.5 { "#fff" } else { "#222" };
            let _ = write!(
                html,
                "<td class=\"cell\" style=\"background:{};color:{ink}\" title=\"weight {w:.3}\">{}</td>",
                colour(w),
                escape(token)
            );
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    let rows: Vec<Vec<String>> = view
        .heads
        .iter()
        .map(|h| {
            vec![
                format!("L{} H{}", h.layer, h.head),
                format!("{:.3}", h.scores.s_pos),
                format!("{:.3}", h.scores.s_sym),
                ropelab_analysis::lens::purity::purity(h.scores, gamma).to_string(),
            ]
        })
        .collect();
    html.push_str("<details><summary>swap scores of this input at its query</summary><table>\n");
    html.push_str(&format!(
        "<tr><th>head</th><th>s_pos</th><th>s_sym</th><th>type (gamma {gamma})</th></tr>\n"
    ));
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            let _ = write!(html, "<td>{}</td>", escape(&cell));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table></details>\n");
    // The patterns, for the script: "<" is written as \u003c so the JSON cannot end the element.
    let json = serde_json::json!({
        "tokens": view.tokens,
        "patterns": view.heads.iter().map(|h| &h.pattern).collect::<Vec<_>>(),
    })
    .to_string()
    .replace('<', "\\u003c");
    let _ = writeln!(
        html,
        "<script type=\"application/json\" class=\"attn-data\">{json}</script>\n</div>"
    );
    html
}

/// Styles of the viewer.
pub const STYLE: &str =
    ".attn-grid{border-collapse:collapse;font-family:monospace;font-size:.85em}\
.attn-grid td{border:1px solid #e4e4e4;padding:.25em .4em;text-align:center;min-width:1.6em}\
.attn-grid th{background:#fafafa;white-space:nowrap;font-weight:normal}\
.attn-strip .tok{cursor:pointer;background:#f4f4f4}.attn-strip .chain{text-decoration:underline;\
font-weight:bold}.attn-strip .current{outline:2px solid #d62728}.kind-positional{color:#d62728}\
.kind-symbolic{color:#1f77b4}.kind-mixed{color:#777}.attn-query{font-weight:bold}";

/// The viewer's script: makes every `.attn` viewer of the page follow the hovered token.
/// Plain inline JavaScript, no library.
pub const SCRIPT: &str = r##"(function () {
  function colour(w) {
    var t = Math.max(0, Math.min(1, w));
    function mix(a, b) { return Math.round(a + (b - a) * t); }
    return "rgb(" + mix(255, 8) + "," + mix(255, 48) + "," + mix(255, 107) + ")";
  }
  var boxes = document.querySelectorAll(".attn");
  Array.prototype.forEach.call(boxes, function (box) {
    var data = JSON.parse(box.querySelector("script.attn-data").textContent);
    var strip = box.querySelectorAll(".attn-strip .tok");
    var heads = box.querySelectorAll(".attn-head");
    function show(q) {
      box.setAttribute("data-query", String(q));
      box.querySelector(".attn-query").textContent =
        "query: position " + q + " (" + data.tokens[q] + ")";
      Array.prototype.forEach.call(strip, function (t) {
        t.classList.toggle("current", Number(t.getAttribute("data-pos")) === q);
      });
      Array.prototype.forEach.call(heads, function (row, h) {
        var p = data.patterns[h][q];
        Array.prototype.forEach.call(row.querySelectorAll(".cell"), function (c, k) {
          if (k <= q) {
            var w = p[k];
            c.style.background = colour(w);
            c.style.color = w > 0.5 ? "#fff" : "#222";
            c.title = "weight " + w.toFixed(3);
          } else {
            c.style.background = "#eeeeee";
            c.style.color = "#bbb";
            c.title = "after the query (masked)";
          }
        });
      });
    }
    Array.prototype.forEach.call(strip, function (t) {
      var q = Number(t.getAttribute("data-pos"));
      t.addEventListener("mouseover", function () { show(q); });
      t.addEventListener("focus", function () { show(q); });
    });
  });
})();"##;
