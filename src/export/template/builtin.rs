//! Chat templates shipped in the binary, named on the command line instead of a file:
//! variants of Moonshot's Kimi templates that render a conversation's last answer with its
//! reasoning. Moonshot's own put the last plain answer in the history, as `<think></think>`,
//! so a drafter trained through them never sees the thinking (research/trainer-review.md);
//! each variant changes only where that search starts (the files say how, and keep
//! Moonshot's license notice, templates/LICENSE-moonshotai).

/// A template shipped in the binary.
pub(crate) struct Builtin {
    pub(crate) name: &'static str,
    pub(crate) text: &'static str,
    /// The model whose own template it replaces (rows naming it are steered here).
    pub(crate) model: &'static str,
}

pub(crate) const BUILTINS: [Builtin; 2] = [
    Builtin {
        name: "kimi-k2.5-final-turn",
        text: include_str!("../../../templates/kimi-k2.5-final-turn.jinja"),
        model: "moonshotai/kimi-k2.5",
    },
    Builtin {
        name: "kimi-k2-thinking-final-turn",
        text: include_str!("../../../templates/kimi-k2-thinking-final-turn.jinja"),
        model: "moonshotai/kimi-k2-thinking",
    },
];

/// The built-in template for rows of `model`, when its own template drops the last answer's
/// reasoning (a provider's suffix such as `:free` or a date is ignored).
pub(crate) fn for_model(model: &str) -> Option<&'static Builtin> {
    let base = model.split(':').next().unwrap_or(model);
    BUILTINS.iter().find(|b| base == b.model)
}

/// The built-in template of that name.
pub(crate) fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// The names, for an error message.
pub(crate) fn names() -> String {
    BUILTINS.map(|b| b.name).join(", ")
}
