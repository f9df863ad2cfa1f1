//! What a simulated model says: deterministic text from a seed and the prompt, log-normal output
//! lengths with a long tail, and the exact bytes of OpenRouter's SSE chunks.

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::openrouter::Message;

/// The vocabulary, as (raw text, JSON-escaped text). Multi-byte characters and escapes are in it
/// on purpose: clients must survive UTF-8 split across reads and escaped strings.
const WORDS: &[&str] = &[
    " the",
    " model",
    " answer",
    " data",
    " token",
    " and",
    " of",
    " to",
    " a",
    " in",
    " is",
    " that",
    " for",
    " it",
    " with",
    " as",
    " on",
    " this",
    " be",
    " are",
    " we",
    " can",
    " by",
    " from",
    " which",
    " not",
    " or",
    " have",
    " an",
    " will",
    " each",
    " its",
    " one",
    " first",
    " then",
    " so",
    " if",
    " when",
    " value",
    " function",
    " result",
    " number",
    " step",
    " consider",
    " because",
    " therefore",
    " however",
    " example",
    " case",
    " problem",
    " solution",
    " equation",
    " list",
    " time",
    " order",
    " set",
    " point",
    " line",
    " sum",
    " code",
    " return",
    " loop",
    " index",
    " array",
    " string",
    " matrix",
    " vector",
    " graph",
    " node",
    " edge",
    " path",
    " proof",
    " claim",
    " lemma",
    " theorem",
    " speculative",
    " decoding",
    " drafter",
    " layer",
    " hidden",
    " state",
    " training",
    " sample",
    " batch",
    " budget",
    " cost",
    " price",
    " provider",
    " endpoint",
    " latency",
    " throughput",
    ",",
    ".",
    ":",
    ";",
    " (",
    ")",
    " 1",
    " 2",
    " 3",
    " 42",
    " 2026",
    " x",
    " y",
    " n",
    " i",
    " k",
    " =",
    " +",
    " -",
    " *",
    " /",
    " café",
    " naïve",
    " Straße",
    " 東京",
    " 数据",
    " модель",
    " λ",
    " π",
    " →",
    " ≤",
    " —",
    " 🙂",
    " 🚀",
    "\n",
    "\n\n",
    " \"quoted\"",
    " back\\slash",
    "\t",
];

/// JSON-escapes `s` (quotes, backslashes and control characters).
pub(crate) fn json_escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
}

/// The vocabulary with each word JSON-escaped once.
pub(crate) struct Vocabulary {
    raw: &'static [&'static str],
    escaped: Vec<String>,
}

impl Vocabulary {
    pub(crate) fn new() -> Self {
        let escaped = WORDS
            .iter()
            .map(|w| {
                let mut s = String::new();
                json_escape(w, &mut s);
                s
            })
            .collect();
        Vocabulary {
            raw: WORDS,
            escaped,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }

    pub(crate) fn raw(&self, i: usize) -> &'static str {
        self.raw[i % self.raw.len()]
    }

    pub(crate) fn escaped(&self, i: usize) -> &str {
        &self.escaped[i % self.escaped.len()]
    }
}

impl Default for Vocabulary {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) use crate::store::prompts::{FNV_OFFSET, content_hash as prompt_hash, fnv1a};

/// splitmix64: a cheap stateless mix, so token `i` of a text is computed without replaying 0..i.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Prompt tokens as the simulator counts them: ~4 characters a token, plus 4 per message.
pub(crate) fn count_prompt_tokens(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|m| (m.content.chars().count() as u64).div_ceil(4) + 4)
        .sum::<u64>()
        .max(1)
}

/// The text of one response: which word each token is. The reference text depends only on the
/// seed and the prompt (plus the attempt when sampling is not greedy); a re-quantized endpoint
/// departs from it at `diverge_at`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TextPlan {
    pub text_seed: u64,
    pub diverge_at: Option<u64>,
    pub diverge_seed: u64,
}

