//! Domain types shared by every part of harvest: money, prices, token counts, endpoint identity
//! and quantization. Money is integer picodollars so that sums are exact and fit in atomics.

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount of US dollars, stored as integer picodollars (1e-12 USD).
///
/// A single output token at $0.45/M costs 450,000 pico; an i64 holds ~$9.2M, far beyond any run.
/// Integers keep sums exact and let the engine accrue cost in an `AtomicI64`.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd(i64);

impl Usd {
    pub const ZERO: Usd = Usd(0);
    pub const PICO_PER_USD: i64 = 1_000_000_000_000;

    pub const fn from_pico(pico: i64) -> Self {
        Usd(pico)
    }

    pub const fn pico(self) -> i64 {
        self.0
    }

    /// From a float dollar amount as the API reports it (`usage.cost`), rounded to the picodollar.
    /// f64 carries ~16 significant digits, so a cost like 0.00023947 converts exactly.
    pub fn from_f64(usd: f64) -> Self {
        if !usd.is_finite() {
            return Usd::ZERO;
        }
        Usd((usd * Self::PICO_PER_USD as f64).round() as i64)
    }

    /// Exact conversion from a decimal dollar amount, rounded half-even to the picodollar.
    pub fn from_decimal(usd: Decimal) -> Self {
        let pico = (usd * Decimal::from(Self::PICO_PER_USD)).round();
        Usd(pico.to_i64().unwrap_or(i64::MAX))
    }

    pub fn to_decimal(self) -> Decimal {
        Decimal::from(self.0) / Decimal::from(Self::PICO_PER_USD)
    }

    /// For display and ratios only; never for accounting.
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / Self::PICO_PER_USD as f64
    }

    pub fn saturating_add(self, other: Usd) -> Usd {
        Usd(self.0.saturating_add(other.0))
    }

    pub fn saturating_sub(self, other: Usd) -> Usd {
        Usd(self.0.saturating_sub(other.0))
    }
}

impl std::ops::Add for Usd {
    type Output = Usd;
    fn add(self, rhs: Usd) -> Usd {
        self.saturating_add(rhs)
    }
}

impl std::ops::AddAssign for Usd {
    fn add_assign(&mut self, rhs: Usd) {
        *self = self.saturating_add(rhs);
    }
}

impl std::ops::Sub for Usd {
    type Output = Usd;
    fn sub(self, rhs: Usd) -> Usd {
        self.saturating_sub(rhs)
    }
}

impl std::iter::Sum for Usd {
    fn sum<I: Iterator<Item = Usd>>(iter: I) -> Usd {
        iter.fold(Usd::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for Usd {
    /// `$12.34`, or more digits for sub-cent amounts so that small costs are not shown as $0.00.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.as_f64();
        if v != 0.0 && v.abs() < 0.01 {
            write!(f, "${v:.6}")
        } else {
            write!(f, "${v:.2}")
        }
    }
}

impl fmt::Debug for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Usd({})", self.to_decimal())
    }
}

/// Serialised as a JSON number of dollars with up to 12 decimals (what JSONL readers expect).
impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_f64())
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        Ok(Usd::from_f64(v))
    }
}

/// A price in USD per token, parsed exactly from the API's decimal strings.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price(Decimal);

impl Price {
    pub const ZERO: Price = Price(Decimal::ZERO);

    pub fn per_token(usd_per_token: Decimal) -> Self {
        Price(usd_per_token)
    }

    /// From a dollars-per-million-tokens figure, as operators write prices.
    pub fn per_million(usd_per_m: Decimal) -> Self {
        Price(usd_per_m / Decimal::from(1_000_000))
    }

    /// From a float $/M figure in a config file; converted through its shortest decimal text
    /// so that `2.2` means exactly 2.2.
    pub fn per_million_f64(usd_per_m: f64) -> Option<Self> {
        let d = Decimal::from_str(&usd_per_m.to_string()).ok()?;
        Some(Self::per_million(d))
    }

    pub fn usd_per_token(self) -> Decimal {
        self.0
    }

    pub fn usd_per_million(self) -> Decimal {
        (self.0 * Decimal::from(1_000_000)).normalize()
    }

    /// Dollars per million tokens as a float, for display and statistics (never for money).
    pub fn usd_per_million_f64(self) -> f64 {
        self.usd_per_million().to_f64().unwrap_or(f64::NAN)
    }

