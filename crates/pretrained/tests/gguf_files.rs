//! The GGUF loader on small files the tests write themselves: every metadata value type,
//! Q4_1 / Q8_0 / F32 tensors whose values quantize exactly (so dequantization must return them
//! bit for bit), a tokenizer from metadata, and truncated or corrupted files (errors, no panic).

use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use proptest::prelude::*;
use ropelab_model::Hooks;
use ropelab_pretrained::gguf::GgufFile;
use ropelab_pretrained::llama::Llama;
use ropelab_pretrained::tokenizer::GgufTokenizer;

const D: usize = 32;
const HD: usize = 16;
const FF: usize = 64;
const LAYERS: usize = 2;

/// The tokens the tests' prompts and ids are made of: control tokens, a few letters, digits and
/// merges (their embedding rows are nonzero).
const WORDS: [&str; 14] = [
    "<|endoftext|>",
    "<|im_start|>",
    "a",
    "b",
    "c",
    "ab",
    "Ġ",
    "Ġa",
    "Ġab",
    "1",
    "2",
    "3",
    "x",
    "y",
];

/// The tiny vocabulary: [`WORDS`], then a token for every other byte, as a byte-level
/// vocabulary has (a text holding a byte without one is refused, never encoded without it).
/// Those tokens' embedding rows are zero, so the model reads and answers as with WORDS alone.
fn tokens() -> Vec<String> {
    let mut toks: Vec<String> = WORDS.map(String::from).to_vec();
    for c in byte_chars() {
        let c = c.to_string();
        if !toks.contains(&c) {
            toks.push(c);
        }
    }
    toks
}

/// GPT-2's byte-level characters, byte 0 to 255: printable bytes stand for themselves, the
/// others take the characters from U+0100 on, in byte order.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| {
        (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b)
    };
    let mut next = 0x100;
    (0..256u32)
        .map(|b| match printable(b) {
            true => char::from_u32(b).unwrap(),
            false => {
                next += 1;
                char::from_u32(next - 1).unwrap()
            }
        })
        .collect()
}

/// The token embedding of `v` tokens: [`q8_values`] rows for [`WORDS`], zero rows for the
/// byte tokens after them.
fn embedding(v: usize) -> Vec<f32> {
    let mut rows = q8_values(WORDS.len(), D, 1);
    rows.resize(v * D, 0.0);
    rows
}

/// Values that Q4_1 represents exactly: per block of 32, m + d q with d = 1/8, m = -1 and both
/// q = 0 and q = 15 present.
fn q4_values(rows: usize, cols: usize, salt: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| {
            let q = match i % 32 {
                0 => 0,
                1 => 15,
                k => (k * 7 + salt + i / 32) % 16,
            };
            -1.0 + 0.125 * q as f32
        })
        .collect()
}

/// Values that Q8_0 represents exactly: per block, d q with d = 2^-7 and max |q| = 127.
fn q8_values(rows: usize, cols: usize, salt: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| {
            let q = if i % 32 == 3 {
                127
            } else {
                ((i * 37 + salt) % 255) as i32 - 127
            };
            q as f32 / 128.0
        })
        .collect()
}

struct Written {
    values: Vec<(String, Vec<usize>, Vec<f32>)>,
}

/// A tensor the writer stores: name, shape, values, storage type.
type Stored = (String, Vec<usize>, Vec<f32>, GgmlDType);

fn write_model(path: &Path) -> Written {
    write_model_with(path, GgmlDType::F32)
}

/// The tiny model with its value projections stored as `v_dtype` (F32 by default: a file that
/// mixes block formats; Q8_0 makes every projection quantized).
fn write_model_with(path: &Path, v_dtype: GgmlDType) -> Written {
    write_edited(path, v_dtype, |_, _| {})
}

/// The tiny model with its metadata and tensors changed by `edit` before it is written (keys
/// and tensors may be added, removed, replaced or given twice).
fn write_edited(
    path: &Path,
    v_dtype: GgmlDType,
    edit: impl FnOnce(&mut Vec<(String, Value)>, &mut Vec<Stored>),
) -> Written {
    let dev = Device::Cpu;
    let toks = tokens();
    let v = toks.len();
    let mut values: Vec<Stored> = vec![
        (
            "token_embd.weight".into(),
            vec![v, D],
            embedding(v),
            GgmlDType::Q8_0,
        ),
        (
            "output_norm.weight".into(),
            vec![D],
            (0..D).map(|i| 1.0 + i as f32 / 64.0).collect(),
            GgmlDType::F32,
        ),
    ];
    for l in 0..LAYERS {
        let name = |s: &str| format!("blk.{l}.{s}");
        values.extend([
            (
                name("attn_norm.weight"),
                vec![D],
                vec![1.0; D],
                GgmlDType::F32,
            ),
            (
                name("attn_q.weight"),
                vec![2 * HD, D],
                q4_values(2 * HD, D, l),
                GgmlDType::Q4_1,
            ),
            (
                name("attn_k.weight"),
                vec![HD, D],
                q4_values(HD, D, l + 3),
                GgmlDType::Q4_1,
            ),
            (
                name("attn_v.weight"),
                vec![HD, D],
                q8_values(HD, D, l),
                v_dtype,
            ),
            (
                name("attn_output.weight"),
                vec![D, 2 * HD],
                q8_values(D, 2 * HD, l + 5),
                GgmlDType::Q8_0,
            ),
            (
                name("ffn_norm.weight"),
                vec![D],
                vec![0.5; D],
                GgmlDType::F32,
            ),
            (
                name("ffn_gate.weight"),
                vec![FF, D],
                q4_values(FF, D, l + 1),
                GgmlDType::Q4_1,
            ),
            (
                name("ffn_up.weight"),
                vec![FF, D],
                q4_values(FF, D, l + 2),
                GgmlDType::Q4_1,
            ),
            (
                name("ffn_down.weight"),
                vec![D, FF],
                q4_values(D, FF, l + 4),
                GgmlDType::Q4_1,
            ),
        ]);
    }
    let string = |s: &str| Value::String(s.to_owned());
    let mut metadata: Vec<(String, Value)> = vec![
        ("general.architecture", string("llama")),
        ("llama.block_count", Value::U32(LAYERS as u32)),
        ("llama.context_length", Value::U32(256)),
        ("llama.embedding_length", Value::U32(D as u32)),
        ("llama.feed_forward_length", Value::U32(FF as u32)),
        ("llama.attention.head_count", Value::U32(2)),
        ("llama.attention.head_count_kv", Value::U32(1)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
        ("llama.rope.dimension_count", Value::U32(HD as u32)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("tokenizer.ggml.model", string("gpt2")),
        ("tokenizer.ggml.pre", string("smollm")),
        (
            "tokenizer.ggml.tokens",
            Value::Array(toks.iter().map(|t| string(t)).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(
                toks.iter()
                    .map(|t| Value::I32(if t.starts_with("<|") { 3 } else { 1 }))
                    .collect(),
            ),
        ),
        (
            "tokenizer.ggml.merges",
            Value::Array(vec![string("Ġ a"), string("a b"), string("Ġa b")]),
        ),
        ("tokenizer.ggml.eos_token_id", Value::U32(0)),
        // One of every other value type, which the loader must read and ignore.
        ("test.u8", Value::U8(1)),
        ("test.i8", Value::I8(-1)),
        ("test.u16", Value::U16(2)),
        ("test.i16", Value::I16(-2)),
        ("test.i32", Value::I32(-3)),
        ("test.u64", Value::U64(4)),
        ("test.i64", Value::I64(-4)),
        ("test.f64", Value::F64(0.5)),
        ("test.bool", Value::Bool(true)),
        (
            "test.nested",
            Value::Array(vec![Value::Array(vec![Value::U8(1)])]),
        ),
        // GGUF's default, written last so a reader looking for it walks every type above.
        ("general.alignment", Value::U32(32)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    edit(&mut metadata, &mut values);
    let qtensors: Vec<(String, QTensor)> = values
        .iter()
        .map(|(n, shape, data, dtype)| {
            let t = Tensor::from_vec(data.clone(), shape.as_slice(), &dev).unwrap();
            (n.clone(), QTensor::quantize(&t, *dtype).unwrap())
        })
        .collect();
    let meta_refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> =
        qtensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &meta_refs, &tensor_refs).unwrap();
    Written {
        values: values.into_iter().map(|(n, s, d, _)| (n, s, d)).collect(),
    }
}

/// The self-written tiny Llama and its tokenizer, loaded from a GGUF file in a temporary
/// directory (kept alive by the returned guard).
fn tiny_model() -> (tempfile::TempDir, Llama, GgufTokenizer) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let model = Llama::load(&path, &Device::Cpu).unwrap();
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    (dir, model, tokenizer)
}

#[test]
fn small_files_load_exactly_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let written = write_model(&path);
    let mut file = GgufFile::open(&path).unwrap();
    let config = file.llama_config().unwrap();
    assert_eq!(
        (
            config.n_layers,
            config.n_heads,
            config.n_kv_heads,
            config.head_dim()
        ),
        (2, 2, 1, HD)
    );
    assert_eq!(config.vocab_size, tokens().len());
    assert!(file.metadata_keys().len() >= 25);
    for (name, shape, want) in &written.values {
        let got: Vec<f32> = file
            .tensor(name, shape, &Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(&got, want, "{name} is not dequantized exactly");
    }
    let model = Llama::load(&path, &Device::Cpu).unwrap();
    let ids = Tensor::new(&[[2u32, 5, 7, 9, 1]], &Device::Cpu).unwrap();
    let logits = model.forward(&ids, &mut Hooks::new()).unwrap();
    assert_eq!(logits.dims(), &[1, 5, tokens().len()]);
    let values: Vec<f32> = logits.flatten_all().unwrap().to_vec1().unwrap();
    assert!(values.iter().all(|v| v.is_finite()));

    let tokenizer = GgufTokenizer::from_gguf(&file).unwrap();
    // "ab ab" -> "ab", "Ġab" (merge ranks: "Ġ a" before "a b"); digits split one by one;
    // control tokens whole.
    assert_eq!(tokenizer.encode("ab ab").unwrap(), vec![5, 8]);
    assert_eq!(tokenizer.encode("123").unwrap(), vec![9, 10, 11]);
    assert_eq!(tokenizer.encode("<|im_start|>a").unwrap(), vec![1, 2]);
    assert_eq!(tokenizer.decode(&[5, 8]).unwrap(), "ab ab");
}

/// A GGUF's end-of-turn and end-of-message ids end a generation beside its end-of-sequence id,
/// as in llama.cpp (twenty-fourth pass, B-S5).
#[test]
fn every_end_of_generation_id_of_a_gguf_stops() {
    let dir = tempfile::tempdir().unwrap();
    let path = with_key(dir.path(), "tokenizer.ggml.eot_token_id", Value::U32(7));
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    assert_eq!(tokenizer.decoding.stops, vec![0, 7]);
}

/// A GGUF byte-level vocabulary without a token for some byte would drop that byte from every
/// prompt: a text holding it is refused naming the byte, never encoded without it
/// (twenty-third pass, S-B).
#[test]
fn a_byte_without_a_token_is_refused_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = edited(dir.path(), "bytes.gguf", |meta, _| {
        let keep: Vec<Value> = tokens()
            .iter()
            .map(|t| match t.as_str() {
                "z" => Value::String("zz".into()),
                "\u{109}" => Value::String("tabs".into()),
                _ => Value::String(t.clone()),
            })
            .collect();
        set(meta, "tokenizer.ggml.tokens", Value::Array(keep));
    });
    let file = ropelab_pretrained::gguf::GgufFile::open(&path).unwrap();
    let tokenizer = GgufTokenizer::from_gguf(&file).unwrap();
    assert_eq!(tokenizer.encode("ab ab").unwrap(), vec![5, 8]);
    for (text, byte) in [("a\tb", "0x09"), ("ab z", "0x7a")] {
        let err = tokenizer.encode(text).unwrap_err().to_string();
        assert!(
            err.contains(byte) && err.contains("dropped"),
            "{text:?}: {err}"
        );
    }
    // With every byte, the same texts are encoded and come back whole.
    let (_dir, _, whole) = tiny_model();
    for text in ["a\tb", "ab z", "é\n中"] {
        let ids = whole.encode(text).unwrap();
        assert_eq!(whole.decode(&ids).unwrap(), text);
    }
}

#[test]
fn truncated_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.path().join("cut.gguf");
    for len in (0..bytes.len()).step_by(97).chain([bytes.len() - 1]) {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let err = Llama::load(&cut, &Device::Cpu)
            .err()
            .unwrap_or_else(|| panic!("{len} bytes loaded"));
        assert!(err.to_string().contains("cut.gguf"), "{len}: {err}");
    }
    // A byte added at the end leaves every tensor in place: the message says the file was
    // grown, not only that bytes moved before the data (eighteenth pass, GN16).
    let mut grown = bytes.clone();
    grown.push(0);
    std::fs::write(&cut, &grown).unwrap();
    let err = Llama::load(&cut, &Device::Cpu)
        .err()
        .expect("a grown file loaded");
    assert!(err.to_string().contains("cut or grown at its end"), "{err}");
}

#[test]
fn wrong_metadata_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    // The first "llama" in the file is the value of general.architecture: make it "xlama".
    let at = bytes.windows(5).position(|w| w == b"llama").unwrap();
    bytes[at] = b'x';
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    let err = Llama::load(&bad, &Device::Cpu).err().unwrap().to_string();
    assert!(
        err.contains("bad.gguf") && err.contains("architecture"),
        "{err}"
    );
}

