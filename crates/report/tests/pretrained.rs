//! The pretrained model's figures on hand-made rows, and its section found by content in a
//! directory of `ropelab pretrained` output.

use ropelab_analysis::lens::pretrained::{LayerFailureRow, PromptHead};
use ropelab_analysis::lens::purity::Gamma;
use ropelab_analysis::lens::purity::HeadKind;
use ropelab_pretrained::tasks::SizeRow;
use ropelab_report::figures::Rate;
use ropelab_report::pretrained::{head_type_map, model_failures, task_accuracy};
use ropelab_tasks::TaskKind;

/// The model the hand-made rows name.
const MODEL: &str = "tiny.gguf sha256:0123456789abcdef";

fn head(layer: usize, head: usize, kind: HeadKind) -> PromptHead {
    let (s_pos, s_sym) = match kind {
        HeadKind::Positional => (0.97, 0.03),
        HeadKind::Symbolic => (0.02, 0.99),
        HeadKind::Mixed => (0.5, 0.6),
    };
    PromptHead {
        layer,
        head,
        s_pos,
        s_sym,
        entropy: 1.25,
        pure_0_1: kind,
        pure_0_05: kind,
        freq_mean_plane: 3.0,
        model: MODEL.into(),
        task: Some(TaskKind::Number),
        size: Some(16),
        prompts: Some(10),
        tau: Some(0.1),
        shape: None,
        planes: None,
        longest_prompt: None,
    }
}

fn heads() -> Vec<PromptHead> {
    let kinds = [HeadKind::Positional, HeadKind::Symbolic, HeadKind::Mixed];
    (0..4)
        .flat_map(|l| (0..3).map(move |h| head(l, h, kinds[(l + h) % 3])))
        .collect()
}

#[test]
fn the_head_map_has_one_cell_per_head_coloured_by_type_with_its_scores_on_hover() {
    let svg = head_type_map(&heads(), "SmolLM2 heads", Gamma::DEFAULT);
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let cells: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("class") == Some("head"))
        .collect();
    assert_eq!(cells.len(), 12);
    for (cell, h) in cells.iter().zip(heads()) {
        let title = cell
            .children()
            .find(|c| c.has_tag_name("title"))
            .and_then(|t| t.text())
            .expect("a tooltip");
        assert!(
            title.starts_with(&format!("L{}H{}: {}", h.layer, h.head, h.pure_0_1)),
            "{title}"
        );
        assert!(title.contains(&format!("s_pos {:.3}, s_sym {:.3}", h.s_pos, h.s_sym)));
        let expected = match h.pure_0_1 {
            HeadKind::Positional => "#d62728",
            HeadKind::Symbolic => "#1f77b4",
            HeadKind::Mixed => "#cfcfcf",
        };
        assert_eq!(cell.attribute("fill"), Some(expected));
    }
    // Deeper layers are drawn lower, later heads further right.
    let at = |i: usize, a: &str| cells[i].attribute(a).unwrap().parse::<f64>().unwrap();
    assert!(at(3, "y") > at(0, "y") && at(1, "x") > at(0, "x"));
    assert!(svg.contains("positional (4)") && svg.contains("neither (4)"));
    assert!(head_type_map(&[], "none", Gamma::DEFAULT).contains("no data to draw"));
}