impl TextPlan {
    pub(crate) fn word(&self, i: u64, vocab_len: usize) -> usize {
        let seed = match self.diverge_at {
            Some(d) if i >= d => self.diverge_seed,
            _ => self.text_seed,
        };
        (mix(seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d)) % vocab_len as u64) as usize
    }
}

/// Draws an output length from a log-normal with the given mean and log-space sigma.
pub(crate) fn draw_length(rng: &mut impl Rng, mean: f64, sigma: f64) -> u64 {
    let mean = mean.max(1.0);
    let sigma = sigma.clamp(0.0, 3.0);
    let mu = mean.ln() - sigma * sigma / 2.0;
    // Box-Muller.
    let u1: f64 = rng.random::<f64>().max(1e-12);
    let u2: f64 = rng.random();
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (mu + sigma * z).exp().round().clamp(1.0, 1e7) as u64
}

/// A seeded RNG for everything about one response that must not depend on the endpoint.
pub(crate) fn text_rng(text_seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(mix(text_seed ^ 0x5eed))
}

/// Formats SSE chunks of one response into a buffer.
pub(crate) struct ChunkWriter {
    /// `data: {"id":...,"provider":...,"choices":[{"index":0,"delta":{"role":"assistant",`
    prefix: String,
    /// Same up to `"choices":` for chunks without a choice body.
    head: String,
}