/// The tiny model with the f32 value of metadata key `key` set to `value` (the key's bytes, its
/// u32 type, then the value).
fn with_f32(dir: &Path, key: &str, value: f32) -> std::path::PathBuf {
    with_value(dir, key, value.to_le_bytes())
}

/// The tiny model's file with the 4-byte metadata value of `key` replaced by `value`, as
/// `dir/bad.gguf`.
fn with_value(dir: &Path, key: &str, value: [u8; 4]) -> std::path::PathBuf {
    let path = dir.join("tiny.gguf");
    write_model(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .unwrap()
        + key.len()
        + 4;
    bytes[at..at + 4].copy_from_slice(&value);
    let bad = dir.join("bad.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    bad
}

#[test]
fn values_no_model_has_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // The edit reaches the value: a valid one loads and is read back.
    let fine = with_f32(dir.path(), "llama.rope.freq_base", 5000.0);
    let model = Llama::load(&fine, &Device::Cpu).unwrap();
    assert_eq!(model.config().rope_base, 5000.0);
    for (key, what) in [
        ("llama.rope.freq_base", "RoPE base"),
        ("llama.attention.layer_norm_rms_epsilon", "norm epsilon"),
    ] {
        // 1e30 (sixth pass): a norm that flattens every row; a base beyond 1e12.
        for value in [f32::NAN, -1.0, 0.0, f32::INFINITY, 1e30] {
            let bad = with_f32(dir.path(), key, value);
            let err = Llama::load(&bad, &Device::Cpu).err().unwrap().to_string();
            assert!(
                err.contains("bad.gguf") && err.contains(what) && !err.contains('\n'),
                "{key} = {value}: {err}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// Corrupting bytes anywhere never panics: the loader answers Ok or a clear error.
    #[test]
    fn corrupted_bytes_never_panic(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        write_model(&path);
        let mut bytes = std::fs::read(&path).unwrap();
        for (i, b) in edits {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
        let bad = dir.path().join("fuzz.gguf");
        std::fs::write(&bad, &bytes).unwrap();
        if let Err(e) = Llama::load(&bad, &Device::Cpu) {
            prop_assert!(e.to_string().contains("fuzz.gguf") || !e.to_string().is_empty());
        }
        if let Ok(f) = GgufFile::open(&bad) {
            let _ = GgufTokenizer::from_gguf(&f);
        }
    }
}

#[test]
fn teacher_forced_answers_equal_greedy_decoding() {
    use ropelab_pretrained::tasks::answers;
    let (_dir, model, tokenizer) = tiny_model();
    let (mut agreed, mut correct) = (0, 0);
    let words = ["a", "b", "c", "ab", "1", "x", "y", "<|im_start|>"];
    let prompts: Vec<String> = words
        .iter()
        .flat_map(|a| words.iter().map(move |b| format!("{a} {b}")))
        .collect();
    for prompt in prompts.iter().map(String::as_str) {
        // Besides fixed answers, the model's own greedy continuation when it starts with a
        // space-prefixed token: that answer must count as correct.
        let ids = tokenizer.encode(prompt).unwrap();
        let own = tokenizer
            .decode(&model.generate(&ids, 1, &Default::default()).unwrap())
            .unwrap();
        let own = own
            .strip_prefix(' ')
            .filter(|s| !s.is_empty() && !s.contains(' '))
            .map(str::to_owned);
        for answer in ["a", "ab", "b", "1", "x"]
            .map(str::to_owned)
            .into_iter()
            .chain(own)
        {
            let answer = answer.as_str();
            let (ok, len) = answers(&model, &tokenizer, prompt, answer).unwrap();
            let ids = tokenizer.encode(prompt).unwrap();
            assert_eq!(len, ids.len());
            let full = tokenizer.encode(&format!("{prompt} {answer}")).unwrap();
            let want = &full[ids.len()..];
            let greedy = model
                .generate(&ids, want.len(), &Default::default())
                .unwrap();
            assert_eq!(ok, greedy == want, "{prompt:?} -> {answer:?}");
            agreed += 1;
            correct += usize::from(ok);
        }
    }
    assert!(agreed >= 64 * 5);
    assert!(
        correct > 0 && correct < agreed,
        "{correct} of {agreed}: both outcomes must occur"
    );
}

/// The largest relative difference |got - want| / (1 + |want|).
fn worst(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / (1.0 + w.abs()))
        .fold(0f32, f32::max)
}

/// Logits at every position of one uncached, unhooked forward pass: [1, pos, vocab].
fn full_forward(model: &Llama, ids: &[u32]) -> Tensor {
    let input = Tensor::from_vec(ids.to_vec(), (1, ids.len()), &Device::Cpu).unwrap();
    model.forward(&input, &mut Hooks::new()).unwrap()
}

/// Greedy decoding without a cache: the whole sequence again for every new token.
fn generate_uncached(model: &Llama, prompt: &[u32], max_new: usize) -> Vec<u32> {
    let mut ids = prompt.to_vec();
    for _ in 0..max_new {
        let input = Tensor::from_vec(ids.clone(), (1, ids.len()), &Device::Cpu).unwrap();
        let logits = model.forward_last(&input, &mut Hooks::new()).unwrap();
        let next: Vec<u32> = logits.argmax(1).unwrap().to_vec1().unwrap();
        ids.push(next[0]);
    }
    ids[prompt.len()..].to_vec()
}

/// Single-token steps from the file's Q4_1 / Q8_0 blocks: the same tokens as recomputing the
/// whole sequence in f32, and every step's logits equal the full forward's to f32 rounding.
/// A file with an f32 projection, or the option off, decodes in f32.
#[test]
fn quantized_decoding_equals_the_f32_model() {
    use ropelab_pretrained::llama::KvCache;
    let dir = tempfile::tempdir().unwrap();
    let mixed = dir.path().join("mixed.gguf");
    write_model(&mixed);
    assert!(!Llama::load(&mixed, &Device::Cpu)
        .unwrap()
        .decodes_quantized());
    let path = dir.path().join("quantized.gguf");
    write_model_with(&path, GgmlDType::Q8_0);
    let model = Llama::load(&path, &Device::Cpu).unwrap();
    assert!(model.decodes_quantized());
    let f32_model = Llama::load(&path, &Device::Cpu)
        .unwrap()
        .with_quantized_decode(false);
    assert!(!f32_model.decodes_quantized());
    for prompt in [vec![2u32], vec![2, 5, 7], vec![1, 9, 10, 11, 3, 4, 8]] {
        let want = generate_uncached(&f32_model, &prompt, 12);
        assert_eq!(
            model.generate(&prompt, 12, &Default::default()).unwrap(),
            want,
            "{prompt:?}"
        );
        assert_eq!(
            f32_model
                .generate(&prompt, 12, &Default::default())
                .unwrap(),
            want
        );
    }
    let n = WORDS.len() as u32;
    let ids: Vec<u32> = (0..12).map(|i| (i * 5 + 2) % n).collect();
    let full = full_forward(&f32_model, &ids); // [1, pos, vocab]
    let mut cache = KvCache::new(model.config().n_layers);
    for (pos, &id) in ids.iter().enumerate() {
        let one = Tensor::from_vec(vec![id], (1, 1), &Device::Cpu).unwrap();
        let got: Vec<f32> = model
            .forward_cached(&one, &mut cache)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let want: Vec<f32> = full.get(0).unwrap().get(pos).unwrap().to_vec1().unwrap();
        for (g, w) in got.iter().zip(&want) {
            // f32 rounding: the blocks scale partial sums (d * sum q x + m * sum x) where the
            // f32 path rounds each weight d q + m first, and each kernel sums in its own order:
            // 1.6e-5 at most with the AVX-512 kernels, 5.9e-5 with the AVX2 ones (an AMD EPYC
            // without AVX-512), against logits of order 0.1-1.
            assert!(
                (g - w).abs() <= 1.5e-4 * (1.0 + w.abs()),
                "position {pos}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn cached_decoding_equals_recomputing_the_whole_sequence() {
    use ropelab_pretrained::llama::KvCache;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let model = Llama::load(&path, &Device::Cpu).unwrap();
    let n = WORDS.len() as u32;
    for prompt in [vec![2u32], vec![2, 5, 7], vec![1, 9, 10, 11, 3, 4, 8]] {
        // Tokens: the same continuation (grouped-query attention: 2 query heads, 1 kv head).
        assert_eq!(
            model.generate(&prompt, 12, &Default::default()).unwrap(),
            generate_uncached(&model, &prompt, 12),
            "{prompt:?}"
        );
    }
    // Logits: prefill in two chunks, then one token at a time, against the full forward.
    let ids: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % n).collect();
    let full = full_forward(&model, &ids); // [1, pos, vocab]
    let mut cache = KvCache::new(model.config().n_layers);
    let mut end = 0;
    for chunk in [5, 4, 1, 1, 1, 8] {
        let part =
            Tensor::from_vec(ids[end..end + chunk].to_vec(), (1, chunk), &Device::Cpu).unwrap();
        let got: Vec<f32> = model
            .forward_cached(&part, &mut cache)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        end += chunk;
        assert_eq!(cache.len(), end);
        let want: Vec<f32> = full
            .get(0)
            .unwrap()
            .get(end - 1)
            .unwrap()
            .to_vec1()
            .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "position {}: {g} vs {w}",
                end - 1
            );
        }
    }
    // A prefill 3 tokens at a time with the logits of the last 4 positions.
    let mut cache = KvCache::new(model.config().n_layers);
    let tail: Vec<f32> = model
        .prefill(&ids, &mut cache, 3, 4)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let want: Vec<f32> = full
        .get(0)
        .unwrap()
        .narrow(0, 16, 4)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(tail.len(), want.len());
    for (g, w) in tail.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {w}");
    }
    assert_eq!(cache.len(), 20);
    assert!(model.prefill(&ids, &mut cache, 3, 0).is_err());
    // Bad requests are one-line errors.
    let err = model
        .generate(&[], 3, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("prompt is empty"), "{err}");
    let err = model
        .generate(&[2, 5], 255, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("exceed the model's context of 256"), "{err}");
}

#[test]
fn shared_prompt_heads_give_the_same_answers() {
    use ropelab_pretrained::tasks::{answers, SharedHeads};
    let (_dir, model, tokenizer) = tiny_model();
    let mut shared = SharedHeads::new(&model, &tokenizer);
    let words = ["a", "b", "c", "ab", "1", "x"];
    let (mut agreed, mut correct) = (0, 0);
    // Two heads in turn (the cache follows the head), and a prompt without a line break.
    for head in ["a b c\n1 x\n", "ab ab\n", ""] {
        for a in words {
            for b in words {
                let prompt = format!("{head}{a} {b}");
                for answer in ["a", "ab", "b", "1", "x"] {
                    let want = answers(&model, &tokenizer, &prompt, answer).unwrap();
                    let got = shared.answers(&prompt, answer).unwrap();
                    assert_eq!(got, want, "{prompt:?} -> {answer:?}");
                    agreed += 1;
                    correct += usize::from(got.0);
                }
            }
        }
    }
    assert!(correct > 0 && correct < agreed, "{correct} of {agreed}");
}

#[test]
fn batched_suffixes_equal_one_prefill_each() {
    use ropelab_pretrained::llama::KvCache;
    let (_dir, model, _) = tiny_model();
    let n = WORDS.len() as u32;
    let head: Vec<u32> = (0..9).map(|i| (i * 5 + 1) % n).collect();
    let suffixes: Vec<Vec<u32>> = [1usize, 6, 3, 11]
        .iter()
        .enumerate()
        .map(|(r, &len)| {
            (0..len as u32)
                .map(|i| (i * 3 + r as u32 * 7 + 2) % n)
                .collect()
        })
        .collect();
    let tails = [1usize, 4, 3, 2];
    let refs: Vec<&[u32]> = suffixes.iter().map(Vec::as_slice).collect();
    // With a shared head, and with none (an empty cache).
    for head in [&head[..], &[][..]] {
        let mut cache = KvCache::new(model.config().n_layers);
        if !head.is_empty() {
            model.prefill(head, &mut cache, 4, 1).unwrap();
        }
        let batched = model.forward_suffixes(&cache, &refs, &tails).unwrap();
        assert_eq!(cache.len(), head.len(), "the head's cache is not changed");
        for ((suffix, &tail), got) in suffixes.iter().zip(&tails).zip(&batched) {
            let mut own = cache.clone();
            let want: Vec<f32> = model
                .prefill(suffix, &mut own, 5, tail)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {w}");
            }
        }
    }
    // Bad requests are one-line errors.
    let cache = KvCache::new(model.config().n_layers);
    for (suffixes, tails) in [
        (vec![&[1u32, 2][..]], vec![3usize]),
        (vec![&[1u32, 2][..]], vec![0]),
        (vec![&[][..]], vec![1]),
        (vec![], vec![]),
        (vec![&[1u32][..]], vec![1, 1]),
    ] {
        let err = model
            .forward_suffixes(&cache, &suffixes, &tails)
            .unwrap_err();
        assert!(!err.to_string().contains('\n'), "{err}");
    }
}

#[test]
fn batched_prompt_answers_equal_one_at_a_time() {
    use ropelab_pretrained::tasks::{answers, SharedHeads};
    let (_dir, model, tokenizer) = tiny_model();
    let words = ["a", "b", "c", "ab", "1", "x"];
    let mut items = vec![];
    // Runs of prompts under one head, a head change, and prompts without a line break.
    for head in ["a b c\n1 x\n", "ab ab\n", ""] {
        for (i, a) in words.iter().enumerate() {
            let suffix = words[..=i].join(" ");
            for answer in ["a", "ab", "x"] {
                items.push((format!("{head}{suffix} {a}"), answer.to_string()));
            }
        }
    }
    let want: Vec<(bool, usize)> = items
        .iter()
        .map(|(p, a)| answers(&model, &tokenizer, p, a).unwrap())
        .collect();
    let mut calls = vec![];
    let got = SharedHeads::new(&model, &tokenizer)
        .answers_many(&items, |done| calls.push(done))
        .unwrap();
    assert_eq!(got, want);
    assert_eq!(calls.last(), Some(&items.len()));
    assert!(
        calls.len() < items.len(),
        "prompts ran in batches: {calls:?}"
    );
    let correct = got.iter().filter(|g| g.0).count();
    assert!(
        correct > 0 && correct < got.len(),
        "{correct} of {}",
        got.len()
    );
}

#[test]
fn key_blocks_with_a_running_softmax_equal_one_softmax() {
    use ropelab_pretrained::llama::KvCache;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let whole = Llama::load(&path, &Device::Cpu).unwrap();
    let n = WORDS.len() as u32;
    let ids: Vec<u32> = (0..40).map(|i| (i * 11 + 5) % n).collect();
    let logits = |model: &Llama, chunk: usize| -> Vec<f32> {
        let mut cache = KvCache::new(model.config().n_layers);
        model
            .prefill(&ids, &mut cache, chunk, ids.len())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    // One block (the default, far above 40 keys) against blocks of 1, 3 and 16 keys, with
    // chunks that start inside, at and between blocks.
    let want = logits(&whole, 7);
    // f32 rounding alone: the unblocked path fed in other chunks differs by up to 2.1e-5
    // (relative) here; the blocked paths must stay within the same order.
    const ROUNDING: f32 = 5e-5;
    for chunk in [1, 40] {
        assert!(worst(&logits(&whole, chunk), &want) < ROUNDING);
    }
    for block in [1, 3, 16] {
        let blocked = Llama::load(&path, &Device::Cpu)
            .unwrap()
            .with_attention_block(block);
        for chunk in [1, 7, 40] {
            let error = worst(&logits(&blocked, chunk), &want);
            assert!(error < ROUNDING, "block {block}, chunk {chunk}: {error:e}");
        }
    }
}

/// The hooked forward of a long input whose patterns nobody captures in full takes the bounded
/// path (key blocks, running softmax): the same logits as the full patterns give, and a
/// last-row capture of every layer's scores and pattern equals the full captures' last rows.
#[test]
fn the_hooked_forward_in_key_blocks_matches_the_full_patterns() {
    use ropelab_model::{HookKind, HookPoint};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let whole = Llama::load(&path, &Device::Cpu).unwrap();
    let layers = whole.config().n_layers;
    let n = WORDS.len() as u32;
    // Two rows, so the bounded path runs batched.
    let ids: Vec<u32> = (0..2 * 40).map(|i| (i * 7 + 3) % n).collect();
    let ids = Tensor::from_vec(ids, (2, 40), &Device::Cpu).unwrap();
    let points: Vec<HookPoint> = (0..layers)
        .flat_map(|l| [HookKind::AttnScores, HookKind::Pattern].map(|kind| HookPoint::new(l, kind)))
        .collect();
    let flat = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
    let mut full = Hooks::new().capture(points.clone());
    let want = flat(&whole.forward(&ids, &mut full).unwrap());
    for block in [3, 16] {
        let blocked = Llama::load(&path, &Device::Cpu)
            .unwrap()
            .with_attention_block(block);
        let mut last = Hooks::new().capture_last(points.clone());
        let got = flat(&blocked.forward(&ids, &mut last).unwrap());
        assert!(worst(&got, &want) < 5e-5, "block {block}");
        for &p in &points {
            let row = full.get(p).unwrap().narrow(2, 39, 1).unwrap();
            let error = worst(&flat(last.get(p).unwrap()), &flat(&row));
            assert!(error < 5e-5, "block {block}, {p}: {error:e}");
        }
    }
}

#[test]
fn a_prompt_beyond_the_context_is_refused_in_one_line() {
    use ropelab_pretrained::tasks::SharedHeads;
    let (_dir, model, tokenizer) = tiny_model();
    let mut shared = SharedHeads::new(&model, &tokenizer);
    // The tiny model's context is 256 tokens.
    let long = vec!["a"; 300].join(" ");
    for err in [
        shared.answers(&long, "b").unwrap_err(),
        shared
            .answers_many(&[(long.clone(), "b".into())], |_| {})
            .unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(
            text.contains("exceeds the model's context of 256"),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
    }
    assert!(shared.answers("a b", "a").is_ok());
    // The accuracy table names the size whose prompts do not fit (thirteenth pass, U1): with
    // one token per byte, already the smallest letter prompt exceeds the tiny context.
    let err = ropelab_pretrained::tasks::accuracy_table(
        &model,
        &tokenizer,
        ropelab_tasks::TaskKind::Letter,
        &[1, 200],
        1,
        1,
        |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("size 1 of the letter task: a prompt of")
            && err.contains("exceeds the model's context of 256"),
        "{err}"
    );
}

/// Logits as a flat vector.
fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// Within `tol` relative to (1 + |w|) everywhere.
fn close(got: &[f32], want: &[f32], tol: f32) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= tol * (1.0 + w.abs()))
}

/// The fused forward against the candle ops it replaces on every cached path: a prefill in
/// chunks, single-token steps from the quantized blocks and from the f32 weights, and a batch of
/// suffixes after a shared head; the caches they leave continue each other's calls.
#[test]
fn the_fused_forward_equals_the_candle_ops_on_every_cached_path() {
    use ropelab_pretrained::llama::KvCache;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quantized.gguf");
    write_model_with(&path, GgmlDType::Q8_0);
    let n = WORDS.len() as u32;
    let ids: Vec<u32> = (0..15).map(|i| (i * 5 + 2) % n).collect();
    let suffixes: Vec<Vec<u32>> = (0..3)
        .map(|r| (0..r + 2).map(|i| (i * 3 + r * 7 + 1) % n).collect())
        .collect();
    let refs: Vec<&[u32]> = suffixes.iter().map(Vec::as_slice).collect();
    let run = |fused: bool, quantized: bool| -> Vec<Vec<f32>> {
        let model = Llama::load(&path, &Device::Cpu)
            .unwrap()
            .with_fused(fused)
            .with_quantized_decode(quantized);
        let mut cache = KvCache::new(model.config().n_layers);
        let mut out = vec![flat(&model.prefill(&ids[..9], &mut cache, 4, 3).unwrap())];
        for &id in &ids[9..] {
            let one = Tensor::from_vec(vec![id], (1, 1), &Device::Cpu).unwrap();
            out.push(flat(&model.forward_cached(&one, &mut cache).unwrap()));
        }
        for l in model.forward_suffixes(&cache, &refs, &[2, 1, 3]).unwrap() {
            out.push(flat(&l));
        }
        out
    };
    for quantized in [true, false] {
        let (ops, fused) = (run(false, quantized), run(true, quantized));
        assert_eq!(ops.len(), fused.len());
        for (i, (o, f)) in ops.iter().zip(&fused).enumerate() {
            let worst = f.iter().zip(o).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            // f32 rounding only: other summation orders, a polynomial exp (1 ulp) in the
            // softmax; measured up to 2.4e-5 against logits of order 1.
            assert!(
                close(f, o, 5e-5),
                "quantized {quantized}, call {i}: {worst}"
            );
        }
    }
}

/// In bf16 a batch of suffixes gives each suffix's own bf16 prefill (the same rounded operands;
/// only the f32 sums are split differently), and the bf16 logits differ from f32 ones by the
/// rounding of the operands, not more.
#[test]
fn bf16_suffix_batches_equal_bf16_prefills() {
    use ropelab_model::kernel::Precision;
    use ropelab_pretrained::llama::KvCache;
    let (_dir, f32_model, _) = tiny_model();
    let (_dir2, model, _) = tiny_model();
    let model = model.with_precision(Precision::Bf16).unwrap();
    assert_eq!(model.precision(), Precision::Bf16);
    assert!(model.packed_bytes() > 0);
    let n = WORDS.len() as u32;
    let head: Vec<u32> = (0..9).map(|i| (i * 5 + 1) % n).collect();
    let suffixes: Vec<Vec<u32>> = [1usize, 6, 3]
        .iter()
        .enumerate()
        .map(|(r, &len)| {
            (0..len as u32)
                .map(|i| (i * 3 + r as u32 * 7 + 2) % n)
                .collect()
        })
        .collect();
    let tails = [1usize, 4, 2];
    let refs: Vec<&[u32]> = suffixes.iter().map(Vec::as_slice).collect();
    let mut cache = KvCache::new(model.config().n_layers);
    model.prefill(&head, &mut cache, 4, 1).unwrap();
    let batched = model.forward_suffixes(&cache, &refs, &tails).unwrap();
    let mut f32_cache = KvCache::new(model.config().n_layers);
    f32_model.prefill(&head, &mut f32_cache, 4, 1).unwrap();
    for ((suffix, &tail), got) in suffixes.iter().zip(&tails).zip(&batched) {
        let mut own = cache.clone();
        let want = flat(&model.prefill(suffix, &mut own, 5, tail).unwrap());
        assert!(close(&flat(got), &want, 1e-4), "{suffix:?}");
        let mut own = f32_cache.clone();
        let exact = flat(&f32_model.prefill(suffix, &mut own, 5, tail).unwrap());
        let scale = exact.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = exact
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst > 0.0 && worst <= 0.03 * scale, "{worst} of {scale}");
    }
}

/// The bytes of `path` with the tensor info of `name` edited: its type code set to `dtype`
/// (when given) and `shift` added to its data offset.
fn with_tensor_info(path: &Path, name: &str, dtype: Option<u32>, shift: u64) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap();
    let mut key = (name.len() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(name.as_bytes());
    let at = bytes
        .windows(key.len())
        .position(|w| w == key.as_slice())
        .unwrap()
        + key.len();
    let dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let dtype_at = at + 4 + 8 * dims;
    if let Some(d) = dtype {
        bytes[dtype_at..dtype_at + 4].copy_from_slice(&d.to_le_bytes());
    }
    let offset_at = dtype_at + 4;
    let offset = u64::from_le_bytes(bytes[offset_at..offset_at + 8].try_into().unwrap());
    bytes[offset_at..offset_at + 8].copy_from_slice(&(offset + shift).to_le_bytes());
    bytes
}

/// A tensor whose declared type does not match its bytes (F32 declared F16, Q8_0 declared F32)
/// or whose offset is moved off the alignment is refused, naming the file and the tensor,
/// instead of loading garbage (issue 55, item 5).
#[test]
fn tensors_whose_type_or_offset_do_not_fit_their_bytes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    // The edit helper reaches the record: no edit loads.
    let same = dir.path().join("same.gguf");
    std::fs::write(
        &same,
        with_tensor_info(&path, "blk.0.attn_norm.weight", None, 0),
    )
    .unwrap();
    assert!(Llama::load(&same, &Device::Cpu).is_ok());
    // GGML type codes: F32 0, F16 1, Q8_0 8.
    for (tensor, dtype, shift, want) in [
        (
            "blk.0.attn_norm.weight",
            Some(1),
            0,
            "does not account for its data",
        ),
        ("blk.0.attn_output.weight", Some(0), 0, "overlaps tensor"),
        (
            "blk.0.ffn_norm.weight",
            None,
            4,
            "not a multiple of the alignment",
        ),
        (
            "blk.0.ffn_norm.weight",
            None,
            32,
            "ends 32 bytes before tensor blk.0.ffn_norm.weight",
        ),
    ] {
        let bad = dir.path().join("bad.gguf");
        std::fs::write(&bad, with_tensor_info(&path, tensor, dtype, shift)).unwrap();
        let err = Llama::load(&bad, &Device::Cpu)
            .err()
            .unwrap_or_else(|| panic!("{tensor} {dtype:?} +{shift} loaded"))
            .to_string();
        assert!(
            err.contains("bad.gguf") && err.contains(tensor) && err.contains(want),
            "{tensor} {dtype:?} +{shift}: {err}"
        );
    }
}