#[test]
fn task_accuracy_has_an_error_bar_per_window_size_and_failures_a_line_per_layer() {
    let row = |task, size, mean, sd| SizeRow {
        task,
        size,
        prompt_tokens: 50 + size,
        mean,
        sd: Some(sd),
        runs: vec![mean - sd / 2f64.sqrt(), mean + sd / 2f64.sqrt()],
        n: 10,
        precision: "f32".into(),
        model: MODEL.into(),
    };
    let rows = vec![
        row(TaskKind::Number, 12, 0.4, 0.1),
        row(TaskKind::Number, 32, 0.2, 0.05),
        row(TaskKind::Number, 64, 0.1, 0.0),
        row(TaskKind::Letter, 12, 0.9, 0.1),
        row(TaskKind::Letter, 32, 0.8, 0.1),
        row(TaskKind::Letter, 64, 0.7, 0.2),
    ];
    let svg = task_accuracy(&rows);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // Two-vertex vertical segments: one error bar per row (the legend's marks are horizontal).
    let bars = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            // In a series colour (grid lines are grey).
            let stroke = n.attribute("stroke").unwrap_or("").to_uppercase();
            stroke == "#1F77B4" || stroke == "#FF7F0E"
        })
        .filter_map(|n| n.attribute("points"))
        .filter(|p| {
            let v: Vec<(f64, f64)> = p
                .split_whitespace()
                .map(|xy| {
                    let (x, y) = xy.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            v.len() == 2 && (v[0].0 - v[1].0).abs() < 0.5
        })
        .count();
    assert_eq!(bars, rows.len(), "{svg}");

    let failures: Vec<LayerFailureRow> = [0, 15]
        .into_iter()
        .flat_map(|layer| {
            [256, 2048].map(|length| LayerFailureRow {
                layer,
                length,
                position_inversion: 0.1,
                position_aliasing: 0.5,
                token_inversion: 0.2,
                token_aliasing: 0.01,
                mu_empirical: 0.0,
                sigma_empirical: 1.0,
                context: 1024,
                format: "f32".into(),
                draws: 100,
                model: MODEL.into(),
            })
        })
        .collect();
    let svg = model_failures(&failures, Rate::TokenInversion);
    assert!(svg.contains("layer 0") && svg.contains("layer 15"));
    assert!(svg.contains("token inversion"));
}

#[test]
fn a_directory_of_pretrained_output_is_reported_by_content() {
    let dir = tempfile::tempdir().unwrap();
    let lines: String = heads()
        .iter()
        .map(|h| serde_json::to_string(h).unwrap() + "\n")
        .collect();
    std::fs::write(dir.path().join("my-heads.jsonl"), &lines).unwrap();
    std::fs::write(
        dir.path().join("acc.csv"),
        format!(
            "task,size,prompt_tokens,mean,sd,runs,n,model\nnumber,12,82,0.5,0.1414213562,0.4;0.6,10,{MODEL}\n"
        ),
    )
    .unwrap();
    let html = ropelab_report::report(dir.path(), "test").unwrap();
    assert!(
        html.contains(&format!("Model: {MODEL}")),
        "the section names its model"
    );
    assert!(html.contains("id=\"pretrained\""));
    // The map says which prompts its heads were scored on (thirteenth pass, S6).
    assert!(
        html.contains("Pretrained heads (my-heads: number task, size 16, 10 prompts, tau 0.1"),
        "the map names its prompts"
    );
    assert!(html.contains("not run: no `pretrained rope-stats` output"));
    assert!(!html.contains("config.toml is missing"));
    assert!(html.contains("<td>number</td><td>12</td><td>82</td><td>0.500</td>"));

    // A damaged file is an error naming it and the line.
    std::fs::write(
        dir.path().join("my-heads.jsonl"),
        lines.clone() + "{\"layer\": 1, \"pure_0_1\": 3}\n",
    )
    .unwrap();
    let err = ropelab_report::report(dir.path(), "test")
        .unwrap_err()
        .to_string();
    assert!(err.contains("my-heads.jsonl: line 13"), "{err}");

    // Lines of one file scored on other prompts are refused; a file from before the prompts
    // were recorded is drawn saying so.
    let mut mixed = heads();
    mixed[3].tau = Some(1e300);
    let text: String = mixed
        .iter()
        .map(|h| serde_json::to_string(h).unwrap() + "\n")
        .collect();
    std::fs::write(dir.path().join("my-heads.jsonl"), text).unwrap();
    let err = ropelab_report::report(dir.path(), "test")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("my-heads.jsonl")
            && err.contains("tau 1e300")
            && err.contains("other prompts"),
        "{err}"
    );
    let old: String = heads()
        .iter()
        .map(|h| {
            let mut v = serde_json::to_value(h).unwrap();
            for key in ["task", "size", "prompts", "tau"] {
                v.as_object_mut().unwrap().remove(key);
            }
            v.to_string() + "\n"
        })
        .collect();
    std::fs::write(dir.path().join("my-heads.jsonl"), old).unwrap();
    let html = ropelab_report::report(dir.path(), "test").unwrap();
    assert!(html.contains("prompts not recorded: written by an older ropelab"));
}