    /// Cost of `tokens` at this price, exact then rounded once to the picodollar.
    pub fn cost(self, tokens: u64) -> Usd {
        Usd::from_decimal(self.0 * Decimal::from(tokens))
    }

    /// Picodollars per token, rounded: for cheap running accrual on the hot path.
    pub fn pico_per_token(self) -> i64 {
        Usd::from_decimal(self.0).pico()
    }

    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }
}

impl fmt::Display for Price {
    /// `$2.20/M`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_m = self.usd_per_million().to_f64().unwrap_or(f64::NAN);
        write!(f, "${per_m:.2}/M")
    }
}

impl fmt::Debug for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Price({}/token)", self.0)
    }
}

impl FromStr for Price {
    type Err = rust_decimal::Error;
    /// Parses the API's USD-per-token string; scientific notation ("4.5e-7") is accepted too.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        Decimal::from_str(s)
            .or_else(|_| Decimal::from_scientific(s))
            .map(Price)
    }
}

/// Serialised as the API does: a decimal string of USD per token.
impl Serialize for Price {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.normalize().to_string())
    }
}

impl<'de> Deserialize<'de> for Price {
    /// Accepts a string (the API) or a number (some third-party servers).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            F(f64),
        }
        match Raw::deserialize(d)? {
            Raw::S(s) => Price::from_str(&s)
                .map_err(|e| serde::de::Error::custom(format!("bad price {s:?}: {e}"))),
            Raw::F(f) => Decimal::from_str(&f.to_string())
                .map(Price)
                .map_err(|e| serde::de::Error::custom(format!("bad price {f}: {e}"))),
        }
    }
}

/// A count of tokens.
#[derive(
    Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Tokens(pub u64);

impl fmt::Display for Tokens {
    /// `1,234` below a million, `9.1M` above.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 1_000_000 {
            write!(f, "{:.1}M", self.0 as f64 / 1e6)
        } else {
            f.write_str(&group_thousands(self.0))
        }
    }
}

/// `1234567` → `1,234,567`.
/// Bytes in whole megabytes (10^6), grouped: `1,234 MB`.
pub fn megabytes(bytes: u64) -> String {
    format!("{} MB", group_thousands(bytes / 1_000_000))
}

pub fn group_thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The routing slug of one endpoint (`chutes/int4`, `deepinfra`), the only handle OpenRouter's
/// `provider.order/only/ignore` accept for a single endpoint.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EndpointTag(pub String);

/// The non-default service tiers an endpoint tag can end in (OpenRouter's service-tiers guide).
const SERVICE_TIERS: [&str; 2] = ["priority", "flex"];

impl EndpointTag {
    pub fn new(s: impl Into<String>) -> Self {
        EndpointTag(s.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The provider slug before any `/variant` suffix: `chutes/int4` → `chutes`.
    pub fn base(&self) -> &str {
        Self::base_of(&self.0)
    }
    /// Whether `s` is made only of the characters tags and precisions are made of
    /// (`chutes/int4`, `fp8`, `novita/fp8:free`): text a server sent that may be written into
    /// a config or shown as a name (anything else is shown as `?`, never written).
    pub fn is_plain(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '.' | ':' | '-'))
    }

    /// [`EndpointTag::base`] of a tag held as a plain string.
    pub fn base_of(tag: &str) -> &str {
        tag.split('/').next().unwrap_or(tag)
    }

    /// Whether a slug in `provider.order`, `only` or `ignore` reaches the endpoint tagged
    /// `tag`: its full tag reaches it alone, a base provider slug every endpoint of that
    /// provider ("a base provider slug ... matches all endpoints of that provider",
    /// OpenRouter's provider-selection docs). Case does not matter.
    /// A service-tier endpoint (`openai/priority`, `google-vertex/flex`) is reached by its
    /// full tag only: "service tier endpoints ... are not matched by base slugs" (same page,
    /// and guides/features/service-tiers.mdx; docs/openrouter-routing-facts.md).
    pub fn reached_by(tag: &str, slug: &str) -> bool {
        let s = slug.trim();
        if s.eq_ignore_ascii_case(tag) {
            return true;
        }
        let tier = tag
            .split_once('/')
            .is_some_and(|(_, v)| SERVICE_TIERS.iter().any(|t| v.eq_ignore_ascii_case(t)));
        !tier && s.eq_ignore_ascii_case(Self::base_of(tag))
    }
}

