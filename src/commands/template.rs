//! `harvest template`: the chat templates built into the binary, listed or printed, so that a
//! trainer's side that reads a file (vLLM's `--chat-template` for speculators) gets the same
//! text `export --chat-template NAME` renders with, after a `cargo install` that ships no
//! `templates/` directory.

use crate::cli::{TemplateAction, TemplateArgs};
use crate::export::template::builtin::{self, BUILTINS};

use super::exit;
use super::stdout::{out, outln};

pub fn run(args: &TemplateArgs) -> u8 {
    match &args.action {
        TemplateAction::List => {
            for b in &BUILTINS {
                outln!(
                    "{:<28} {}'s own template with the final answer's reasoning kept",
                    b.name,
                    b.model
                );
            }
        }
        TemplateAction::Print { name } => {
            // The parser admits only the built-in names.
            if let Some(b) = builtin::find(name) {
                out!("{}", b.text);
            }
        }
    }
    exit::OK
}