/// Outputs of two models in one directory are refused naming both files, not drawn as one
/// model's section (issue 55); a file naming no model (its `model` column emptied or removed)
/// is refused alone, since it cannot be told apart from another model's (ninth pass).
#[test]
fn outputs_of_two_models_in_one_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let lines: String = heads()
        .iter()
        .map(|h| serde_json::to_string(h).unwrap() + "\n")
        .collect();
    std::fs::write(dir.path().join("a-heads.jsonl"), &lines).unwrap();
    let tasks = |model: &str| {
        format!(
            "task,size,prompt_tokens,mean,sd,runs,n,model\nnumber,12,82,0.5,0.1414213562,0.4;0.6,10,{model}\n"
        )
    };
    std::fs::write(dir.path().join("b-tasks.csv"), tasks(MODEL)).unwrap();
    ropelab_report::report(dir.path(), "test").expect("one model");
    std::fs::write(
        dir.path().join("b-tasks.csv"),
        tasks("other.gguf sha256:fedcba9876543210"),
    )
    .unwrap();
    let err = ropelab_report::report(dir.path(), "test")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("b-tasks.csv") && err.contains("a-heads.jsonl") && err.contains("one model"),
        "{err}"
    );
    let unnamed = [
        tasks(""),
        "task,size,prompt_tokens,mean,sd,runs\nnumber,12,82,0.5,0.1414213562,0.4;0.6\n".to_owned(),
    ];
    for text in unnamed {
        std::fs::remove_file(dir.path().join("a-heads.jsonl")).ok();
        std::fs::write(dir.path().join("b-tasks.csv"), text).unwrap();
        let err = ropelab_report::report(dir.path(), "test")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("b-tasks.csv") && err.contains("does not name the model"),
            "{err}"
        );
    }
}