impl ChunkWriter {
    pub(crate) fn new(id: &str, created: i64, model: &str, provider: &str) -> Self {
        let mut head = String::with_capacity(160);
        head.push_str("data: {\"id\":\"");
        json_escape(id, &mut head);
        head.push_str("\",\"object\":\"chat.completion.chunk\",\"created\":");
        head.push_str(&created.to_string());
        head.push_str(",\"model\":\"");
        json_escape(model, &mut head);
        head.push_str("\",\"provider\":\"");
        json_escape(provider, &mut head);
        head.push_str("\",");
        let mut prefix = head.clone();
        prefix.push_str("\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",");
        ChunkWriter { prefix, head }
    }

    pub(crate) fn content(&self, escaped: &str, out: &mut String) {
        out.push_str(&self.prefix);
        out.push_str("\"content\":\"");
        out.push_str(escaped);
        out.push_str(
            "\"},\"finish_reason\":null,\"native_finish_reason\":null,\"logprobs\":null}]}\n\n",
        );
    }

    /// A reasoning delta as OpenRouter sends it: `content` empty, the text in `reasoning` and
    /// again in `reasoning_details`.
    pub(crate) fn reasoning(&self, escaped: &str, out: &mut String) {
        out.push_str(&self.prefix);
        out.push_str("\"content\":\"\",\"reasoning\":\"");
        out.push_str(escaped);
        out.push_str("\",\"reasoning_details\":[{\"type\":\"reasoning.text\",\"text\":\"");
        out.push_str(escaped);
        out.push_str("\",\"format\":\"unknown\",\"index\":0}]},\"finish_reason\":null,\"native_finish_reason\":null,\"logprobs\":null}]}\n\n");
    }

    pub(crate) fn finish(&self, reason: &str, out: &mut String) {
        out.push_str(&self.prefix);
        out.push_str("\"content\":\"\"},\"finish_reason\":\"");
        out.push_str(reason);
        out.push_str("\",\"native_finish_reason\":\"");
        out.push_str(reason);
        out.push_str("\",\"logprobs\":null}]}\n\n");
    }

    /// The usage chunk; `prompt` is `(prompt tokens, of which read from the cache)`.
    pub(crate) fn usage(
        &self,
        (prompt, cached): (u64, u64),
        completion: u64,
        reasoning: u64,
        cost_usd: &str,
        out: &mut String,
    ) {
        out.push_str(&self.head);
        out.push_str(&format!(
            "\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{},\"cost\":{cost_usd},\"is_byok\":false,\"prompt_tokens_details\":{{\"cached_tokens\":{cached},\"cache_write_tokens\":0}},\"cost_details\":{{\"upstream_inference_cost\":{cost_usd},\"upstream_inference_prompt_cost\":null,\"upstream_inference_completions_cost\":null}},\"completion_tokens_details\":{{\"reasoning_tokens\":{reasoning},\"image_tokens\":0}}}}}}\n\n",
            prompt + completion
        ));
    }

    /// The mid-stream error chunk: HTTP status stays 200, `finish_reason` is `error`.
    pub(crate) fn error(&self, code_json: &str, message: &str, provider: &str, out: &mut String) {
        out.push_str(&self.head);
        out.push_str("\"error\":{\"code\":");
        out.push_str(code_json);
        out.push_str(",\"message\":\"");
        json_escape(message, out);
        out.push_str("\",\"metadata\":{\"provider_name\":\"");
        json_escape(provider, out);
        out.push_str("\",\"raw\":\"upstream stream interrupted\",\"error_type\":\"provider_unavailable\"}},\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\",\"native_finish_reason\":\"error\"}]}\n\n");
    }

    /// A mid-stream error chunk carrying a given `error` object.
    pub(crate) fn error_object(&self, err: &serde_json::Value, out: &mut String) {
        out.push_str(&self.head);
        out.push_str("\"error\":");
        out.push_str(&err.to_string());
        out.push_str(",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\",\"native_finish_reason\":\"error\"}]}\n\n");
    }
}

pub(crate) const KEEPALIVE: &str = ": OPENROUTER PROCESSING\n\n";
pub(crate) const DONE: &str = "data: [DONE]\n\n";

/// A dollar amount in picodollars as a JSON number (`0.00023947`).
pub(crate) fn pico_to_json(pico: i64) -> String {
    let neg = pico < 0;
    let p = pico.unsigned_abs();
    let whole = p / 1_000_000_000_000;
    let frac = p % 1_000_000_000_000;
    let mut s = format!("{}{whole}.{frac:012}", if neg { "-" } else { "" });
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.push('0');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_vocabulary_is_valid_json() {
        let v = Vocabulary::new();
        for i in 0..v.len() {
            let parsed: String =
                serde_json::from_str(&format!("\"{}\"", v.escaped(i))).expect("valid");
            assert_eq!(parsed, v.raw(i));
        }
    }

    #[test]
    fn chunks_parse_as_json() {
        let w = ChunkWriter::new("gen-1", 5, "moonshotai/kimi-k2.5", "Chutes");
        let mut out = String::new();
        w.content("hi", &mut out);
        w.reasoning("\\\"q\\\"", &mut out);
        w.finish("length", &mut out);
        w.usage((3, 0), 2, 1, &pico_to_json(239_470_000), &mut out);
        w.error("\"server_error\"", "boom", "Chutes", &mut out);
        for ev in out.split("\n\n").filter(|e| !e.is_empty()) {
            let data = ev.strip_prefix("data: ").expect("data line");
            let v: serde_json::Value = serde_json::from_str(data).expect(data);
            assert_eq!(v["provider"], "Chutes");
        }
        assert!(out.contains("\"cost\":0.00023947,"));
    }

    #[test]
    fn money_json() {
        assert_eq!(pico_to_json(0), "0.0");
        assert_eq!(pico_to_json(1_500_000_000_000), "1.5");
        assert_eq!(pico_to_json(450_000), "0.00000045");
    }

    #[test]
    fn lengths_have_the_requested_mean() {
        let mut rng = SmallRng::seed_from_u64(1);
        let n = 20_000;
        let total: u64 = (0..n).map(|_| draw_length(&mut rng, 1700.0, 0.7)).sum();
        let mean = total as f64 / n as f64;
        assert!((mean - 1700.0).abs() < 60.0, "{mean}");
    }

    #[test]
    fn divergence_changes_only_the_tail() {
        let a = TextPlan {
            text_seed: 9,
            diverge_at: None,
            diverge_seed: 1,
        };
        let b = TextPlan {
            diverge_at: Some(5),
            ..a
        };
        let wa: Vec<usize> = (0..50).map(|i| a.word(i, 100)).collect();
        let wb: Vec<usize> = (0..50).map(|i| b.word(i, 100)).collect();
        assert_eq!(wa[..5], wb[..5]);
        assert_ne!(wa[5..], wb[5..]);
    }
}