/// A tensor whose dimensions multiply past 64 bits is refused naming the file and the tensor,
/// never counted with an overflow (a debug build panicked: CI's fuzzer found it); and the
/// fuzzer's own input is refused in one line.
#[test]
fn a_shape_beyond_64_bits_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let name = "blk.0.attn_output.weight";
    let mut bytes = std::fs::read(&path).unwrap();
    let mut key = (name.len() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(name.as_bytes());
    let at = bytes
        .windows(key.len())
        .position(|w| w == key.as_slice())
        .unwrap()
        + key.len();
    assert_eq!(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()), 2);
    for d in 0..2 {
        let dim_at = at + 4 + 8 * d;
        bytes[dim_at..dim_at + 8].copy_from_slice(&(1u64 << 33).to_le_bytes());
    }
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    let err = Llama::load(&bad, &Device::Cpu)
        .err()
        .expect("a 2^66-element tensor loaded")
        .to_string();
    assert!(
        err.contains("bad.gguf") && err.contains(name) && err.contains("64 bits"),
        "{err}"
    );
    // The input CI's fuzzer found (fuzz/seeds/gguf keeps it for the fuzzer too).
    let found = dir.path().join("found.gguf");
    std::fs::write(
        &found,
        include_bytes!("../../../fuzz/seeds/gguf/shape-overflow.gguf"),
    )
    .unwrap();
    let err = Llama::load(&found, &Device::Cpu)
        .err()
        .expect("the fuzzer's input loaded")
        .to_string();
    assert!(err.contains("found.gguf") && !err.contains('\n'), "{err}");
}