/// Damage and mixed settings in pretrained outputs are refused naming the file, not drawn or
/// reported as never run (eighth pass, P010, P013, P017, P021, P022).
#[test]
fn damaged_or_mixed_pretrained_outputs_are_refused() {
    let rope = |model: &str, format: &str, rate: &str| {
        format!(
            "layer,length,position_inversion,position_aliasing,token_inversion,token_aliasing,\
             mu_empirical,sigma_empirical,format,draws,model\n\
             0,64,{rate},0.2,0.3,0.01,0,1,{format},100,{model}\n"
        )
    };
    let report = |files: &[(&str, String)]| {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        ropelab_report::report(dir.path(), "test").map_err(|e| e.to_string())
    };
    report(&[("a.csv", rope(MODEL, "f32", "0.1"))]).expect("a good file");
    for (files, want) in [
        (
            vec![("a.csv", rope(MODEL, "f32", "5.0"))],
            "no rate in [0, 1]",
        ),
        (
            vec![("a.csv", rope(MODEL, "f32", "NaN"))],
            "no rate in [0, 1]",
        ),
        (
            vec![
                ("a.csv", rope(MODEL, "f32", "0.1")),
                ("b.csv", rope(MODEL, "bf16", "0.1")),
            ],
            "number format and draws",
        ),
        (
            vec![
                ("a.csv", rope(MODEL, "f32", "0.1")),
                ("b.csv", rope(MODEL, "f32", "0.2")),
            ],
            "in another `pretrained rope-stats` table",
        ),
        (
            vec![("a.csv", rope(&MODEL[..MODEL.len() - 3], "f32", "0.1"))],
            "no identity ropelab writes",
        ),
        (
            vec![("a.csv", rope(MODEL, "f32", "0.1").trim_end().to_owned())],
            "cut off",
        ),
        (
            vec![(
                "h.jsonl",
                "{\"layer\": 0, \"pure_0_1\": \"positional\", oops\n".to_owned(),
            )],
            "h.jsonl: line 1 is not valid JSON",
        ),
    ] {
        let err = report(&files).expect_err(want);
        assert!(err.contains(want), "{want}: {err}");
    }
    // Accuracy tables of one model in two precisions are not one curve.
    let tasks = |size: usize, precision: &str| {
        format!(
            "task,size,prompt_tokens,mean,sd,runs,n,precision,model\n\
             number,{size},82,0.5,0.1414213562,0.4;0.6,10,{precision},{MODEL}\n"
        )
    };
    let err = report(&[("a.csv", tasks(4, "f32")), ("b.csv", tasks(6, "bf16"))]).unwrap_err();
    assert!(err.contains("precision"), "{err}");
    report(&[("a.csv", tasks(4, "f32")), ("b.csv", tasks(6, "f32"))]).expect("one precision");
    // Points of other prompt counts per run are not one curve (fourteenth pass, S-C).
    let counted = |size: usize, n: usize| {
        format!(
            "task,size,prompt_tokens,mean,sd,runs,n,precision,model\n\
             number,{size},82,0.5,0.1414213562,0.4;0.6,{n},f32,{MODEL}\n"
        )
    };
    let err = report(&[("a.csv", counted(4, 5)), ("b.csv", counted(6, 10))]).unwrap_err();
    assert!(err.contains("prompts per run"), "{err}");
    report(&[("a.csv", counted(4, 10)), ("b.csv", counted(6, 10))]).expect("one count");
    // A run's accuracy is a whole count over its prompts (twenty-fifth pass, B-S4).
    let err = report(&[("a.csv", counted(4, 9))]).unwrap_err();
    assert!(err.contains("0.4") && err.contains("of 9 prompts"), "{err}");
    // Accuracies over no prompts (twenty-sixth pass, B-S-C).
    let err = report(&[("a.csv", counted(4, 0))]).unwrap_err();
    assert!(err.contains("records 0 prompts per run"), "{err}");
    // One window twice in one table is named as that table's (twenty-fifth pass, B-U3).
    let twice = counted(4, 10) + counted(4, 10).lines().nth(1).unwrap() + "\n";
    let err = report(&[("a.csv", twice)]).unwrap_err();
    assert!(
        err.contains("a.csv") && err.contains("two rows in this table"),
        "{err}"
    );
    // Nor are means over other numbers of runs, in two files or in one.
    let ran = |size: usize, runs: &str| {
        format!(
            "task,size,prompt_tokens,mean,sd,runs,n,precision,model\n\
             number,{size},82,0,,{runs},9,f32,{MODEL}\n"
        )
    };
    let err = report(&[("a.csv", ran(4, "0;0;0")), ("b.csv", ran(6, "0;0"))]).unwrap_err();
    assert!(
        err.contains("runs per window size") && err.contains("a.csv") && err.contains("b.csv"),
        "{err}"
    );
    let one = ran(4, "0;0;0") + ran(6, "0;0").lines().nth(1).unwrap() + "\n";
    let err = report(&[("a.csv", one)]).unwrap_err();
    // Worded as two settings, not as a count of two (eighteenth pass, F3e).
    assert!(
        err.contains("a.csv")
            && err.contains("different runs per window size settings, \"3\" and \"2\"")
            && !err.contains("with two"),
        "{err}"
    );
    report(&[("a.csv", ran(4, "0;0")), ("b.csv", ran(6, "0;0"))]).expect("one run count");
    // A table with its header alone is named, not reported as never run (S-I).
    let err = report(&[(
        "t.csv",
        "task,size,prompt_tokens,mean,sd,runs,n,precision,model\n".to_owned(),
    )])
    .unwrap_err();
    assert!(err.contains("t.csv") && err.contains("no rows"), "{err}");
    // A score file missing a head, or with one past the others, is refused (S-A, S-B).
    let lines: Vec<String> = heads()
        .iter()
        .map(|h| serde_json::to_string(h).unwrap())
        .collect();
    let cut = lines[..lines.len() - 1].join("\n") + "\n";
    let err = report(&[("s.jsonl", cut)]).unwrap_err();
    assert!(err.contains("is missing from the"), "{err}");
    let mut wide = heads();
    wide[1].head = 99;
    let text: String = wide
        .iter()
        .map(|h| serde_json::to_string(h).unwrap() + "\n")
        .collect();
    let err = report(&[("s.jsonl", text)]).unwrap_err();
    assert!(err.contains("is missing from the"), "{err}");
    // A file that records its model's shape holds that whole grid: a whole layer, or the
    // same head of every layer, cut out is refused; a head past the shape too (fifteenth pass,
    // S-1).
    let shaped = |keep: &dyn Fn(&PromptHead) -> bool| -> String {
        let all = heads();
        let layers = all.iter().map(|h| h.layer + 1).max().unwrap();
        let per = all.iter().map(|h| h.head + 1).max().unwrap();
        all.into_iter()
            .map(|mut h| {
                h.shape = Some((layers, per));
                h
            })
            .filter(|h| keep(h))
            .map(|h| serde_json::to_string(&h).unwrap() + "\n")
            .collect()
    };
    report(&[("s.jsonl", shaped(&|_| true))]).expect("a whole grid");
    let last_layer = heads().iter().map(|h| h.layer).max().unwrap();
    assert!(last_layer > 0);
    for cut in [shaped(&|h| h.layer != last_layer), shaped(&|h| h.head != 2)] {
        let err = report(&[("s.jsonl", cut)]).unwrap_err();
        assert!(err.contains("is missing from the"), "{err}");
    }
    let mut past = shaped(&|_| true);
    past = past.replacen("\"layer\":0,", "\"layer\":40,", 1);
    let err = report(&[("s.jsonl", past)]).unwrap_err();
    assert!(err.contains("past the model's"), "{err}");
    // A mean plane index and an entropy no measurement gives (twenty-fifth pass, B-S5).
    let bounded = |edit: &dyn Fn(&mut PromptHead)| -> String {
        heads()
            .into_iter()
            .enumerate()
            .map(|(i, mut h)| {
                (h.planes, h.longest_prompt) = (Some(32), Some(83));
                if i == 1 {
                    edit(&mut h);
                }
                serde_json::to_string(&h).unwrap() + "\n"
            })
            .collect()
    };
    report(&[("s.jsonl", bounded(&|_| {}))]).expect("bounded rows");
    for (edit, says) in [
        (
            &(|h: &mut PromptHead| h.freq_mean_plane = -5.0) as &dyn Fn(&mut PromptHead),
            "is no mean of plane indices",
        ),
        (
            &|h: &mut PromptHead| h.freq_mean_plane = 40.0,
            "beyond the 32 rotary planes",
        ),
        (&|h: &mut PromptHead| h.entropy = 50.0, "exceeds ln(83)"),
        // The bounds are the file's: one row's own planes or longest prompt is refused
        // (twenty-sixth pass, B-S-D).
        (
            &|h: &mut PromptHead| (h.planes, h.freq_mean_plane) = (Some(100), 50.0),
            "records 100 rotary planes",
        ),
        (
            &|h: &mut PromptHead| (h.longest_prompt, h.entropy) = (Some(100_000), 11.0),
            "a longest prompt of 100000 tokens",
        ),
    ] {
        let err = report(&[("s.jsonl", bounded(edit))]).unwrap_err();
        assert!(err.contains(says), "{says}: {err}");
    }
}