impl fmt::Display for EndpointTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for EndpointTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Weight precision an endpoint serves, as OpenRouter reports it. Open: values we do not know
/// are kept verbatim in `Other`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Quantization {
    Int4,
    Int8,
    Fp4,
    Mxfp4,
    Nvfp4,
    Fp6,
    Fp8,
    Mxfp8,
    Fp16,
    Bf16,
    Fp32,
    /// The API says `unknown`, or gives null / nothing.
    Unknown,
    Other(String),
}

impl Quantization {
    pub fn parse(s: &str) -> Self {
        match s.trim().to_ascii_lowercase().as_str() {
            "int4" => Self::Int4,
            "int8" => Self::Int8,
            "fp4" => Self::Fp4,
            "mxfp4" => Self::Mxfp4,
            "nvfp4" => Self::Nvfp4,
            "fp6" => Self::Fp6,
            "fp8" => Self::Fp8,
            "mxfp8" => Self::Mxfp8,
            "fp16" => Self::Fp16,
            "bf16" => Self::Bf16,
            "fp32" => Self::Fp32,
            "" | "unknown" | "null" => Self::Unknown,
            _ => Self::Other(s.trim().to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Int4 => "int4",
            Self::Int8 => "int8",
            Self::Fp4 => "fp4",
            Self::Mxfp4 => "mxfp4",
            Self::Nvfp4 => "nvfp4",
            Self::Fp6 => "fp6",
            Self::Fp8 => "fp8",
            Self::Mxfp8 => "mxfp8",
            Self::Fp16 => "fp16",
            Self::Bf16 => "bf16",
            Self::Fp32 => "fp32",
            Self::Unknown => "unknown",
            Self::Other(s) => s,
        }
    }

    /// Weight bits, when the format says. Used to tell "native or wider" from "re-quantized".
    pub fn bits(&self) -> Option<u32> {
        match self {
            Self::Int4 | Self::Fp4 | Self::Mxfp4 | Self::Nvfp4 => Some(4),
            Self::Fp6 => Some(6),
            Self::Int8 | Self::Fp8 | Self::Mxfp8 => Some(8),
            Self::Fp16 | Self::Bf16 => Some(16),
            Self::Fp32 => Some(32),
            Self::Unknown | Self::Other(_) => None,
        }
    }

    /// Whether OpenRouter's `provider.quantizations` filter value `filter` selects this endpoint:
    /// `fp4` also matches mxfp4 and nvfp4, `fp8` also matches mxfp8 (quantization-levels.mdx).
    pub fn matches_filter(&self, filter: &Quantization) -> bool {
        match filter {
            Self::Fp4 => matches!(self, Self::Fp4 | Self::Mxfp4 | Self::Nvfp4),
            Self::Fp8 => matches!(self, Self::Fp8 | Self::Mxfp8),
            f => self == f,
        }
    }

    /// All values of the documented enum, in the API's order.
    pub fn known() -> [Quantization; 12] {
        [
            Self::Int4,
            Self::Int8,
            Self::Fp4,
            Self::Mxfp4,
            Self::Nvfp4,
            Self::Fp6,
            Self::Fp8,
            Self::Mxfp8,
            Self::Fp16,
            Self::Bf16,
            Self::Fp32,
            Self::Unknown,
        ]
    }
}

impl fmt::Display for Quantization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Quantization {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Quantization {
    /// Null and missing mean `Unknown` (use `#[serde(default)]` on the field).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        Ok(s.map_or(Quantization::Unknown, |s| Quantization::parse(&s)))
    }
}

#[allow(clippy::derivable_impls)]
impl Default for Quantization {
    fn default() -> Self {
        Quantization::Unknown
    }
}

/// A run's clock, `00:12:41`: the time since its start in every view and progress line.
pub fn clock(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    format!("{:02}:{:02}:{:02}", s / 3600, (s % 3600) / 60, s % 60)
}

/// A duration for people, the one format of every view: `45s`, `12m03s`, `1h02m`, `2d04h`;
/// `-` when unknown (not finite or negative).
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".into();
    }
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3_600),
    }
}