/// The file with the u32 metadata value of `key` set to `value`.
fn with_u32(dir: &Path, key: &str, value: u32) -> std::path::PathBuf {
    with_value(dir, key, value.to_le_bytes())
}

/// An alignment of 0 (candle divides by it while parsing) or of another size than a power of
/// two is refused naming the file, without a panic (issue 55, third pass).
#[test]
fn an_alignment_of_zero_is_refused_before_the_parser_divides_by_it() {
    let dir = tempfile::tempdir().unwrap();
    // The edit reaches the value: the default written again loads.
    assert!(Llama::load(&with_u32(dir.path(), "general.alignment", 32), &Device::Cpu).is_ok());
    for value in [0, 3, 48] {
        let err = Llama::load(
            &with_u32(dir.path(), "general.alignment", value),
            &Device::Cpu,
        )
        .err()
        .unwrap_or_else(|| panic!("alignment {value} loaded"))
        .to_string();
        assert!(
            err.contains("bad.gguf") && err.contains("general.alignment"),
            "{value}: {err}"
        );
    }
}

/// Corruptions the adversarial pass found loading silently (issue 55): a byte removed before
/// the tensor data (every tensor read one byte off), a block count below the blocks the file
/// holds, an end-of-sequence id outside the vocabulary; and an old version's error prints no
/// raw control bytes.
#[test]
fn files_that_would_load_silently_wrong_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let bytes = std::fs::read(&path).unwrap();
    let data = {
        let mut f = std::fs::File::open(&path).unwrap();
        gguf_file::Content::read(&mut f).unwrap().tensor_data_offset as usize
    };
    let shifted = dir.path().join("shifted.gguf");
    let mut b = bytes.clone();
    b.remove(data - 1);
    std::fs::write(&shifted, &b).unwrap();
    let err = Llama::load(&shifted, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("shifted.gguf"), "{err}");

    let fewer = with_u32(dir.path(), "llama.block_count", 1);
    let err = Llama::load(&fewer, &Device::Cpu).err().unwrap().to_string();
    assert!(
        err.contains("bad.gguf") && err.contains("llama.block_count is 1 but the file holds 2"),
        "{err}"
    );

    let eos = with_u32(dir.path(), "tokenizer.ggml.eos_token_id", 5000);
    let err = GgufTokenizer::from_gguf(&GgufFile::open(&eos).unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("bad.gguf") && err.contains("5000"), "{err}");

    // A NaN weight (in an f32 tensor) is refused naming the tensor.
    let offset = {
        let mut f = std::fs::File::open(&path).unwrap();
        let c = gguf_file::Content::read(&mut f).unwrap();
        c.tensor_infos["blk.1.attn_norm.weight"].offset as usize
    };
    let nan = dir.path().join("nan.gguf");
    let mut b = bytes.clone();
    b[data + offset..data + offset + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&nan, &b).unwrap();
    let err = Llama::load(&nan, &Device::Cpu).err().unwrap().to_string();
    assert!(
        err.contains("nan.gguf") && err.contains("blk.1.attn_norm.weight") && err.contains("NaN"),
        "{err}"
    );

    let old = dir.path().join("v1.gguf");
    let mut b = bytes.clone();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&old, &b).unwrap();
    if let Err(e) = GgufFile::open(&old) {
        let text = e.to_string();
        assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
    }
}