/// A table the report does not recognise (a `pretrained rope-stats` CSV whose header was
/// changed) is named in the refusal, not passed over in silence (ninth pass, F4c).
#[test]
fn an_unrecognised_table_is_named_when_nothing_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rs.csv"),
        format!(
            "layer ,length,position_inversion,position_aliasing,token_inversion,token_aliasing,\
             mu_empirical,sigma_empirical,format,draws,model\n\
             0,64,0.1,0.2,0.3,0.01,0,1,f32,100,{MODEL}\n"
        ),
    )
    .unwrap();
    let err = ropelab_report::report(dir.path(), "test")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rs.csv") && err.contains("none ropelab writes"),
        "{err}"
    );
}

/// The report says in what format and with how many draws the failure rates were measured,
/// and which lengths lie beyond the model's context (tenth pass, S3).
#[test]
fn rope_statistics_beyond_the_context_are_called_an_extrapolation() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rs.csv"),
        format!(
            "layer,length,position_inversion,position_aliasing,token_inversion,token_aliasing,\
             mu_empirical,sigma_empirical,context,format,draws,model\n\
             0,64,0.125,0.25,0.5,0.125,0,1,128,bf16,8,{MODEL}\n\
             0,512,0.125,0.25,0.5,0.125,0,1,128,bf16,8,{MODEL}\n"
        ),
    )
    .unwrap();
    let page = ropelab_report::report(dir.path(), "test").unwrap();
    assert!(
        page.contains("measured in bf16 with 8 draws"),
        "no settings"
    );
    assert!(
        page.contains("M = 512 lie beyond the model") && page.contains("context of 128 tokens"),
        "no extrapolation note"
    );
    // Every layer at every length: a row moved to another layer breaks the grid (twenty-sixth
    // pass, B-S-E).
    std::fs::write(
        dir.path().join("rs.csv"),
        format!(
            "layer,length,position_inversion,position_aliasing,token_inversion,token_aliasing,\
             mu_empirical,sigma_empirical,context,format,draws,model\n\
             0,64,0.125,0.25,0.5,0.125,0,1,128,bf16,8,{MODEL}\n\
             1,64,0.125,0.25,0.5,0.125,0,1,128,bf16,8,{MODEL}\n\
             7,512,0.125,0.25,0.5,0.125,0,1,128,bf16,8,{MODEL}\n"
        ),
    )
    .unwrap();
    let err = ropelab_report::report(dir.path(), "test")
        .unwrap_err()
        .to_string();
    assert!(err.contains("layer 0 has no row at M = 512"), "{err}");
    // A rate is a mean of whole counts over its draws (twenty-seventh pass): 0.0251 of 64
    // distances over 8 draws is none.
    std::fs::write(
        dir.path().join("rs.csv"),
        format!(
            "layer,length,position_inversion,position_aliasing,token_inversion,token_aliasing,\
             mu_empirical,sigma_empirical,context,format,draws,model\n\
             0,64,0.125,0.0251,0.5,0.125,0,1,128,bf16,8,{MODEL}\n"
        ),
    )
    .unwrap();
    let err = ropelab_report::report(dir.path(), "test")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("position_aliasing 0.0251 is no mean over 8 draws"),
        "{err}"
    );
}

