// Shared by the list-flag test (`tests/list_flags.rs`) and the command tree's unit test
// (`src/main.rs`), which checks that every list flag of every command is here.

/// Every flag that takes a list (comma-separated or repeated), as `(command path, flag)`,
/// with arguments that repeat a value in it. `{run}` is a trained tiny run, `{out}` an output
/// path that must not be written.
pub const LIST_FLAGS: &[(&str, &str, &[&str])] = &[
    (
        "bench prompts",
        "--sizes",
        &["bench", "prompts", "--sizes", "12,12", "--n", "1"],
    ),
    (
        "bench train",
        "--precision",
        &["bench", "train", "--precision", "f32,f32"],
    ),
    (
        "bias",
        "--biases",
        &["bias", "--biases", "none,none", "--out", "{out}"],
    ),
    (
        "bias",
        "--study",
        &[
            "bias", "--study", "{run}", "--study", "{run}", "--out", "{out}",
        ],
    ),
    (
        "bias",
        "--seeds",
        &["bias", "--seeds", "0,0", "--out", "{out}"],
    ),
    (
        "canonical",
        "--band",
        &[
            "canonical",
            "--task",
            "index",
            "--band",
            "all",
            "--band",
            "all",
            "--out",
            "{out}",
        ],
    ),
    (
        "canonical",
        "--seeds",
        &[
            "canonical",
            "--task",
            "index",
            "--seeds",
            "1,1",
            "--out",
            "{out}",
        ],
    ),
    (
        "gen",
        "--hops",
        &[
            "gen", "number", "--n", "1", "--hops", "1,1", "--out", "{out}",
        ],
    ),
    (
        "languages",
        "--lang",
        &["languages", "--lang", "parity,parity", "--out", "{out}"],
    ),
    (
        "languages",
        "--pe",
        &["languages", "--pe", "rope:100,rope:100", "--out", "{out}"],
    ),
    (
        "languages",
        "--seeds",
        &["languages", "--seeds", "0,0", "--out", "{out}"],
    ),
    (
        "languages",
        "--test-lengths",
        &["languages", "--test-lengths", "64,64", "--out", "{out}"],
    ),
    (
        "languages",
        "--lrs",
        &["languages", "--lrs", "0.001,0.001", "--out", "{out}"],
    ),
    (
        "lengthgen",
        "--extras",
        &[
            "lengthgen",
            "--run",
            "{run}",
            "--extras",
            "0,0",
            "--out",
            "{out}",
        ],
    ),
    (
        "mask",
        "--layers",
        &[
            "mask", "--run", "{run}", "--layers", "0", "--layers", "0", "--out", "{out}",
        ],
    ),
    (
        "mask",
        "--band",
        &[
            "mask", "--run", "{run}", "--band", "high", "--band", "high", "--out", "{out}",
        ],
    ),
    (
        "offset",
        "--pe",
        &["offset", "--pe", "rope,rope", "--out", "{out}"],
    ),
    (
        "offset",
        "--attention",
        &["offset", "--attention", "softmax,softmax", "--out", "{out}"],
    ),
    ("offset", "--k", &["offset", "--k", "2,2", "--out", "{out}"]),
    (
        "offset",
        "--seeds",
        &["offset", "--seeds", "0,0", "--out", "{out}"],
    ),
    (
        "offset",
        "--test-lens",
        &["offset", "--test-lens", "32,32", "--out", "{out}"],
    ),
    (
        "pretrained index-task",
        "--lengths",
        &[
            "pretrained",
            "index-task",
            "--lengths",
            "64,64",
            "--out",
            "{out}",
        ],
    ),
    (
        "pretrained rope-stats",
        "--layers",
        &[
            "pretrained",
            "rope-stats",
            "--layers",
            "0,0",
            "--out",
            "{out}",
        ],
    ),
    (
        "pretrained rope-stats",
        "--lengths",
        &[
            "pretrained",
            "rope-stats",
            "--lengths",
            "256,256",
            "--out",
            "{out}",
        ],
    ),
    (
        "pretrained tasks",
        "--sizes",
        &[
            "pretrained",
            "tasks",
            "--task",
            "number",
            "--sizes",
            "12,12",
            "--out",
            "{out}",
        ],
    ),
    (
        "reproduce",
        "--seeds",
        &["reproduce", "--seeds", "0,0", "--out", "{out}"],
    ),
    (
        "theory periodic",
        "--m",
        &["theory", "periodic", "--m", "2,2", "--out", "{out}"],
    ),
    (
        "theory periodic",
        "--formats",
        &[
            "theory",
            "periodic",
            "--formats",
            "f32,f32",
            "--out",
            "{out}",
        ],
    ),
    (
        "theory offset-range",
        "--g",
        &["theory", "offset-range", "--g", "0.5,0.5", "--out", "{out}"],
    ),
    (
        "theory offset-range",
        "--scales",
        &[
            "theory",
            "offset-range",
            "--scales",
            "2,2",
            "--out",
            "{out}",
        ],
    ),
    (
        "theory margins",
        "--extras",
        &[
            "theory", "margins", "--run", "{run}", "--extras", "0,0", "--out", "{out}",
        ],
    ),
    (
        "theory rope-stats",
        "--bases",
        &[
            "theory",
            "rope-stats",
            "--bases",
            "100,100",
            "--out",
            "{out}",
        ],
    ),
    (
        "theory rope-stats",
        "--lengths",
        &[
            "theory",
            "rope-stats",
            "--lengths",
            "256,256",
            "--out",
            "{out}",
        ],
    ),
];

/// The list flags of [`LIST_FLAGS`] that parse their list from one value (a value parser of
/// their own, invisible to clap's tree): the unit test cannot find these and accepts them.
pub const PARSED_LISTS: &[(&str, &str)] =
    &[("languages", "--test-lengths"), ("lengthgen", "--extras")];