/// `key` set to `value` in `meta`: replaced where it is, added otherwise.
fn set(meta: &mut Vec<(String, Value)>, key: &str, value: Value) {
    match meta.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value,
        None => meta.push((key.to_owned(), value)),
    }
}

/// The tiny model edited by `edit`, written as `dir/name`.
fn edited(
    dir: &Path,
    name: &str,
    edit: impl FnOnce(&mut Vec<(String, Value)>, &mut Vec<Stored>),
) -> std::path::PathBuf {
    let path = dir.join(name);
    write_edited(&path, GgmlDType::F32, edit);
    path
}

/// The tiny model with metadata `key` set to `value`, written as `dir/bad.gguf`.
fn with_key(dir: &Path, key: &str, value: Value) -> std::path::PathBuf {
    edited(dir, "bad.gguf", |meta, _| set(meta, key, value))
}

/// The one-line error of loading `path` (model and tokenizer), or a panic naming `what`.
fn refusal(path: &Path, what: &str) -> String {
    let err = ropelab_pretrained::load_model(Some(path), &Device::Cpu)
        .err()
        .unwrap_or_else(|| panic!("{what} was accepted"))
        .to_string();
    assert!(!err.chars().any(char::is_control), "{what}: {err:?}");
    err
}

/// A present optional key of the wrong type (or a negative integer) is refused naming it,
/// never replaced by the key's default; integers of any width and sign load (issue 55, fourth
/// pass, A).
#[test]
fn present_keys_of_the_wrong_type_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    for (key, value) in [
        ("llama.context_length", Value::I32(256)),
        ("llama.context_length", Value::U64(256)),
        ("llama.rope.freq_base", Value::F64(10_000.0)),
        ("tokenizer.ggml.eos_token_id", Value::I64(0)),
    ] {
        let path = with_key(dir.path(), key, value.clone());
        assert!(
            ropelab_pretrained::load_model(Some(&path), &Device::Cpu).is_ok(),
            "{key} = {value:?}"
        );
    }
    for (key, value) in [
        ("llama.rope.freq_base", Value::U32(10_000)),
        ("llama.rope.freq_base", Value::String("1e4".into())),
        ("llama.rope.scaling.type", Value::U32(1)),
        ("llama.rope.dimension_count", Value::I8(-1)),
        ("llama.attention.key_length", Value::F32(16.0)),
        ("llama.attention.head_count_kv", Value::Bool(true)),
        ("llama.vocab_size", Value::String("14".into())),
        ("tokenizer.ggml.eos_token_id", Value::String("0".into())),
        ("tokenizer.ggml.eos_token_id", Value::F32(0.0)),
        ("tokenizer.ggml.eos_token_id", Value::I32(-1)),
    ] {
        let err = refusal(&with_key(dir.path(), key, value.clone()), key);
        assert!(
            err.contains("bad.gguf") && err.contains(key),
            "{key} = {value:?}: {err}"
        );
    }
}

