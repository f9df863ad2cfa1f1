//! The OpenRouter HTTP API (and the OpenAI-compatible subset other servers speak): catalog,
//! chat requests and streamed responses, the error taxonomy, and the redacted API key.

pub(crate) mod catalog;
mod cause;
mod chat_stream;
mod chunk;
mod chunk_prefix;
pub(crate) mod client;
pub(crate) mod error;
pub(crate) mod key;
mod pace;
pub(crate) mod request;
pub mod response;
pub(crate) mod roots;
mod scrub;
pub mod sse;
mod tool_call;
mod transport;

pub use catalog::{
    Endpoint, EndpointPricing, GenerationInfo, KeyInfo, Model, ModelEndpoints, Percentiles,
    split_variant,
};
pub use chat_stream::{ChatStream, StreamTimeouts};
pub use client::{ClientOptions, DEFAULT_BASE_URL, OpenRouterClient};
pub use error::{ApiError, ErrorKind, TimeoutKind};
pub use key::ApiKey;
pub use request::{
    ChatRequest, Effort, MaxPrice, Message, PerformanceTarget, ProviderPreferences, ProviderSort,
    Reasoning,
};
pub use response::{Completion, CostDetails, Progress, StreamAccumulator, Usage, UsageSource};
pub use tool_call::{FunctionCall, ToolCall};
pub use transport::direct::{Connector, TimedConnector, connector, h2_windows, tls_config};
