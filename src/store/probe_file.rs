//! The probe's result file (`probe.json` in an output directory): its format, and the one
//! place that reads and writes it. `harvest probe` writes it; runs, `estimate` and `providers`
//! read the agreement per endpoint from it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::domain::Usd;
use crate::store::output::{SpendEntry, append_spend};

/// Version of the JSON form.
pub const SCHEMA: u32 = 1;

/// The file name in an output directory.
pub const FILE_NAME: &str = "probe.json";

/// How a probe is run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeSettings {
    pub prompts: usize,
    pub max_tokens: u32,
    pub seed: u64,
    /// Requests in flight across all endpoints.
    pub concurrency: usize,
    /// Attempts per prompt and endpoint (retryable errors only).
    pub attempts: u32,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        ProbeSettings {
            prompts: 8,
            max_tokens: 64,
            seed: 42,
            concurrency: 16,
            attempts: 3,
        }
    }
}

/// An endpoint's scores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointScore {
    pub tag: String,
    pub provider: String,
    pub quantization: String,
    pub is_reference: bool,
    /// False when the endpoint does not take `temperature`: its answers are sampled with the
    /// provider's own settings, so disagreement says little.
    pub greedy: bool,
    pub prompts: u64,
    /// Prompts answered (no error, non-empty).
    pub answered: u64,
    /// Prompts compared with the reference (both answered).
    pub compared: u64,
    /// Share of compared answers identical to the reference's.
    pub exact_match_rate: Option<f64>,
    /// Mean word-level similarity to the reference (1 = identical), over compared answers.
    pub similarity: Option<f64>,
    pub mean_output_tokens: Option<f64>,
    /// Share of answered prompts that ran to max_tokens.
    pub length_rate: Option<f64>,
    /// Share of prompts answered with nothing.
    pub empty_rate: f64,
    pub errors: u64,
    /// The last error, for the operator.
    pub last_error: Option<String>,
    pub cost: Usd,
    /// Tokens an SSE event carried over the probe's answers (24 events at least): what
    /// `--cancel` reads its close's events by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_event: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub schema: u32,
    pub model: String,
    pub created_at: String,
    /// The endpoint the others are compared with; `None`: the per-prompt majority answer.
    pub reference: Option<String>,
    pub settings: ProbeSettings,
    pub estimated_cost: Usd,
    pub cost: Usd,
    /// Best agreement first.
    pub endpoints: Vec<EndpointScore>,
    /// `--cancel`: whether closing a stream stopped each endpoint's bill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancel: Vec<CancelFinding>,
}

/// One endpoint's close, measured on purpose (`harvest probe --cancel`): a stream closed after
/// a few tokens, then looked up at `/generation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelFinding {
    pub tag: String,
    /// Token events received before the close.
    pub received: u64,
    /// Completion tokens the generation was billed, when it was found.
    pub billed: Option<u64>,
    pub verdict: CancelVerdict,
    /// What the close cost.
    pub cost: Usd,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_id: Option<String>,
    /// Why nothing could be read, when so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What one close said.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelVerdict {
    /// Billed about what was received: closing stops the bill.
    Stops,
    /// Billed well past what was received: the provider went on generating.
    BillsPast,
    /// Neither clearly (the answer ended near the close, or the counts differ in unit).
    Unclear,
    /// No reading: the request failed, or the generation was not found in time.
    NotMeasured,
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {msg}")]
pub struct ProbeFileError {
    pub path: PathBuf,
    pub msg: String,
}

impl ProbeReport {
    /// Agreement per endpoint tag: the similarity to the reference, for endpoints that
    /// decoded greedily (a sampled answer's disagreement proves nothing).
    pub fn agreement(&self) -> HashMap<String, f64> {
        self.endpoints
            .iter()
            .filter(|e| e.greedy)
            .filter_map(|e| e.similarity.map(|s| (e.tag.clone(), s)))
            .collect()
    }

    pub fn load(path: &Path) -> Result<ProbeReport, ProbeFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| ProbeFileError {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| ProbeFileError {
            path: path.to_path_buf(),
            msg: format!("not a harvest probe result: {e}"),
        })
    }

    /// The probe result of an output directory, when one is there.
    pub fn in_dir(dir: &Path) -> Option<Result<ProbeReport, ProbeFileError>> {
        let path = dir.join(FILE_NAME);
        path.is_file().then(|| ProbeReport::load(&path))
    }

    /// The agreement per endpoint of the probe result in an output directory, when it probed
    /// `model` (empty when there is none, or it probed another model).
    pub fn agreement_in(dir: &Path, model: &str) -> Result<HashMap<String, f64>, ProbeFileError> {
        match ProbeReport::in_dir(dir) {
            Some(Ok(p)) if p.model == model => Ok(p.agreement()),
            Some(Ok(_)) | None => Ok(HashMap::new()),
            Some(Err(e)) => Err(e),
        }
    }

    /// Saves the result and books its spend in the directory's ledger.
    pub fn save(
        &self,
        path: &Path,
        ledger_dir: &Path,
        spend: &[SpendEntry],
    ) -> Result<(), ProbeFileError> {
        let io = |p: &Path, e: std::io::Error| ProbeFileError {
            path: p.to_path_buf(),
            msg: e.to_string(),
        };
        append_spend(ledger_dir, spend).map_err(|e| io(ledger_dir, e))?;
        let bytes =
            serde_json::to_vec_pretty(self).map_err(|e| io(path, std::io::Error::other(e)))?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        crate::store::output::write_atomic(path, &bytes).map_err(|e| io(path, e))
    }
}