/// A tensor the model does not read (a bias or norm llama.cpp would apply) is refused naming
/// it; `rope_freqs.weight`, which the loader applies as frequency factors, loads (issue 55,
/// fourth pass, B).
#[test]
fn tensors_the_model_does_not_read_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let n = tokens().len();
    let with_tensor = |name: &str, len: usize| {
        let name = name.to_owned();
        edited(dir.path(), "extra.gguf", move |_, tensors| {
            tensors.push((name, vec![len], vec![1.0; len], GgmlDType::F32))
        })
    };
    let freqs = with_tensor("rope_freqs.weight", HD / 2);
    assert!(Llama::load(&freqs, &Device::Cpu).is_ok());
    for (name, len) in [
        ("blk.0.attn_q.bias", 2 * HD),
        ("blk.1.attn_k_norm.weight", HD),
        ("output.bias", n),
    ] {
        let err = Llama::load(&with_tensor(name, len), &Device::Cpu)
            .err()
            .unwrap_or_else(|| panic!("{name} was accepted"))
            .to_string();
        assert!(
            err.contains("extra.gguf") && err.contains(name) && err.contains("would not read"),
            "{name}: {err}"
        );
    }
}

/// `llama.rope.scaling.factor` without a type scales linearly, as llama.cpp reads it (its
/// default type), and so does the older `llama.rope.scale_linear`; two factors that differ,
/// or a factor beside type none, are refused (issue 55, fourth pass, C).
#[test]
fn a_scaling_factor_without_a_type_is_linear_as_in_llama_cpp() {
    let dir = tempfile::tempdir().unwrap();
    let plain: Vec<f64> = ropelab_model::rope::frequencies(10_000.0, HD);
    for (key, factor) in [
        ("llama.rope.scaling.factor", 4.0f32),
        ("llama.rope.scale_linear", 2.0),
    ] {
        let path = with_key(dir.path(), key, Value::F32(factor));
        let model = Llama::load(&path, &Device::Cpu).unwrap();
        let want: Vec<f64> = plain.iter().map(|f| f / f64::from(factor)).collect();
        assert_eq!(model.config().rope_thetas.as_ref(), Some(&want), "{key}");
    }
    let cases: [(&[(&str, Value)], &str); 2] = [
        (
            &[
                ("llama.rope.scaling.factor", Value::F32(4.0)),
                ("llama.rope.scale_linear", Value::F32(2.0)),
            ],
            "two RoPE scaling factors",
        ),
        (
            &[
                ("llama.rope.scaling.factor", Value::F32(4.0)),
                ("llama.rope.scaling.type", Value::String("none".into())),
            ],
            "llama.rope.scaling.type is \"none\" but llama.rope.scaling.factor is 4",
        ),
    ];
    for (keys, want) in cases {
        let path = edited(dir.path(), "bad.gguf", |meta, _| {
            for (k, v) in keys {
                set(meta, k, v.clone());
            }
        });
        let err = refusal(&path, want);
        assert!(err.contains("bad.gguf") && err.contains(want), "{err}");
    }
}

/// A metadata key or a tensor given twice (candle would keep the last silently) is refused
/// naming it (issue 55, fourth pass, D).
#[test]
fn a_key_or_tensor_given_twice_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = edited(dir.path(), "twice.gguf", |meta, _| {
        meta.push(("llama.rope.freq_base".into(), Value::F32(5000.0)))
    });
    let err = refusal(&key, "a repeated key");
    assert!(
        err.contains("twice.gguf")
            && err.contains("metadata key llama.rope.freq_base is given twice"),
        "{err}"
    );
    let tensor = edited(dir.path(), "twice.gguf", |_, tensors| {
        let norm = tensors
            .iter()
            .find(|t| t.0 == "output_norm.weight")
            .unwrap()
            .clone();
        tensors.push(norm);
    });
    let err = refusal(&tensor, "a repeated tensor");
    assert!(
        err.contains("twice.gguf") && err.contains("tensor output_norm.weight is listed twice"),
        "{err}"
    );
}

/// A GGUF tokenizer with more tokens than the embedding has rows is refused at load, as for a
/// Hugging Face directory (issue 55, fourth pass, E).
#[test]
fn a_tokenizer_larger_than_the_embedding_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let rows = |n: usize| {
        edited(dir.path(), "small.gguf", move |meta, tensors| {
            set(meta, "llama.vocab_size", Value::U32(n as u32));
            let embed = tensors
                .iter_mut()
                .find(|t| t.0 == "token_embd.weight")
                .unwrap();
            embed.1 = vec![n, D];
            embed.2 = q8_values(n, D, 1);
        })
    };
    // The edit reaches the embedding: as many rows as tokens loads.
    assert!(ropelab_pretrained::load_model(Some(&rows(tokens().len())), &Device::Cpu).is_ok());
    let err = refusal(&rows(12), "13 tokens over 12 embedding rows");
    assert!(
        err.contains("small.gguf") && err.contains("beyond the model's vocabulary of 12"),
        "{err}"
    );
}

/// Tokenizer keys ropelab would ignore or read otherwise than llama.cpp are refused naming
/// them: no `tokenizer.ggml.pre`, `add_bos_token` or `add_eos_token` true, a BOS id outside
/// the vocabulary, token types that are not one per token (issue 55, fourth pass, F).
#[test]
fn tokenizer_keys_ropelab_would_ignore_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (key, value) in [
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
    ] {
        let path = with_key(dir.path(), key, value);
        assert!(ropelab_pretrained::load_model(Some(&path), &Device::Cpu).is_ok());
    }
    let no_pre = edited(dir.path(), "bad.gguf", |meta, _| {
        meta.retain(|(k, _)| k != "tokenizer.ggml.pre")
    });
    let err = refusal(&no_pre, "a missing pre-tokenizer");
    assert!(
        err.contains("bad.gguf") && err.contains("tokenizer.ggml.pre is missing"),
        "{err}"
    );
    for (key, value, want) in [
        ("tokenizer.ggml.add_bos_token", Value::Bool(true), "is true"),
        ("tokenizer.ggml.add_eos_token", Value::Bool(true), "is true"),
        (
            "tokenizer.ggml.add_bos_token",
            Value::U8(1),
            "not true or false",
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(5000), "5000"),
        (
            "tokenizer.ggml.token_type",
            Value::Array(vec![Value::I32(1); 3]),
            "3 entries for 261 tokens",
        ),
    ] {
        let err = refusal(&with_key(dir.path(), key, value), key);
        assert!(
            err.contains("bad.gguf") && err.contains(key) && err.contains(want),
            "{key}: {err}"
        );
    }
}

/// Finite weights whose products overflow f32 (a norm gain of 3e38) are refused at every
/// forward entry point, on the fused path and off it, instead of NaN logits that generate no
/// token and score as garbage (issue 55, fourth pass, G).
#[test]
fn activations_that_overflow_f32_are_refused_at_every_entry_point() {
    use ropelab_pretrained::llama::KvCache;
    let dir = tempfile::tempdir().unwrap();
    let path = edited(dir.path(), "huge.gguf", |_, tensors| {
        let norm = tensors
            .iter_mut()
            .find(|t| t.0 == "blk.0.attn_norm.weight")
            .unwrap();
        norm.2 = vec![3e38; D];
    });
    let ids = [2u32, 5, 7, 9];
    let input = Tensor::new(&[ids], &Device::Cpu).unwrap();
    for fused in [true, false] {
        let model = Llama::load(&path, &Device::Cpu).unwrap().with_fused(fused);
        let mut cache = KvCache::new(model.config().n_layers);
        let mut head = KvCache::new(model.config().n_layers);
        let results = [
            model.forward(&input, &mut Hooks::new()).err(),
            model.forward_last(&input, &mut Hooks::new()).err(),
            model.trunk(&input, &mut Hooks::new()).err(),
            model.forward_cached(&input, &mut cache).err(),
            model.forward_cached_all(&input, &mut KvCache::new(2)).err(),
            model.prefill(&ids, &mut head, 2, 1).err(),
            model
                .forward_suffixes(&KvCache::new(2), &[&ids[..2], &ids[1..]], &[1, 2])
                .err(),
            model.generate(&ids, 2, &Default::default()).err(),
        ];
        for (i, err) in results.into_iter().enumerate() {
            let err = err
                .unwrap_or_else(|| panic!("entry point {i} (fused {fused}) gave a result"))
                .to_string();
            assert!(
                err.contains("huge.gguf") && err.contains("overflow f32"),
                "entry point {i} (fused {fused}): {err}"
            );
        }
    }
}

/// Tensor names from the file are quoted escaped: a newline, a carriage return or an escape
/// sequence in a name never reaches the terminal or cuts the one-line message (issue 55,
/// fourth pass, H).
#[test]
fn tensor_names_in_errors_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "blk.0.odd\n\u{1b}[2J\rname";
    let path = edited(dir.path(), "evil.gguf", |_, tensors| {
        tensors.push((evil.to_owned(), vec![D], vec![1.0; D], GgmlDType::F32))
    });
    let err = Llama::load(&path, &Device::Cpu).err().unwrap().to_string();
    assert!(!err.chars().any(char::is_control), "{err:?}");
    assert!(err.contains(r"blk.0.odd\n\u{1b}[2J\rname"), "{err}");
    // A misplaced tensor of that name: the layout check quotes it escaped too.
    let moved = dir.path().join("moved.gguf");
    std::fs::write(&moved, with_tensor_info(&path, evil, None, 4)).unwrap();
    let err = Llama::load(&moved, &Device::Cpu).err().unwrap().to_string();
    assert!(
        !err.chars().any(char::is_control) && err.contains("not a multiple of the alignment"),
        "{err:?}"
    );
}

