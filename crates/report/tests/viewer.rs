//! The attention viewer on hand-made views: drawn for the task's query before any script runs,
//! tokens escaped, the embedded data unable to close its element, and the page's script
//! present only when a viewer is.

use ropelab_analysis::lens::attention::{AttentionView, HeadAttention};
use ropelab_analysis::lens::purity::HeadKind;
use ropelab_analysis::lens::swap::SwapScores;
use ropelab_analysis::measure::dynamics::Gamma;
use ropelab_report::html::{page, Section};
use ropelab_report::viewer::{viewer, SCRIPT};

fn view(tokens: &[&str]) -> AttentionView {
    let n = tokens.len();
    // Head 0 attends to key 0 from every query; head 1 uniformly.
    let one_hot = (0..n)
        .map(|q| (0..=q).map(|k| if k == 0 { 1.0 } else { 0.0 }).collect())
        .collect();
    let uniform = (0..n).map(|q| vec![1.0 / (q + 1) as f32; q + 1]).collect();
    let head = |h, pattern, kind| HeadAttention {
        layer: 0,
        head: h,
        pattern,
        scores: SwapScores {
            s_pos: 0.98,
            s_sym: 0.02,
        },
        kind,
    };
    AttentionView {
        task: "letter".into(),
        step: 30,
        sample: 4,
        tokens: tokens.iter().map(|t| t.to_string()).collect(),
        chain: vec![n - 1, 0],
        answer: "a1".into(),
        predicted: "a1".into(),
        hops: 1,
        heads: vec![
            head(0, one_hot, HeadKind::Positional),
            head(1, uniform, HeadKind::Mixed),
        ],
        run: "sha256:0123456789abcdef".into(),
    }
}

/// The inline `background:` colours of the cells of head row `h`.
fn row_colours(html: &str, h: usize) -> Vec<String> {
    let start = html
        .find(&format!("data-head=\"{h}\""))
        .expect("the head's row");
    let row = &html[start..start + html[start..].find("</tr>").unwrap()];
    row.split("background:")
        .skip(1)
        .map(|s| s[..s.find(';').unwrap()].to_owned())
        .collect()
}

#[test]
fn the_viewer_is_drawn_for_the_query_and_keeps_its_data_inside_its_script() {
    let tokens = ["b3", "</script><b>", "a1", "c2"];
    let html = viewer(&view(&tokens), "t", Gamma::DEFAULT);
    // Initial state: the last position is the query; head 0 puts all weight on key 0.
    assert!(html.contains("data-query=\"3\""));
    let dark = "rgb(8,48,107)";
    let white = "rgb(255,255,255)";
    assert_eq!(row_colours(&html, 0), [dark, white, white, white]);
    // Uniform over 4 keys: a quarter of the way to dark blue, in every cell.
    let quarter = "rgb(193,203,218)";
    assert_eq!(row_colours(&html, 1), [quarter; 4]);
    // The odd token is escaped in the cells and cannot end the data's script element.
    assert!(html.contains("&lt;/script&gt;&lt;b&gt;"));
    assert_eq!(html.matches("</script>").count(), 1, "{html}");
    let data_start = html.find("class=\"attn-data\">").unwrap() + 18;
    let data_end = html[data_start..].find("</script>").unwrap() + data_start;
    let data: serde_json::Value = serde_json::from_str(&html[data_start..data_end]).unwrap();
    assert_eq!(data["tokens"][1], "</script><b>");
    assert_eq!(data["patterns"][1][3][2], 0.25);
    // The chain is underlined; scores are listed.
    assert_eq!(html.matches("tok chain").count(), 2);
    assert!(html.contains("<td>0.980</td><td>0.020</td><td>positional</td>"));
}

#[test]
fn a_malformed_view_is_a_note_and_the_script_comes_only_with_a_viewer() {
    let mut bad = view(&["a", "b", "c"]);
    bad.heads[1].pattern.pop();
    let html = viewer(&bad, "bad", Gamma::DEFAULT);
    assert!(html.contains("class=\"missing\""), "{html}");
    assert!(!html.contains("attn-data"));

    let mut with = Section::new("attention", "attention");
    with.viewer(&view(&["a", "b", "c"]), "ok", Gamma::DEFAULT);
    let plain = Section::new("other", "other");
    assert!(page("t", "s", &[with, plain.clone()]).contains(SCRIPT));
    assert!(!page("t", "s", &[plain]).contains("<script"));
}