/// An RFC 3339 timestamp in UTC with milliseconds (`2026-12-01T11:07:53.123Z`): the one format
/// of every timestamp harvest writes.
pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_reach_endpoints_as_openrouter_documents() {
        // (endpoint tag, slug, reached)
        let cases = [
            ("deepinfra", "deepinfra", true),
            ("deepinfra/turbo", "deepinfra", true),
            ("deepinfra/turbo", "deepinfra/turbo", true),
            ("deepinfra", "deepinfra/turbo", false),
            ("deepinfra/fp4", "deepinfra/turbo", false),
            ("google-vertex/us-east5", "google-vertex", true),
            ("Together/INT4", "together/int4", true),
            ("together/int4", " together ", true),
            // Service tiers are opt-in: a base slug does not reach them.
            ("openai/priority", "openai", false),
            ("google-vertex/flex", "google-vertex", false),
            ("openai/priority", "openai/priority", true),
            ("novita", "novitaai", false),
        ];
        for (tag, slug, want) in cases {
            assert_eq!(EndpointTag::reached_by(tag, slug), want, "{slug} -> {tag}");
        }
    }

    #[test]
    fn a_run_clock_reads_hours_minutes_seconds() {
        assert_eq!(clock(761.0), "00:12:41");
        assert_eq!(clock(-3.0), "00:00:00");
    }

    #[test]
    fn durations_read_the_same_everywhere() {
        let cases = [
            (0.0, "0s"),
            (45.2, "45s"),
            (59.4, "59s"),
            (723.0, "12m03s"),
            (760.0, "12m40s"),
            (3725.0, "1h02m"),
            (30_000.0, "8h20m"),
            (187_200.0, "2d04h"),
            (f64::INFINITY, "-"),
            (-1.0, "-"),
        ];
        for (secs, text) in cases {
            assert_eq!(duration(secs), text, "{secs}");
        }
    }

    #[test]
    fn price_parses_exactly_and_costs_round_once() {
        let p: Price = "0.00000045".parse().expect("price");
        assert_eq!(p.usd_per_million(), Decimal::from_str("0.45").expect("dec"));
        // 10M input tokens at $0.45/M is exactly $4.50.
        assert_eq!(p.cost(10_000_000), Usd::from_pico(4_500_000_000_000));
        let long: Price = "0.00000008333333333333334".parse().expect("price");
        // 12M tokens: 1.0000000000000008 USD, rounded to the pico.
        assert_eq!(long.cost(12_000_000), Usd::from_pico(1_000_000_000_000));
        let sci: Price = "4.5e-7".parse().expect("sci");
        assert_eq!(sci, p);
    }

    #[test]
    fn price_from_json_string_or_number() {
        let p: Price = serde_json::from_str("\"0.0000022\"").expect("string");
        assert_eq!(p, Price::per_million(Decimal::from_str("2.2").expect("d")));
        let q: Price = serde_json::from_str("0.0000022").expect("number");
        assert_eq!(p, q);
        assert!(serde_json::from_str::<Price>("\"abc\"").is_err());
        assert_eq!(p.to_string(), "$2.20/M");
    }

    #[test]
    fn usd_from_api_float() {
        assert_eq!(Usd::from_f64(0.00023947).pico(), 239_470_000);
        assert_eq!(Usd::from_f64(f64::NAN), Usd::ZERO);
        assert_eq!(Usd::from_pico(41_270_000_000_000).to_string(), "$41.27");
        assert_eq!(Usd::from_f64(0.000239).to_string(), "$0.000239");
    }

    #[test]
    fn quantization_is_open_and_filters_families() {
        assert_eq!(Quantization::parse("INT4"), Quantization::Int4);
        assert_eq!(
            Quantization::parse("w4a16"),
            Quantization::Other("w4a16".into())
        );
        let q: Quantization = serde_json::from_str("null").expect("null");
        assert_eq!(q, Quantization::Unknown);
        assert!(Quantization::Nvfp4.matches_filter(&Quantization::Fp4));
        assert!(Quantization::Mxfp8.matches_filter(&Quantization::Fp8));
        assert!(!Quantization::Int4.matches_filter(&Quantization::Fp4));
        assert!(!Quantization::Fp4.matches_filter(&Quantization::Nvfp4));
    }

    #[test]
    fn thousands_and_tokens() {
        assert_eq!(group_thousands(1_234_567), "1,234,567");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(Tokens(9_100_000).to_string(), "9.1M");
        assert_eq!(EndpointTag::new("chutes/int4").base(), "chutes");
    }
}