/// A context length or block count of 0 is refused naming its key (issue 55, fourth pass, I
/// and N).
#[test]
fn a_zero_context_or_block_count_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for key in ["llama.context_length", "llama.block_count"] {
        let err = refusal(&with_u32(dir.path(), key, 0), key);
        assert!(
            err.contains("bad.gguf") && err.contains(&format!("{key} is 0")),
            "{err}"
        );
    }
}

/// A sliding window shorter than the context (ropelab attends over all of it, as the Hugging
/// Face path refuses `sliding_window`) and a special id beyond the tokens are refused naming the
/// key; a window as long as the context loads (issue 55, fourth pass).
#[test]
fn a_short_sliding_window_and_a_padding_id_beyond_the_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let full = with_key(
        dir.path(),
        "llama.attention.sliding_window",
        Value::U32(256),
    );
    assert!(ropelab_pretrained::load_model(Some(&full), &Device::Cpu).is_ok());
    let short = with_key(dir.path(), "llama.attention.sliding_window", Value::U32(16));
    let err = refusal(&short, "a 16-token window");
    assert!(err.contains("llama.attention.sliding_window 16"), "{err}");
    let pad = with_key(
        dir.path(),
        "tokenizer.ggml.padding_token_id",
        Value::U32(5000),
    );
    let err = refusal(&pad, "a padding id beyond the tokens");
    assert!(
        err.contains("tokenizer.ggml.padding_token_id 5000"),
        "{err}"
    );
    // Every special id the file declares, not a fixed list: cls, mask, eot, fim ... beyond
    // the tokens, negative or of another type (nineteenth pass, S1).
    for (key, value, says) in [
        (
            "tokenizer.ggml.cls_token_id",
            Value::U32(5000),
            "5000 is not a token",
        ),
        (
            "tokenizer.ggml.mask_token_id",
            Value::U32(5000),
            "5000 is not a token",
        ),
        (
            "tokenizer.ggml.eot_token_id",
            Value::U32(5000),
            "5000 is not a token",
        ),
        (
            "tokenizer.ggml.fim_pre_token_id",
            Value::U32(5000),
            "5000 is not a token",
        ),
        (
            "tokenizer.ggml.cls_token_id",
            Value::I32(-1),
            "not an unsigned integer",
        ),
        (
            "tokenizer.ggml.cls_token_id",
            Value::String("3".into()),
            "not an unsigned integer",
        ),
    ] {
        let err = refusal(&with_key(dir.path(), key, value), key);
        assert!(err.contains(key) && err.contains(says), "{key}: {err}");
    }
}

/// The tiny model's embedding stored as F32 (Q8_0's f16 scale cannot hold 1e20) and scaled
/// by `scale`, written as `dir/huge.gguf`.
fn with_scaled_embedding(dir: &Path, scale: f32) -> std::path::PathBuf {
    edited(dir, "huge.gguf", |_, tensors| {
        let embed = tensors
            .iter_mut()
            .find(|t| t.0 == "token_embd.weight")
            .unwrap();
        embed.3 = GgmlDType::F32;
        embed.2.iter_mut().for_each(|v| *v *= scale);
    })
}

/// Finite activations whose mean of squares overflows f32 inside an RMSNorm (an embedding
/// scaled by 1e20) would make every normed row 0, finite, so no scan of the outputs sees it:
/// the norm refuses it on the fused path and off it, at every entry point (adversarial pass
/// 5, S1).
#[test]
fn a_norm_whose_mean_of_squares_overflows_is_refused() {
    use ropelab_pretrained::llama::KvCache;
    let dir = tempfile::tempdir().unwrap();
    let ids = [2u32, 5, 7, 9];
    let input = Tensor::new(&[ids], &Device::Cpu).unwrap();
    // The edit reaches the model: scaled by 1 it runs.
    let fine = Llama::load(&with_scaled_embedding(dir.path(), 1.0), &Device::Cpu).unwrap();
    assert_eq!(
        fine.generate(&ids, 2, &Default::default()).unwrap().len(),
        2
    );
    let path = with_scaled_embedding(dir.path(), 1e20);
    for fused in [true, false] {
        let model = Llama::load(&path, &Device::Cpu).unwrap().with_fused(fused);
        let mut cache = KvCache::new(model.config().n_layers);
        let results = [
            model.forward(&input, &mut Hooks::new()).err(),
            model.forward_last(&input, &mut Hooks::new()).err(),
            model.trunk(&input, &mut Hooks::new()).err(),
            model.forward_cached(&input, &mut cache).err(),
            model.prefill(&ids, &mut KvCache::new(2), 2, 1).err(),
            model
                .forward_suffixes(&KvCache::new(2), &[&ids[..2], &ids[1..]], &[1, 2])
                .err(),
            model.generate(&ids, 2, &Default::default()).err(),
        ];
        for (i, err) in results.into_iter().enumerate() {
            let err = err
                .unwrap_or_else(|| panic!("entry point {i} (fused {fused}) gave a result"))
                .to_string();
            assert!(
                err.contains("huge.gguf")
                    && err.contains("overflow f32")
                    && err.contains("mean of squares"),
                "entry point {i} (fused {fused}): {err}"
            );
        }
    }
}

/// The tiny model as a `qwen2` file (keys renamed, q/k/v biases added), with `edit` applied
/// after.
fn qwen2_edited(
    dir: &Path,
    edit: impl FnOnce(&mut Vec<(String, Value)>, &mut Vec<Stored>),
) -> std::path::PathBuf {
    edited(dir, "qwen2.gguf", |meta, tensors| {
        for (k, v) in meta.iter_mut() {
            if let Some(rest) = k.strip_prefix("llama.") {
                *k = format!("qwen2.{rest}");
            }
            if k == "general.architecture" {
                *v = Value::String("qwen2".into());
            }
        }
        for l in 0..LAYERS {
            for (name, n) in [("attn_q", 2 * HD), ("attn_k", HD), ("attn_v", HD)] {
                tensors.push((
                    format!("blk.{l}.{name}.bias"),
                    vec![n],
                    vec![0.25; n],
                    GgmlDType::F32,
                ));
            }
        }
        edit(meta, tensors);
    })
}

/// Llama 3's `rope_freqs.weight` is read for `llama` files only, as llama.cpp does: a `qwen2`
/// file holding it is refused, not run with the factors applied (adversarial pass 5, S3).
#[test]
fn rope_freqs_in_a_qwen2_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let plain = qwen2_edited(dir.path(), |_, _| {});
    let model = Llama::load(&plain, &Device::Cpu).unwrap();
    assert_eq!(model.config().arch, "qwen2");
    let freqs = qwen2_edited(dir.path(), |_, tensors| {
        tensors.push((
            "rope_freqs.weight".into(),
            vec![HD / 2],
            vec![8.0; HD / 2],
            GgmlDType::F32,
        ))
    });
    let err = refusal(&freqs, "rope_freqs.weight in a qwen2 file");
    assert!(
        err.contains("qwen2.gguf")
            && err.contains("rope_freqs.weight")
            && err.contains("llama files only"),
        "{err}"
    );
}

/// A `rope.dimension_count` other than the head size (partial rotary) is refused for `llama`
/// and `qwen2` files, as llama.cpp refuses it and as a Llama directory's partial rotary is
/// refused (adversarial pass 5, S4).
#[test]
fn partial_rotary_in_a_llama_or_qwen2_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let same = with_key(
        dir.path(),
        "llama.rope.dimension_count",
        Value::U32(HD as u32),
    );
    assert!(Llama::load(&same, &Device::Cpu).is_ok());
    let err = refusal(
        &with_key(dir.path(), "llama.rope.dimension_count", Value::U32(8)),
        "8 rotated dims of 16",
    );
    assert!(
        err.contains("bad.gguf")
            && err.contains("llama.rope.dimension_count 8 differs from the head size 16"),
        "{err}"
    );
    let qwen = qwen2_edited(dir.path(), |meta, _| {
        set(meta, "qwen2.rope.dimension_count", Value::U32(8))
    });
    let err = refusal(&qwen, "8 rotated dims of 16 in qwen2");
    assert!(
        err.contains("qwen2.rope.dimension_count 8 differs"),
        "{err}"
    );
}