/// A file a study's pretrained stage measured (listed in `pretrained/measured.json`) and then
/// deleted is named, not left out of the report in silence.
#[test]
fn a_file_the_study_measured_and_that_is_gone_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("note.txt"), "a study's table\n").unwrap();
    ropelab_io::Ledger::finish(root, "note.txt", "a key").unwrap();
    let stage = root.join("pretrained");
    let tasks = |task: &str| {
        format!(
            "task,size,prompt_tokens,mean,sd,runs,n,precision,model\n\
             {task},4,82,0.5,0.1414213562,0.4;0.6,10,f32,{MODEL}\n"
        )
    };
    for task in ["letter", "number"] {
        let path = stage.join(format!("tasks-{task}.csv"));
        ropelab_analysis::claims::files::record_table(&path, "pretrained", tasks(task).as_bytes())
            .unwrap();
    }
    let html = ropelab_report::report(root, "test").expect("every listed file");
    assert!(html.contains("<td>number</td>"));
    std::fs::remove_file(stage.join("tasks-number.csv")).unwrap();
    let err = ropelab_report::report(root, "test")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tasks-number.csv")
            && err.contains("measured.json but missing")
            && err.contains("ropelab reproduce")
            && !err.contains('\n'),
        "{err}"
    );
}

/// A table whose file name is no UTF-8 is named with its bytes escaped, so the file can be
/// found from the refusal (twenty-first pass, U-A).
#[test]
fn a_file_name_that_is_no_utf8_is_shown_escaped() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let table = |precision: &str| {
        format!(
            "task,size,prompt_tokens,mean,sd,runs,n,precision,model\n\
             number,4,82,0.5,0.1414213562,0.4;0.6,10,{precision},{MODEL}\n"
        )
    };
    std::fs::write(dir.path().join("a.csv"), table("f32")).unwrap();
    let odd = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"\xff\xfe.csv"));
    std::fs::write(&odd, table("bf16")).unwrap();
    let err = ropelab_report::report(dir.path(), "test")
        .unwrap_err()
        .to_string();
    assert!(err.contains("\\xff\\xfe.csv"), "{err}");
}