/// RoPE bases outside (1, 1e12] (also stored as F64, which holds what f32 cannot), linear
/// factors outside [1e-6, 1e6] and Llama 3 frequency factors outside it are refused naming
/// the key or tensor and the value (adversarial pass 5, S7 and U3).
#[test]
fn absurd_rope_bases_and_factors_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    for (key, value) in [
        ("llama.rope.freq_base", Value::F64(1e12)),
        ("llama.rope.freq_base", Value::F32(500_000.0)),
        ("llama.rope.scaling.factor", Value::F64(1e-6)),
    ] {
        let path = with_key(dir.path(), key, value.clone());
        assert!(
            Llama::load(&path, &Device::Cpu).is_ok(),
            "{key} = {value:?}"
        );
    }
    for (key, value, want) in [
        (
            "llama.rope.freq_base",
            Value::F64(1e300),
            "llama.rope.freq_base 1e300 is not a RoPE base",
        ),
        (
            "llama.rope.freq_base",
            Value::F64(1e-300),
            "llama.rope.freq_base 1e-300 is not a RoPE base",
        ),
        (
            "llama.rope.freq_base",
            Value::F32(1.0),
            "llama.rope.freq_base 1 is not a RoPE base",
        ),
        (
            "llama.rope.scaling.factor",
            Value::F32(1e-30),
            "llama.rope.scaling.factor 1e-30 is not a RoPE scaling factor",
        ),
        // A 5,000-character string is quoted cut (ninth pass, G2, G4).
        (
            "general.architecture",
            Value::String("y".repeat(5000)),
            "general.architecture \"yyyy",
        ),
        (
            "llama.rope.scaling.type",
            Value::String("w".repeat(5000)),
            "llama.rope.scaling.type \"wwww",
        ),
        // Heads that do not divide the width, and a merge of unknown tokens, named as such
        // (tenth pass, G24b, G36).
        (
            "llama.attention.head_count",
            Value::U32(3),
            "llama.embedding_length 32 is not divisible by llama.attention.head_count 3",
        ),
        (
            "llama.expert_count",
            Value::U32(4),
            "llama.expert_count is 4: a mixture of experts is not supported",
        ),
        (
            "tokenizer.ggml.scores",
            Value::Array(vec![Value::F32(0.0); 17]),
            "tokenizer.ggml.scores has 17 entries",
        ),
        (
            "tokenizer.ggml.scores",
            Value::Array(vec![Value::String("x".into()); 3]),
            "tokenizer.ggml.scores is not an array of floats",
        ),
        (
            "tokenizer.ggml.merges",
            Value::Array(vec![Value::String("QQ WW".into())]),
            "tokenizer.ggml.merges[0] \"QQ WW\" names \"QQ\"",
        ),
        // A merge given twice has two ranks; llama.cpp's factor on the rotated q and k is
        // not applied, so only 1 is read; bytes that are not UTF-8 are named where they lie
        // (thirteenth pass, S1-S3).
        (
            "tokenizer.ggml.merges",
            Value::Array(
                ["Ġ a", "a b", "Ġ a"]
                    .map(|m| Value::String(m.into()))
                    .to_vec(),
            ),
            "tokenizer.ggml.merges lists \"Ġ a\" twice (merges[0] and merges[2])",
        ),
        (
            "llama.rope.scaling.attn_factor",
            Value::F32(0.5),
            "llama.rope.scaling.attn_factor is 0.5: ropelab does not scale",
        ),
        (
            "llama.rope.scaling.attn_factor",
            Value::F32(f32::NAN),
            "llama.rope.scaling.attn_factor is NaN",
        ),
        (
            "llama.rope.scaling.attn_factor",
            Value::String("big".into()),
            "llama.rope.scaling.attn_factor",
        ),
    ] {
        let err = refusal(&with_key(dir.path(), key, value), want);
        assert!(
            err.contains("bad.gguf") && err.contains(want) && err.len() < 400,
            "{err}"
        );
    }
    let linear = edited(dir.path(), "bad.gguf", |meta, _| {
        set(
            meta,
            "llama.rope.scaling.type",
            Value::String("linear".into()),
        );
        set(meta, "llama.rope.scaling.factor", Value::F32(1e-30));
    });
    let err = refusal(&linear, "type linear, factor 1e-30");
    assert!(err.contains("llama.rope.scaling.factor 1e-30"), "{err}");
    let freqs = |f: f32| {
        edited(dir.path(), "freqs.gguf", move |_, tensors| {
            tensors.push((
                "rope_freqs.weight".into(),
                vec![HD / 2],
                vec![f; HD / 2],
                GgmlDType::F32,
            ))
        })
    };
    assert!(Llama::load(&freqs(8.0), &Device::Cpu).is_ok());
    for (f, shown) in [
        (1e-30f32, "1e-30"),
        (0.0, "0"),
        (-1.0, "-1"),
        (1e7, "10000000"),
    ] {
        let err = refusal(&freqs(f), shown);
        assert!(
            err.contains("freqs.gguf")
                && err.contains(&format!("rope_freqs.weight holds {shown} for plane 0"))
                && err.contains("[1e-6, 1e6]"),
            "{f}: {err}"
        );
    }
}

/// A user-defined token (GGUF type 4) is matched in the text before BPE, as llama.cpp
/// partitions on it: " ab" is one BPE token, but " " and "ab" once "ab" is user-defined
/// (fourteenth pass, S-H).
#[test]
fn user_defined_tokens_are_matched_before_bpe() {
    let dir = tempfile::tempdir().unwrap();
    let plain = with_key(dir.path(), "tokenizer.ggml.eos_token_id", Value::U32(0));
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&plain).unwrap()).unwrap();
    assert_eq!(tokens()[8], "Ġab");
    assert_eq!(tokenizer.encode(" ab").unwrap(), vec![8]);
    let mut types = vec![Value::I32(1); tokens().len()];
    types[5] = Value::I32(4);
    let user = with_key(dir.path(), "tokenizer.ggml.token_type", Value::Array(types));
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&user).unwrap()).unwrap();
    assert_eq!(tokenizer.encode(" ab").unwrap(), vec![6, 5]);
    // An unknown token (type 2) is split out as a control one is: llama.cpp's special-token
    // cache holds both (twenty-first pass, S-C).
    for kind in [2, 3] {
        let mut types = vec![Value::I32(1); tokens().len()];
        types[5] = Value::I32(kind);
        let path = with_key(dir.path(), "tokenizer.ggml.token_type", Value::Array(types));
        let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
        assert_eq!(tokenizer.encode(" ab").unwrap(), vec![6, 5], "type {kind}");
    }
}

/// A token whose bytes are not UTF-8 is refused naming it (candle would read it as U+FFFD, so
/// two damaged tokens would read as one; thirteenth pass, S3, U2).
#[test]
fn a_token_that_is_not_utf8_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut toks: Vec<Value> = tokens()
        .iter()
        .map(|t| Value::String(t.to_string()))
        .collect();
    toks[13] = Value::String("QQQQQQQQ".into());
    let path = with_key(dir.path(), "tokenizer.ggml.tokens", Value::Array(toks));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(8)
        .position(|w| w == b"QQQQQQQQ")
        .expect("the token is written");
    bytes[at + 1] = 0xff;
    std::fs::write(&path, bytes).unwrap();
    let err = refusal(&path, "a token that is not UTF-8");
    assert!(
        err.contains("bad.gguf")
            && err.contains("tokenizer.ggml.tokens[13] holds bytes that are not UTF-8"),
        "{err}"
    );
}

/// Tokenizer tables llama.cpp refuses: a token string given twice (two ids, one of which
/// the string never maps back to) and a token type outside llama.cpp's 0 to 6 (adversarial
/// pass 5, S10).
#[test]
fn duplicate_tokens_and_unknown_token_types_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let string = |s: &str| Value::String(s.to_owned());
    let mut toks: Vec<Value> = tokens().iter().map(|t| string(t)).collect();
    toks[13] = string("x");
    let err = refusal(
        &with_key(dir.path(), "tokenizer.ggml.tokens", Value::Array(toks)),
        "a token given twice",
    );
    assert!(
        err.contains("bad.gguf")
            && err.contains("tokenizer.ggml.tokens lists \"x\" twice (ids 12 and 13)"),
        "{err}"
    );
    let n = tokens().len();
    for (t, fine) in [(6, true), (99, false), (-1, false)] {
        let mut types = vec![Value::I32(1); n];
        types[4] = Value::I32(t);
        let path = with_key(dir.path(), "tokenizer.ggml.token_type", Value::Array(types));
        if fine {
            assert!(ropelab_pretrained::load_model(Some(&path), &Device::Cpu).is_ok());
            continue;
        }
        let err = refusal(&path, "an unknown token type");
        assert!(
            err.contains("bad.gguf")
                && err.contains(&format!("tokenizer.ggml.token_type {t} of token 4")),
            "{err}"
        );
    }
}

/// A file whose version is 1 (which llama.cpp no longer reads) is refused as such, not
/// described from the garbage its layout makes of the header (adversarial pass 5, U4).
#[test]
fn a_version_1_file_is_refused_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    for version in [1u32, 4] {
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        let old = dir.path().join("old.gguf");
        std::fs::write(&old, &bytes).unwrap();
        let err = refusal(&old, "a version-1 file");
        assert!(
            err.contains("old.gguf")
                && err.contains(&format!("GGUF version {version} is not supported")),
            "{err}"
        );
    }
}

/// A tensor of a GGML type candle does not read is refused naming the tensor and the type,
/// not as candle's "unknown dtype for tensor 99" (sixth pass, U1).
#[test]
fn an_unknown_tensor_type_names_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_model(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    // The tensor index entry of output_norm.weight: u64 name length, name, u32 dims, u64 per
    // dim, then its u32 type.
    let name = b"output_norm.weight";
    let mut at = bytes
        .windows(8 + name.len())
        .position(|w| w[..8] == (name.len() as u64).to_le_bytes() && &w[8..] == name)
        .unwrap()
        + 8
        + name.len();
    let dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    at += 4 + 8 * dims;
    assert_eq!(
        &bytes[at..at + 4],
        &0u32.to_le_bytes(),
        "the edit reaches an F32 type"
    );
    bytes[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    let err = Llama::load(&bad, &Device::Cpu).err().unwrap().to_string();
    assert!(
        err.contains("bad.gguf") && err.contains("tensor output_norm.weight has GGML type 99"),
        "{err}"
    );
}

/// An embedding length that is not the embedding's width is named as such, not as a RoPE
/// dimension that differs from the head size derived from it (sixth pass, B34).
#[test]
fn an_embedding_length_off_the_embeddings_width_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let bad = with_value(
        dir.path(),
        "llama.embedding_length",
        (2 * D as u32).to_le_bytes(),
    );
    let err = Llama::load(&bad, &Device::Cpu).err().unwrap().to_string();
    assert!(
        err.contains(&format!(
            "llama.embedding_length {} differs from the width {D} of token_embd.weight",
            2 * D
        )),
        "{err}"
    );
}
